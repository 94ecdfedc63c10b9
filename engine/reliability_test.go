package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// A session used from several goroutines at once refuses the calls that
// find it busy, with ErrSessionBusy, and every call that runs gives what a
// serial run gives: the prefills that got through, in whatever order, are
// the serial continuations at their positions. Issue 15.1: on CPU 9 of 40
// prefills returned wrong logits with no error.
func TestOneSessionFromManyGoroutinesRefusesOrMatchesSerial(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 11)
	e := newEngine(t, m)
	tokens := testTokens[:6]
	const fits = 6
	o := engine.Options{Capture: engine.CaptureOf("blocks.1.hook_resid_post"), Logits: engine.LogitsAll}

	serial, err := e.NewSession(fits * len(tokens))
	require.NoError(t, err)
	want := make([]*trace.Trace, fits)
	for k := range want {
		want[k], err = serial.Prefill(context.Background(), tokens, o)
		require.NoError(t, err)
	}
	serial.Close()

	s, err := e.NewSession(fits * len(tokens))
	require.NoError(t, err)
	defer s.Close()
	var mu sync.Mutex
	var got []*trace.Trace
	busy := 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 12 {
				tr, err := s.Prefill(context.Background(), tokens, o)
				mu.Lock()
				switch {
				case err == nil:
					got = append(got, tr)
				case errors.Is(err, engine.ErrSessionBusy):
					busy++
				case errors.Is(err, engine.ErrCacheFull):
				default:
					t.Errorf("unexpected error: %v", err)
				}
				mu.Unlock()
				_ = s.Pos()
			}
		})
	}
	wg.Wait()
	require.Len(t, got, fits, "every position was prefilled once (busy refusals: %d)", busy)
	seen := map[int]bool{}
	for _, tr := range got {
		k := tr.Pos0 / len(tokens)
		require.False(t, seen[k], "position %d prefilled twice", tr.Pos0)
		seen[k] = true
		for _, name := range want[k].Names {
			require.Equal(t, want[k].Tensor(name).Data, tr.Tensor(name).Data, "pos %d %s", tr.Pos0, name)
		}
	}
	require.Equal(t, fits*len(tokens), s.Pos())
}

// While one goroutine's prefill is in progress (held in a host hook), every
// call on the session or its runs from another goroutine is refused with
// ErrSessionBusy and changes nothing; a Close then takes effect when the
// prefill ends.
func TestBusySessionRefusesEveryCallAndClosesAfter(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 12)
	e := newEngine(t, m)
	want := prefill(t, e, testTokens, engine.Options{Logits: engine.LogitsAll})

	s, err := e.NewSession(0)
	require.NoError(t, err)
	ctx := context.Background()
	stepping, err := s.Start(ctx, testTokens[:3], engine.Options{Capture: engine.CaptureAll()})
	require.NoError(t, err)
	require.True(t, stepping.Next())

	inside, release := make(chan struct{}), make(chan struct{})
	hold := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(string, []int, []float32) error {
		close(inside)
		<-release
		return nil
	}}
	done := make(chan struct{})
	var tr *trace.Trace
	var perr error
	go func() {
		defer close(done)
		tr, perr = s.Prefill(ctx, testTokens, engine.Options{Logits: engine.LogitsAll, Hooks: []engine.Hook{hold}})
	}()
	<-inside

	_, err = s.Prefill(ctx, testTokens, engine.Options{})
	require.ErrorIs(t, err, engine.ErrSessionBusy)
	_, err = s.Start(ctx, testTokens, engine.Options{})
	require.ErrorIs(t, err, engine.ErrSessionBusy)
	_, err = s.Generate(ctx, testTokens, 3)
	require.ErrorIs(t, err, engine.ErrSessionBusy)
	require.ErrorIs(t, s.Reset(), engine.ErrSessionBusy)
	require.ErrorIs(t, s.Rewind(0), engine.ErrSessionBusy)
	require.False(t, stepping.Next())
	require.ErrorIs(t, stepping.Err(), engine.ErrSessionBusy)
	_, err = stepping.Trace()
	require.ErrorIs(t, err, engine.ErrSessionBusy)
	_, err = stepping.Finish()
	require.ErrorIs(t, err, engine.ErrSessionBusy)
	require.ErrorIs(t, stepping.RunTo("logits"), engine.ErrSessionBusy)
	require.Equal(t, 0, s.Pos())
	s.Close() // returns at once; the prefill in progress closes the session as it ends

	close(release)
	<-done
	require.NoError(t, perr)
	require.Equal(t, want.Tensor("logits").Data, tr.Tensor("logits").Data, "the held prefill is untouched")
	_, err = s.Prefill(ctx, testTokens, engine.Options{})
	require.ErrorIs(t, err, engine.ErrSessionClosed)
	require.False(t, stepping.Next())
	require.ErrorContains(t, stepping.Err(), "took its buffers", "the held prefill superseded the stepping run")
}

