package vulkan_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/trace"
)

// Issue 15.1: one session used from two goroutines died with "concurrent
// map writes" in (*stream).descriptorSet, heap corruption or SIGSEGV. Now
// sessions of one engine run side by side, each exact, and goroutines
// sharing one session get ErrSessionBusy for the calls that find it in use;
// those that run give the serial continuation at their position.
func TestSessionsAndOneSharedSessionFromManyGoroutines(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q8_0, 21)
	e, err := engine.NewEngine(m, testBackend(t))
	require.NoError(t, err)
	ctx := context.Background()
	tokens := testTokens[:5]
	const fits = 4
	o := engine.Options{Capture: engine.CaptureOf("blocks.1.hook_resid_post", "blocks.0.attn.hook_pattern"), Logits: engine.LogitsAll}

	serial, err := e.NewSession(fits * len(tokens))
	require.NoError(t, err)
	want := make([]*trace.Trace, fits)
	for k := range want {
		want[k], err = serial.Prefill(ctx, tokens, o)
		require.NoError(t, err)
		require.NoError(t, want[k].Load())
	}
	serial.Close()

	shared, err := e.NewSession(fits * len(tokens))
	require.NoError(t, err)
	defer shared.Close()
	var mu sync.Mutex
	var got []*trace.Trace
	var errs []error
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			if g%2 == 0 { // a session of its own: always runs
				s, err := e.NewSession(fits * len(tokens))
				if err == nil {
					var tr *trace.Trace
					tr, err = s.Prefill(ctx, tokens, o)
					if err == nil {
						err = tr.Load() // before its session closes
					}
					s.Close()
					if err == nil && tr.Pos0 == 0 {
						mu.Lock()
						got = append(got, tr)
						mu.Unlock()
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				return
			}
			for range 4 {
				tr, err := shared.Prefill(ctx, tokens, o)
				mu.Lock()
				switch {
				case err == nil:
					got = append(got, tr)
				case errors.Is(err, engine.ErrSessionBusy), errors.Is(err, engine.ErrCacheFull):
				default:
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.GreaterOrEqual(t, len(got), 3+1, "the own sessions' prefills and at least one on the shared session")
	for _, tr := range got {
		k := tr.Pos0 / len(tokens)
		for _, name := range want[k].Names {
			require.Equal(t, want[k].Tensor(name).Data, tr.Tensor(name).Data, "pos %d %s", tr.Pos0, name)
		}
	}
}

// Issue 15.6 and 15.13 on Vulkan: an edit whose Off+(Rows-1)*Stride+Cols
// overflowed passed the check and the shader got truncated 32-bit values;
// EditOp(99) was refused here but not on CPU. Both backends now refuse the
// same edits with the shared check's words.
func TestEditBoundsAreTheSharedCheck(t *testing.T) {
	st := testBackend(t).NewStream()
	defer st.Close()
	const n = 64
	x, err := st.Alloc("x", n)
	require.NoError(t, err)
	src, err := st.Alloc("src", 16)
	require.NoError(t, err)
	bad := []backend.Edit{
		{Op: backend.EditFill, Off: -999, Rows: 1, Cols: 4},
		{Op: backend.EditFill, Off: 64, Rows: 3, Cols: 4, Stride: -8},
		{Op: backend.EditScale, Off: 1 << 62, Rows: 1, Cols: 4},
		{Op: backend.EditFill, Rows: 5, Cols: 4, Stride: 1 << 62},
		{Op: backend.EditFill, Rows: 3, Cols: 4, Stride: 1<<63 - 1},
		{Op: backend.EditFill, Rows: 1 << 40, Cols: 4, Stride: 4},
		{Op: backend.EditFill, Off: 1<<32 + 8, Rows: 1, Cols: 4}, // truncates to 8 in 32 bits
		{Op: backend.EditMean, Rows: 2, Cols: 8, Stride: 4},
		{Op: backend.EditOp(99), Rows: 1, Cols: 4},
		{Op: backend.EditSet, Rows: 1, Cols: 4},
		{Op: backend.EditSet, Rows: 1, Cols: 4, Src: src, SrcOff: -5},
		{Op: backend.EditAdd, Rows: 1, Cols: 4, Src: src, SrcOff: 1<<32 + 1},
		{Op: backend.EditSet, Rows: 3, Cols: 4, Stride: 4, Src: src, SrcStride: 1<<63 - 1},
	}
	for i, e := range bad {
		require.NotPanics(t, func() { st.Edit(x, e) })
		err := st.Sync()
		want := e.Check(n)
		require.Error(t, want, "edit %d", i)
		require.EqualError(t, err, "vulkan: x: "+want.Error(), "edit %d", i)
	}
	// What is inside still runs, and the stream works after the refusals.
	st.Write(x, 0, make([]float32, n))
	st.Write(src, 0, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	st.Edit(x, backend.Edit{Op: backend.EditFill, Off: n - 4, Rows: 1, Cols: 4, Scalar: 2})
	st.Edit(x, backend.Edit{Op: backend.EditSet, Rows: 2, Cols: 4, Stride: 16, Src: src, SrcStride: 4})
	st.Edit(x, backend.Edit{Op: backend.EditAdd, Off: 32, Rows: 1, Cols: 4, Src: src, SrcOff: 12, SrcStride: 1 << 40, Stride: 1 << 40, Scalar: 1})
	got := make([]float32, n)
	require.NoError(t, st.Read(x, 0, got))
	require.Equal(t, []float32{1, 2, 3, 4}, got[:4])
	require.Equal(t, []float32{5, 6, 7, 8}, got[16:20])
	require.Equal(t, []float32{13, 14, 15, 16}, got[32:36])
	require.Equal(t, []float32{2, 2, 2, 2}, got[60:])
}

// Offsets near the top of int wrapped off+n negative and passed the bounds
// checks (then 4*off was truncated into a device offset).
func TestWriteReadCopyOffsetsDoNotWrap(t *testing.T) {
	st := testBackend(t).NewStream()
	defer st.Close()
	x, err := st.Alloc("x", 8)
	require.NoError(t, err)
	const huge = int(^uint(0) >> 1) // MaxInt
	st.Write(x, huge, make([]float32, 4))
	require.ErrorContains(t, st.Sync(), "write of 4 elements at")
	st.Copy(x, huge, x, 0, 4)
	require.ErrorContains(t, st.Sync(), "copy of 4 elements")
	require.ErrorContains(t, st.Read(x, huge, make([]float32, 4)), "read of 4 elements at")
	require.NoError(t, st.Sync())
}
