package vulkan_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// longShape has a context whose KV cache is one 128 MiB tensor per layer
// and half (lavapipe's largest storage buffer), so a session of the full
// context asks for 18 x 128 MiB, more than a 2 GiB heap holds, while no
// single tensor is refused by size.
var longShape = synth.Shape{Arch: "llama", Layers: 9, DModel: 256, FFN: 256, Heads: 4, KVHeads: 4, HeadDim: 64,
	Vocab: 512, Context: 1 << 17, Theta: 10000}

func shapeModel(t testing.TB, s synth.Shape, typ gguf.Type, seed uint64) *model.Model {
	t.Helper()
	m, err := synth.Random(s, typ, seed)
	require.NoError(t, err)
	return m
}

// requireMemoryBack checks the backend holds the buffers and bytes it held before.
func requireMemoryBack(t *testing.T, b *vulkan.Backend, buffers int, bytes uint64, what string) {
	t.Helper()
	n, used := vulkan.DeviceMemory(b)
	require.Equal(t, buffers, n, "%s: live buffers", what)
	require.Equal(t, bytes, used, "%s: bytes in device memory", what)
}

// requireMatchesCPU runs a prefill on both sessions and compares every point.
func requireMatchesCPU(t *testing.T, vs, cs *engine.Session, tokens []int32) {
	t.Helper()
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll}
	got, err := vs.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	want, err := cs.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	requireSameTrace(t, got, want, pointTol)
	require.NoError(t, got.Close(), "its device memory goes back")
}

func TestAllocationFailureNamesBufferFreesAndStaysUsable(t *testing.T) {
	b := testBackend(t)
	m := shapeModel(t, longShape, gguf.F32, 3)
	ve, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	ce, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	cs, err := ce.NewSession(4096)
	require.NoError(t, err)
	defer cs.Close()

	t.Run("tensor over the largest storage buffer", func(t *testing.T) {
		buffers, used := vulkan.DeviceMemory(b)
		st := b.NewStream()
		n := int(vulkan.MaxStorageBuffer(b)/4 + 1)
		_, err := st.Alloc("huge", n)
		require.ErrorContains(t, err, fmt.Sprintf("vulkan: huge needs %d bytes, over", 4*n))
		require.ErrorContains(t, err, "largest storage buffer")
		requireMemoryBack(t, b, buffers, used, "after the refused tensor")
	})

	t.Run("weight over the largest storage buffer", func(t *testing.T) {
		f, err := quant.For(gguf.F32)
		require.NoError(t, err)
		// One row of 32 KiB more than the largest storage buffer holds.
		const cols = 8192
		rows := int(vulkan.MaxStorageBuffer(b)/(4*cols) + 1)
		w := &model.Weight{Name: "blk.0.big.weight", Rows: rows, Cols: cols, Format: f, Data: make([]byte, 4*rows*cols)}
		buffers, used := vulkan.DeviceMemory(b)
		_, err = b.Upload(w)
		require.ErrorContains(t, err, fmt.Sprintf("vulkan: blk.0.big.weight needs %d bytes, over", 4*rows*cols))
		requireMemoryBack(t, b, buffers, used, "after the refused weight")
	})

	t.Run("prefill scratch over the largest storage buffer", func(t *testing.T) {
		if limit := vulkan.MaxStorageBuffer(b); limit >= 256<<20 {
			t.Skipf("this device binds storage buffers of %d bytes: scores of 4 heads x 4096 x 4096 (256 MiB) fit", limit)
		}
		vs, err := ve.NewSession(4096)
		require.NoError(t, err)
		defer vs.Close()
		cs.Reset()
		requireMatchesCPU(t, vs, cs, testTokens) // the stream's own helpers now exist
		vs.Reset()
		cs.Reset()
		buffers, used := vulkan.DeviceMemory(b)
		// Scores and pattern of 4 heads x 4096 x 4096 are 256 MiB each.
		long := make([]int32, 4096)
		_, err = vs.Prefill(context.Background(), long, engine.Options{Capture: engine.CaptureOf("blocks.0.attn.hook_pattern")})
		require.ErrorContains(t, err, "engine: prefill of 4096 tokens: vulkan: attn_scores needs 268435456 bytes, over")
		require.Equal(t, 0, vs.Pos())
		// The refused prefill freed the buffers the session kept from the
		// first; the same request again holds what the first held.
		n, bytes := vulkan.DeviceMemory(b)
		require.Less(t, n, buffers, "after the refused prefill: live buffers")
		require.Less(t, bytes, used, "after the refused prefill: bytes in device memory")
		requireMatchesCPU(t, vs, cs, testTokens)
		requireMemoryBack(t, b, buffers, used, "after the refused prefill and one like the first")
	})

	t.Run("KV cache over the device's memory", func(t *testing.T) {
		heap := vulkan.HeapSize(b)
		cache := uint64(2*longShape.Layers) * uint64(longShape.Context) * uint64(longShape.KVHeads*longShape.HeadDim) * 4
		if cache <= heap {
			t.Skipf("the device's heap of %d bytes holds a %d-byte KV cache", heap, cache)
		}
		buffers, used := vulkan.DeviceMemory(b)
		_, err := ve.NewSession(0)
		require.Error(t, err)
		require.Regexp(t, `vulkan: allocating blocks\.\d\.attn\.cache_[kv] \(33554432 floats\): vulkan: 134217728 more bytes do not fit in .*'s memory heap \d+ of \d+ bytes`, err.Error())
		requireMemoryBack(t, b, buffers, used, "after the refused session")

		// What was freed can be allocated again, and the engine still prefills correctly.
		vs, err := ve.NewSession(64)
		require.NoError(t, err)
		defer vs.Close()
		cs.Reset()
		requireMatchesCPU(t, vs, cs, testTokens)
	})
}