// Issue 15.7: a prefill on a closed session panicked on CPU (index out of
// range in run.go). Every call on a closed or nil session, run or engine is
// an error.
func TestClosedAndNilReceiversAreErrors(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 13)
	e := newEngine(t, m)
	ctx := context.Background()
	s, err := e.NewSession(0)
	require.NoError(t, err)
	r, err := s.Start(ctx, testTokens, engine.Options{})
	require.NoError(t, err)
	s.Close()
	s.Close() // twice is harmless
	_, err = s.Prefill(ctx, testTokens, engine.Options{})
	require.ErrorIs(t, err, engine.ErrSessionClosed)
	_, err = s.Start(ctx, testTokens, engine.Options{})
	require.ErrorIs(t, err, engine.ErrSessionClosed)
	g, err := s.Generate(ctx, testTokens, 2)
	require.ErrorIs(t, err, engine.ErrSessionClosed)
	require.Equal(t, engine.StopError, g.Stop)
	require.ErrorIs(t, s.Reset(), engine.ErrSessionClosed)
	require.ErrorIs(t, s.Rewind(0), engine.ErrSessionClosed)
	require.False(t, r.Next())
	_, err = r.Finish()
	require.ErrorIs(t, err, engine.ErrSessionClosed)
	r.Close()

	var ns *engine.Session
	_, err = ns.Prefill(ctx, testTokens, engine.Options{})
	require.ErrorContains(t, err, "nil *Session")
	require.Error(t, ns.Reset())
	ns.Close()
	require.Equal(t, 0, ns.Pos())
	var nr *engine.Run
	require.False(t, nr.Next())
	require.True(t, nr.Done())
	_, err = nr.Finish()
	require.ErrorContains(t, err, "nil *Run")
	nr.Close()

	var ne *engine.Engine
	_, err = ne.NewSession(0)
	require.ErrorContains(t, err, "nil or unbuilt *Engine")
	_, err = engine.NewEngine(nil, cpu.New(1))
	require.ErrorContains(t, err, "needs a model and a backend")
	_, err = engine.NewEngine(m, nil)
	require.ErrorContains(t, err, "needs a model and a backend")

	s, err = e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(nil, testTokens, engine.Options{}) //nolint:staticcheck // a nil context is what is tested
	require.ErrorContains(t, err, "nil context")
}

// Issue 15.13: NewSession(-5) was accepted.
func TestNewSessionRefusesNegativeCapacity(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.F32, 14))
	_, err := e.NewSession(-5)
	require.ErrorContains(t, err, "KV cache of -5 positions")
	_, err = e.NewSession(513)
	require.ErrorContains(t, err, "exceeds the model's context length 512")
	s, err := e.NewSession(0)
	require.NoError(t, err)
	require.Equal(t, 512, s.Capacity())
	s.Close()
}

