package vulkan_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// deepShape has enough layers, each slow enough on lavapipe (about 0.1 s at
// T=32 on two busy cores), that a prefill takes many times one layer.
var deepShape = synth.Shape{Arch: "llama", Layers: 12, DModel: 128, FFN: 384, Heads: 2, KVHeads: 2, HeadDim: 64,
	Vocab: 512, Context: 256, Theta: 10000}

// requireIdentical checks two traces hold the same points, bit for bit.
func requireIdentical(t *testing.T, got, want *trace.Trace, what string) {
	t.Helper()
	require.Equal(t, want.Names, got.Names, what)
	for _, name := range want.Names {
		g, err := got.Get(name)
		require.NoError(t, err, what)
		w, err := want.Get(name)
		require.NoError(t, err, what)
		require.Equal(t, w.Shape, g.Shape, "%s: %s", what, name)
		enginetest.RequireBits(t, w.Data, g.Data, "%s: %s", what, name)
	}
}

// A cancellable prefill hands the device one layer at a time, so a cancel
// that arrives while the device runs stops it within about a layer rather
// than after the whole prefill, which a single submission would run to its
// end. The backend counts the matrix products that reached the device.
func TestCancelStopsTheDeviceWithinALayer(t *testing.T) {
	b, err := vulkan.Open(vulkan.Options{Validation: true})
	if errors.Is(err, vulkan.ErrNoValidationLayer) {
		b, err = vulkan.Open(vulkan.Options{})
	}
	if errors.Is(err, vulkan.ErrNoDevice) {
		t.Skip(err)
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	if err := b.SetProfiling(true); err != nil {
		t.Skip(err)
	}
	m := shapeModel(t, deepShape, gguf.F32, 11)
	ve, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(5, 6))
	tokens := make([]int32, 32)
	for i := range tokens {
		tokens[i] = int32(r.IntN(m.Vocab))
	}
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsNone}

	// The reference: a fresh session, one submission (no cancel possible).
	fresh, err := ve.NewSession(len(tokens))
	require.NoError(t, err)
	want, err := fresh.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	require.NoError(t, want.Load(), "read before its session closes")
	fresh.Close()

	vs, err := ve.NewSession(len(tokens))
	require.NoError(t, err)
	defer vs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gemmCount(b) // drop the upload's and the reference's
	start := time.Now()
	got, err := vs.Prefill(ctx, tokens, o)
	fullTime := time.Since(start)
	require.NoError(t, err)
	requireIdentical(t, got, want, "flushed per layer")
	all := gemmCount(b)
	require.Zero(t, all%m.Layers, "%d matrix products over %d layers", all, m.Layers)
	perLayer := all / m.Layers
	vs.Reset()
	buffers, used := vulkan.DeviceMemory(b)

	// Cancel once layer 0 has been handed to the device (its flush comes
	// before layer 1's first point): a single submission would have all of
	// the prefill recorded and queued by the time the device runs.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	cancelAtLayer1 := engine.Hook{Point: "blocks.1.hook_resid_pre", Device: func(string, []int) ([]engine.DeviceEdit, error) {
		cancel()
		return nil, nil
	}}
	start = time.Now()
	_, err = vs.Prefill(ctx, tokens, engine.Options{Capture: o.Capture, Logits: o.Logits, Hooks: []engine.Hook{cancelAtLayer1}})
	cancelTime := time.Since(start)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, vs.Pos())
	ran := gemmCount(b)
	t.Logf("whole prefill: %v for %d layers; cancelled in layer 1: %v, %d of %d layers reached the device",
		fullTime, m.Layers, cancelTime, ran/perLayer, m.Layers)
	require.Zero(t, ran%perLayer, "the device ran whole layers")
	// Layer 0 was in flight; layer 1, recorded when the cancel came, is
	// submitted with the run's release; nothing after it.
	require.Equal(t, 2, ran/perLayer, "layers that reached the device")
	requireMemoryBack(t, b, buffers, used, "after the cancelled prefill")

	// The session is as it was: the next prefill matches the reference.
	_, err = vs.Prefill(ctx, tokens, o)
	require.ErrorIs(t, err, context.Canceled, "the cancelled context stops a new prefill before its first layer")
	got, err = vs.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	requireIdentical(t, got, want, "after the cancelled prefill")
}

// A stream error belongs to the request that caused it: the prefill fails
// with an error naming the problem, the stream's memory is back, and the
// next prefill on the same session is exact.
func TestStreamErrorEndsWithItsRequest(t *testing.T) {
	b := testBackend(t)
	m := genModel(t, "tiny-llama", gguf.F32, 8)
	ve, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll}
	fresh, err := ve.NewSession(0)
	require.NoError(t, err)
	want, err := fresh.Prefill(context.Background(), testTokens, o)
	require.NoError(t, err)
	require.NoError(t, want.Load(), "read before its session closes")
	fresh.Close()

	// The engine's check passes an edit whose source was freed (it checks
	// shapes, not liveness); the backend refuses it while recording, in the
	// last layer, so that a flushing run has earlier layers in flight when
	// it fails. (An unknown operation, used here before, is now refused by
	// the engine's shared check before any recording.)
	other := b.NewStream()
	stale, err := other.Alloc("stale source", 1)
	require.NoError(t, err)
	other.Free(stale)
	other.Close()
	badEdit := engine.Hook{Point: trace.LayerPoint(m.Layers-1, "attn.hook_z"), Device: func(string, []int) ([]engine.DeviceEdit, error) {
		return []engine.DeviceEdit{{Edit: backend.Edit{Op: backend.EditSet, Rows: 1, Cols: 1, Src: stale}}}, nil
	}}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"one submission", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"a submission per layer", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			vs, err := ve.NewSession(0)
			require.NoError(t, err)
			defer vs.Close()
			_, err = vs.Prefill(ctx, testTokens, o) // the stream's staging and tables now exist
			require.NoError(t, err)
			vs.Reset()
			buffers, used := vulkan.DeviceMemory(b)

			_, err = vs.Prefill(ctx, testTokens, engine.Options{Capture: o.Capture, Logits: o.Logits, Hooks: []engine.Hook{badEdit}})
			require.EqualError(t, err, "vulkan: tensor stale source is used after Free")
			require.Equal(t, 0, vs.Pos())
			requireMemoryBack(t, b, buffers, used, "after the failed prefill")

			got, err := vs.Prefill(ctx, testTokens, o)
			require.NoError(t, err)
			requireIdentical(t, got, want, "after the failed prefill")
		})
	}

	t.Run("a bare stream", func(t *testing.T) {
		st := b.NewStream()
		x, err := st.Alloc("x", 8)
		require.NoError(t, err)
		st.Write(x, 5, make([]float32, 10))
		require.EqualError(t, st.Sync(), "vulkan: write of 10 elements at 5 into x of 8")
		data := []float32{1, 2, 3, 4, 5, 6, 7, 8}
		st.Write(x, 0, data)
		out := make([]float32, 8)
		require.NoError(t, st.Read(x, 0, out))
		require.Equal(t, data, out)
		st.Free(x)
		require.NoError(t, st.Sync())
	})
}