// A run cancelled while it records stops at the next layer boundary: the
// layers after it are never recorded and never reach the device. With
// profiling on, the backend counts the matrix products that were submitted.
// (cancel_test.go cancels while the device runs.)
func TestCancellationStopsWithinOneLayerAndNextPrefillIsCorrect(t *testing.T) {
	b, err := vulkan.Open(vulkan.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	if err := b.SetProfiling(true); err != nil {
		t.Skip(err)
	}
	m := genModel(t, "tiny-llama", gguf.F32, 2)
	ve, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	ce, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	vs, err := ve.NewSession(0)
	require.NoError(t, err)
	defer vs.Close()
	cs, err := ce.NewSession(0)
	require.NoError(t, err)
	defer cs.Close()
	gemmCount(b) // drop the upload's

	ctx, cancel := context.WithCancel(context.Background())
	layersRun := 0
	hook := engine.Hook{Point: "blocks.*.hook_resid_post", Device: func(string, []int) ([]engine.DeviceEdit, error) {
		layersRun++
		cancel()
		return nil, nil
	}}
	_, err = vs.Prefill(ctx, testTokens, engine.Options{Logits: engine.LogitsNone, Hooks: []engine.Hook{hook}})
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	require.Equal(t, 1, layersRun, "stops before the next layer")
	require.Equal(t, 0, vs.Pos())
	cancelled := gemmCount(b)

	_, err = vs.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.LogitsNone})
	require.NoError(t, err)
	full := gemmCount(b)
	t.Logf("matrix products submitted: %d for the cancelled run, %d for a whole one of %d layers", cancelled, full, m.Layers)
	require.Positive(t, full)
	require.Equal(t, full, cancelled*m.Layers, "the cancelled run submitted its first layer and nothing after it")

	vs.Reset()
	requireMatchesCPU(t, vs, cs, testTokens)
}