// Issue 15.9: layer ranges that select nothing ran with only the logits
// captured, and a negative range captured every layer.
func TestCaptureLayerRangesOutsideTheModelAreRefused(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 15) // 2 layers
	e := newEngine(t, m)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	glob := []string{"blocks.*.hook_resid_post", "logits"}
	for _, c := range []struct {
		first, last int
		want        string
	}{
		{3, 1, "layer range 3..1 selects no layer"},
		{1, 0, "layer range 1..0 selects no layer: the last layer 0 is before the first 1"},
		{5, 9, "layer range 5..9 selects no layer: the model has 2 layers, 0..1"},
		{2, -1, "layer range 2..last selects no layer"},
		{0, 9, "layer range 0..9: layer 9 is past the model's last layer 1"},
		{-5, -2, "the first layer -5 is negative"},
		{0, -2, "the last layer -2 is negative"},
	} {
		_, err := s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.Capture{Globs: glob, FirstLayer: c.first, LastLayer: c.last}})
		require.ErrorContains(t, err, c.want, "%d..%d", c.first, c.last)
		require.Equal(t, 0, s.Pos())
	}
	for _, c := range [][2]int{{0, -1}, {1, 1}, {0, 1}, {1, -1}} {
		tr, err := s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.Capture{Globs: glob, FirstLayer: c[0], LastLayer: c[1]}})
		require.NoError(t, err, "%v", c)
		require.True(t, tr.Has("blocks.1.hook_resid_post"))
		require.NoError(t, s.Reset())
	}
	// A range without globs captures nothing, and is checked all the same:
	// nb.Layers without nb.Capture was silently ignored.
	require.ErrorContains(t, engine.Capture{FirstLayer: 7, LastLayer: 3}.Validate(&model.Config{Layers: 2}), "layer range 7..3 selects no layer")
	require.NoError(t, engine.Capture{}.Validate(&model.Config{Layers: 2}), "the zero capture: nothing, layer 0")
}

// A glob whose points all lie outside the layer range was dropped without a
// word (strata trace --capture blocks.0.attn.hook_pattern --layers 2:3 wrote
// only the logits), and a range beside globs of no layer was ignored.
func TestCaptureRangeThatKeepsNoneOfAGlobsPointsIsRefused(t *testing.T) {
	cfg := &model.Config{Arch: "llama", Layers: 4, DModel: 8, Heads: 2, KVHeads: 2, HeadDim: 4, FFN: 16, Vocab: 32, Context: 16}
	for _, c := range []struct {
		capture engine.Capture
		want    string
	}{
		{engine.Capture{Globs: []string{"blocks.0.attn.hook_pattern"}, FirstLayer: 2, LastLayer: 3},
			`pattern "blocks.0.attn.hook_pattern" matches only points outside the layer range 2..3 (blocks.0.attn.hook_pattern, ...)`},
		{engine.Capture{Globs: []string{"blocks.0.*", "logits"}, FirstLayer: 1, LastLayer: -1},
			`pattern "blocks.0.*" matches only points outside the layer range 1..3`},
		{engine.Capture{Globs: []string{"blocks.0.*", "blocks.3.*"}, FirstLayer: 3, LastLayer: -1}, // each glob, as each must match a point
			`pattern "blocks.0.*" matches only points outside the layer range 3..3`},
		{engine.Capture{Globs: []string{"hook_embed"}, FirstLayer: 1, LastLayer: 2},
			"the layer range 1..2 keeps none of the points asked for: hook_embed match no point in a layer"},
	} {
		require.ErrorContains(t, c.capture.Validate(cfg), c.want, "%+v", c.capture)
	}
	for _, c := range []engine.Capture{
		{Globs: []string{"blocks.*.hook_resid_post", "blocks.3.*"}, FirstLayer: 3, LastLayer: -1},
		{Globs: []string{"hook_embed", "blocks.*.hook_resid_post"}, FirstLayer: 1, LastLayer: 2},
		{Globs: []string{"hook_embed"}, LastLayer: -1}, // the whole model: no range asked for
		{Globs: []string{"*"}, FirstLayer: 3, LastLayer: 3},
	} {
		require.NoError(t, c.Validate(cfg), "%+v", c)
	}
}

// Issue 15.12: Patch from a nil trace panicked with a nil dereference.
func TestPatchFromNilTraceIsRefusedAtTheCheck(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.F32, 16))
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.Patch("blocks.0.hook_resid_pre", nil, nil)}})
	require.ErrorContains(t, err, `Patch("blocks.0.hook_resid_pre") has no source trace`)
	_, err = s.Start(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.Patch("blocks.0.hook_resid_pre", nil, []int{0})}})
	require.ErrorContains(t, err, "has no source trace")
	require.Equal(t, 0, s.Pos())
}

// Patch and PatchHead count negative rows from the end, as nb's positions
// do, and refuse a row past either end naming it.
func TestPatchRowsCountFromTheEnd(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.F32, 16))
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	ctx, n := context.Background(), len(testTokens)
	z := trace.LayerPoint(0, trace.AttnZ)
	src, err := s.Prefill(ctx, testTokens, engine.Options{Capture: engine.CaptureOf("*")})
	require.NoError(t, err)
	other := append([]int32{testTokens[1], testTokens[0]}, testTokens[2:]...)
	run := func(h engine.Hook) *trace.Trace {
		s.Reset()
		tr, err := s.Prefill(ctx, other, engine.Options{Capture: engine.CaptureOf("*"), Hooks: []engine.Hook{h}})
		require.NoError(t, err)
		return tr
	}
	resid := trace.LayerPoint(1, trace.ResidPre)
	require.Equal(t, run(engine.Patch(resid, src, []int{n - 1})).Tensor("logits").Data, run(engine.Patch(resid, src, []int{-1})).Tensor("logits").Data)
	require.Equal(t, run(engine.PatchHead(0, 1, src, n-2)).Tensor(z).Data, run(engine.PatchHead(0, 1, src, -2)).Tensor(z).Data)
	s.Reset()
	_, err = s.Prefill(ctx, other, engine.Options{Hooks: []engine.Hook{engine.Patch(resid, src, []int{-n - 1})}})
	require.ErrorContains(t, err, fmt.Sprintf("row %d is outside %s's %d rows", -n-1, resid, n))
	_, err = s.Prefill(ctx, other, engine.Options{Hooks: []engine.Hook{engine.PatchHead(0, 1, src, n)}})
	require.ErrorContains(t, err, fmt.Sprintf("position %d is outside %s's %d positions", n, z, n))
}

// badEdits are edits every backend must refuse, each with what the error
// says. Issue 15.6: on CPU they panicked (slice bounds out of range); on
// Vulkan Off+(Rows-1)*Stride+Cols overflowed and passed. Issue 15.13:
// EditOp(99) did nothing on CPU.
func badEdits(n int) []struct {
	name string
	e    backend.Edit
	want string
} {
	return []struct {
		name string
		e    backend.Edit
		want string
	}{
		{"negative offset", backend.Edit{Op: backend.EditFill, Off: -999, Rows: 1, Cols: 4}, "at offset -999 stride 0 falls outside"},
		{"negative stride", backend.Edit{Op: backend.EditFill, Off: 64, Rows: 3, Cols: 4, Stride: -8}, "stride -8 is less than the row length 4"},
		{"huge offset", backend.Edit{Op: backend.EditScale, Off: 1 << 62, Rows: 1, Cols: 4}, "falls outside the point's"},
		{"overflowing stride", backend.Edit{Op: backend.EditFill, Rows: 5, Cols: 4, Stride: 1 << 62}, "falls outside the point's"},
		{"wrapping stride", backend.Edit{Op: backend.EditFill, Rows: 3, Cols: 4, Stride: 1<<63 - 1}, "falls outside the point's"},
		{"huge rows", backend.Edit{Op: backend.EditFill, Rows: 1 << 40, Cols: 4, Stride: 4}, "falls outside the point's"},
		{"past the end", backend.Edit{Op: backend.EditFill, Off: n - 3, Rows: 1, Cols: 4}, fmt.Sprintf("falls outside the point's %d elements", n)},
		{"no rows", backend.Edit{Op: backend.EditFill, Rows: 0, Cols: 4}, "both must be at least 1"},
		{"negative cols", backend.Edit{Op: backend.EditFill, Rows: 1, Cols: -4}, "both must be at least 1"},
		{"overlapping rows", backend.Edit{Op: backend.EditMean, Rows: 2, Cols: 8, Stride: 4}, "rows would overlap"},
		{"unknown op", backend.Edit{Op: backend.EditOp(99), Rows: 1, Cols: 4}, "unknown operation EditOp(99)"},
		{"negative op", backend.Edit{Op: backend.EditOp(-1), Rows: 1, Cols: 4}, "unknown operation EditOp(-1)"},
		{"set without source", backend.Edit{Op: backend.EditSet, Rows: 1, Cols: 4}, "needs a source"},
	}
}