// Soak: prefills of random lengths with random capture plans, some
// continuing earlier ones, each checked point by point against the CPU
// backend running the same requests, then Go heap and device memory back
// at their baselines.
func TestSoakMatchesCPU(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 30
	}
	// Its own backend: streams other tests dropped on the shared one are
	// released by the garbage collector at any time, moving the buffer count.
	testBackend(t)
	b, err := vulkan.Open(vulkan.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 21)
	ce, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	ve, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	const capacity = 64
	cs, err := ce.NewSession(capacity)
	require.NoError(t, err)
	defer cs.Close()
	vs, err := ve.NewSession(capacity)
	require.NoError(t, err)
	defer vs.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))

	// Warm up: the stream's staging and its token and RoPE tables grow to
	// the largest request once and are kept. The session keeps the buffers
	// of its last prefill, so the soak ends with the warm-up's request again.
	warm := make([]int32, capacity)
	warmUp := func() {
		vs.Reset()
		tr, err := vs.Prefill(ctx, warm, engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll, Predict: true})
		require.NoError(t, err)
		require.NoError(t, tr.Load(), "the session's reader and its buffers now exist")
		require.NoError(t, tr.Close())
	}
	warmUp()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	buffers, used := vulkan.DeviceMemory(b)

	history := 0
	for i := range n {
		cont := history > 0 && r.IntN(3) == 0 && capacity-history >= 2
		if !cont {
			vs.Reset()
			cs.Reset()
			history = 0
		}
		T := 1 + r.IntN(min(24, capacity-history))
		tokens := make([]int32, T)
		for j := range tokens {
			tokens[j] = int32(r.IntN(m.Vocab))
		}
		c := enginetest.RandomCapture(r, m.Layers)
		o := engine.Options{Capture: c, Logits: engine.LogitsAll, Predict: r.IntN(2) == 0}
		got, err := vs.Prefill(ctx, tokens, o)
		require.NoError(t, err, "prefill %d", i)
		want, err := cs.Prefill(ctx, tokens, o)
		require.NoError(t, err, "prefill %d", i)
		require.Equal(t, want.Pos0, got.Pos0)
		requireSameTraceQuiet(t, got, want, fmt.Sprintf("prefill %d (T=%d at %d, capture %v)", i, T, history, c))
		if o.Predict {
			requirePredictions(t, got, want, m.Vocab)
		}
		if i%2 == 0 {
			require.NoError(t, got.Close()) // the others are left to the collector
		}
		history += T
	}
	// Traces dropped without Close are freed by cleanups the collector runs
	// on its own goroutine, each leaving its arenas as the session's spare:
	// wait until they have run, then end as the soak began.
	for last, still := -1, 0; still < 3; {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if n, _ := vulkan.DeviceMemory(b); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	warmUp()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d prefills; Go heap in use %.1f MiB before, %.1f MiB after", n, float64(before.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20))
	require.Less(t, float64(after.HeapInuse), float64(before.HeapInuse)+8<<20, "Go heap returns to its baseline")
	requireMemoryBack(t, b, buffers, used, "after the soak")
}

// requireSameTraceQuiet is requireSameTrace without a log line per prefill.
func requireSameTraceQuiet(t *testing.T, got, want *trace.Trace, what string) {
	t.Helper()
	require.Equal(t, want.Names, got.Names, what)
	for _, name := range want.Names {
		g, err := got.Get(name)
		require.NoError(t, err, what)
		w := want.Tensor(name)
		require.Equal(t, w.Shape, g.Shape, "%s: %s", what, name)
		requireClose(t, g.Data, w.Data, pointTol, what+": "+name)
	}
}

// Issue 47.1: Close while another goroutine prefilled hung (3 of 12 runs):
// it destroyed a fence the prefill waited on, or returned and left the
// prefill waiting on a destroyed one. Close now waits for the work in
// progress and fails what comes after with ErrBackendClosed.
func TestCloseWhilePrefilling(t *testing.T) {
	testBackend(t)
	m := genModel(t, "tiny-llama", gguf.F32, 5)
	enginetest.CheckCloseWhilePrefilling(t, func() backend.Backend {
		b, err := vulkan.Open(vulkan.Options{})
		require.NoError(t, err)
		return b
	}, m, 12)
}

// Issue 47's sweep of Close under concurrent use, on lavapipe: a session,
// a run, a trace (its captures still on the device) and a mapped model,
// each closed while other goroutines use it (run under -race).
func TestClosesUnderUse(t *testing.T) {
	testBackend(t)
	open := func() backend.Backend {
		b, err := vulkan.Open(vulkan.Options{})
		require.NoError(t, err)
		return b
	}
	enginetest.CheckClosesUnderUse(t, open, genModel(t, "tiny-llama", gguf.F32, 5))
	_, mapped := enginetest.MappedModel(t)
	enginetest.CheckModelCloseUnderUse(t, open, mapped)
}