// BadSourceEdits are edits whose source view is out of range; src is a
// tensor of 16 elements.
func badSourceEdits(src backend.Tensor) []struct {
	name string
	e    backend.Edit
	want string
} {
	return []struct {
		name string
		e    backend.Edit
		want string
	}{
		{"negative source offset", backend.Edit{Op: backend.EditSet, Rows: 1, Cols: 4, Src: src, SrcOff: -5}, "at offset -5 stride 0"},
		{"huge source offset", backend.Edit{Op: backend.EditAdd, Rows: 1, Cols: 4, Src: src, SrcOff: 1 << 62}, "too short"},
		{"overflowing source stride", backend.Edit{Op: backend.EditSet, Rows: 3, Cols: 4, Stride: 4, Src: src, SrcStride: 1<<63 - 1}, "too short"},
		{"negative source stride", backend.Edit{Op: backend.EditSet, Rows: 3, Cols: 4, Stride: 4, Src: src, SrcOff: 12, SrcStride: -4}, "too short"},
	}
}

func TestEditBoundsAreCheckedIn64Bits(t *testing.T) {
	st := cpu.New(1).NewStream()
	const n = 64
	x, err := st.Alloc("x", n)
	require.NoError(t, err)
	src, err := st.Alloc("src", 16)
	require.NoError(t, err)
	cases := append(badEdits(n), badSourceEdits(src)...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NotPanics(t, func() { st.Edit(x, c.e) })
			err := st.Sync()
			require.ErrorContains(t, err, c.want)
			e := c.e
			require.Equal(t, err.Error(), "cpu: "+e.Check(n).Error(), "the backend reports the shared check")
		})
	}
	// The edits around the edges still run.
	st.Write(x, 0, make([]float32, n))
	st.Edit(x, backend.Edit{Op: backend.EditFill, Off: n - 4, Rows: 1, Cols: 4, Scalar: 2})
	st.Edit(x, backend.Edit{Op: backend.EditSet, Rows: 4, Cols: 4, Stride: 16, Src: src, SrcStride: 4})
	require.NoError(t, st.Sync())
}

// Through a hook, a bad edit fails the prefill with the point named, before
// it touches memory, and the session stays usable.
func TestBadHookEditsFailThePrefill(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 17)
	e := newEngine(t, m)
	want := prefill(t, e, testTokens, engine.Options{})
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	n := len(testTokens) * m.DModel
	for _, c := range badEdits(n) {
		h := engine.Hook{Point: "blocks.0.hook_resid_post", Device: func(string, []int) ([]engine.DeviceEdit, error) {
			return []engine.DeviceEdit{{Edit: c.e}}, nil
		}}
		var err error
		require.NotPanics(t, func() { _, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{h}}) }, c.name)
		require.ErrorContains(t, err, "hook at blocks.0.hook_resid_post", c.name)
		require.ErrorContains(t, err, c.want, c.name)
		require.Equal(t, 0, s.Pos())
	}
	got, err := s.Prefill(context.Background(), testTokens, engine.Options{})
	require.NoError(t, err)
	require.Equal(t, want.Tensor("logits").Data, got.Tensor("logits").Data)
}

// A model gone NaN generated token 0 forever: argmax of NaN logits.
func TestGenerateOfANaNModelIsAnError(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 18)
	for i := range m.OutNorm {
		m.OutNorm[i] = float32(math.NaN())
	}
	s, err := newEngine(t, m).NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	g, err := s.Generate(context.Background(), testTokens[:4], 5)
	require.ErrorContains(t, err, "engine: the logits for generated token 1 hold NaN, so there is no next token")
	require.Equal(t, engine.StopError, g.Stop)
	require.Empty(t, g.Tokens)
}

// Issue 15.8: generation past the context panicked (nb) or lost its output
// (strata run). Generate stops at the end of the KV cache and returns what
// it made, with the reason.
func TestGenerateStopsAtTheEndOfTheContext(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 18)
	e := newEngine(t, m)
	ctx := context.Background()
	prompt := testTokens[:4]

	big, err := e.NewSession(0)
	require.NoError(t, err)
	defer big.Close()
	long, err := big.Generate(ctx, prompt, 20)
	require.NoError(t, err)
	if long.Stop == engine.StopEOS {
		t.Skipf("the random model predicts EOS after %d tokens", len(long.Tokens))
	}
	require.Equal(t, engine.StopLength, long.Stop)
	require.Len(t, long.Tokens, 20)

	const capacity = 10
	s, err := e.NewSession(capacity)
	require.NoError(t, err)
	defer s.Close()
	g, err := s.Generate(ctx, prompt, 100000)
	require.NoError(t, err)
	require.Equal(t, engine.StopContext, g.Stop)
	require.Equal(t, "context full", g.Stop.String())
	require.Len(t, g.Tokens, capacity-len(prompt)+1, "the last token needs no cache room")
	require.Equal(t, long.Tokens[:len(g.Tokens)], g.Tokens)
	require.Equal(t, capacity, s.Pos())

	// Exactly as many as fit: Stop is the length.
	require.NoError(t, s.Reset())
	g, err = s.Generate(ctx, prompt, capacity-len(prompt)+1)
	require.NoError(t, err)
	require.Equal(t, engine.StopLength, g.Stop)

	// A prompt that does not fit is an error before any work, naming both sizes.
	require.NoError(t, s.Reset())
	_, err = s.Generate(ctx, testTokens, 5)
	require.ErrorIs(t, err, engine.ErrCacheFull)
	require.ErrorContains(t, err, "the prompt is 12 tokens, which exceed the KV cache of 10 positions (the model's context is 512 tokens)")

	g, err = s.Generate(ctx, prompt, 0)
	require.NoError(t, err)
	require.Empty(t, g.Tokens)
	_, err = s.Generate(ctx, prompt, -1)
	require.ErrorContains(t, err, "generate -1 tokens")

	// Cancelled: the error comes back with what was made (nothing here).
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, s.Reset())
	g, err = s.Generate(cctx, prompt, 5)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, engine.StopError, g.Stop)
	require.Empty(t, g.Tokens)
}

// Options that are out of their domain are refused, not taken as something else.
func TestOptionsOutOfDomainAreRefused(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.F32, 19))
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.Logits(7)})
	require.ErrorContains(t, err, "Options.Logits 7")
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Budget: -1})
	require.ErrorContains(t, err, "Options.Budget -1 is negative")
	_, err = s.Prefill(context.Background(), []int32{1, -7}, engine.Options{})
	require.ErrorContains(t, err, "token -7 at index 1 is outside the vocabulary of 512")
}

// Negative counts (strata info -n -5) gave negative memory; they count as 0.
func TestEstimateMemoryOfNegativeCountsIsNotNegative(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 20)
	est := engine.EstimateMemory(&m.Config, -5, -3, -512, engine.Options{Capture: engine.CaptureAll()})
	require.GreaterOrEqual(t, est.Scratch, int64(0))
	require.GreaterOrEqual(t, est.Capture, int64(0))
	require.Zero(t, est.Cache)
	require.Positive(t, engine.EstimateMemory(&m.Config, 5, 0, 512, engine.Options{}).Total())
}

// Issue 47.6: a panic in a Device hook function escaped Prefill, where a
// Host one's became an error; both are errors now, and the session works
// after.
func TestDeviceHookPanicIsAnError(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.F32, 16))
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	panics := engine.Hook{Point: "blocks.0.hook_resid_pre", Device: func(string, []int) ([]engine.DeviceEdit, error) {
		var shape []int
		_ = shape[3] // a user's bug
		return nil, nil
	}}
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{panics}})
	require.ErrorContains(t, err, "hook at blocks.0.hook_resid_pre: its Device function panicked: runtime error: index out of range [3] with length 0")
	require.NoError(t, s.Reset())
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{})
	require.NoError(t, err, "the session works after")
}

// Issue 47.12: Predict, and a hook at the logits, under LogitsNone did
// nothing, silently: no logits are made to act on.
func TestLogitsNoneRefusesWhatNeedsLogits(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.F32, 16))
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.LogitsNone, Predict: true})
	require.ErrorContains(t, err, "Options.Predict with LogitsNone: there are no logits to predict from")
	for _, point := range []string{"logits", "ln_final.*"} {
		_, err = s.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.LogitsNone, Hooks: []engine.Hook{engine.Scale(point, 2)}})
		require.ErrorContains(t, err, fmt.Sprintf("hook at %q: with LogitsNone the final norm and LM head do not run", point))
	}
	tr, err := s.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.LogitsNone, Hooks: []engine.Hook{engine.Scale("*", 1)}})
	require.NoError(t, err, "a hook that also matches the body runs there")
	require.Empty(t, tr.Predicted)
}
