package enginetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// CheckTiers holds a model split over the two backends of tiers to the
// same model on tiers[0] alone, bit for bit: cases random placements
// (layers on either tier, boundaries anywhere, the embedding and head on
// either), each with a random capture set, logits, and an intervention
// beside a boundary, run one-shot, continued at a later position, and
// step-wise. The backends must compute alike (two logical devices of one
// kind), so the only difference is where each layer ran.
func CheckTiers(t *testing.T, tiers [2]backend.Backend, m *model.Model, seed uint64, cases int) {
	t.Helper()
	one, err := engine.NewEngine(m, tiers[0])
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 7))
	tokens := make([]int32, 9)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(m.Vocab))
	}
	for c := range cases {
		p := randomPlacement(rng, m.Layers)
		o := randomOptions(rng, m, p)
		t.Run(fmt.Sprintf("case%d/%s", c, p), func(t *testing.T) {
			split, err := engine.NewTieredEngine(m, tiers[:], p)
			require.NoError(t, err)
			want, got := prefillTwice(t, one, tokens, o), prefillTwice(t, split, tokens, o)
			for i := range want {
				equalTraces(t, want[i], got[i])
			}
			wantMid, wantEnd := stepped(t, one, tokens, o, p)
			gotMid, gotEnd := stepped(t, split, tokens, o, p)
			equalTraces(t, wantMid, gotMid)
			equalTraces(t, wantEnd, gotEnd)
			if o.Capture.Globs[0] == "*" {
				require.NoError(t, one.LogitLens(want[0].tr))
				require.NoError(t, split.LogitLens(got[0].tr))
				require.Equal(t, want[0].tr.Lens, got[0].tr.Lens, "the logit lens runs on the head's tier")
			}
		})
	}
}

// randomPlacement puts each layer, the embedding and the head on tier 0 or
// 1 at random, using both.
func randomPlacement(rng *rand.Rand, layers int) engine.Placement {
	for {
		p := engine.Placement{Embed: rng.IntN(2), Head: rng.IntN(2), Layers: make([]int, layers)}
		for l := range p.Layers {
			p.Layers[l] = rng.IntN(2)
		}
		all := append([]int{p.Embed, p.Head}, p.Layers...)
		if slices.Contains(all, 0) && slices.Contains(all, 1) {
			return p
		}
	}
}

// randomOptions captures every point or a random few, asks for some logits
// and intervenes on both sides of a tier boundary: device edits at the last
// points before it and the first after it, and a host hook.
func randomOptions(rng *rand.Rand, m *model.Model, p engine.Placement) engine.Options {
	o := engine.Options{Logits: []engine.Logits{engine.LogitsLast, engine.LogitsAll, engine.LogitsNone}[rng.IntN(3)], Predict: rng.IntN(2) == 0}
	if o.Logits == engine.LogitsNone {
		o.Predict = false
	}
	if rng.IntN(3) == 0 {
		o.Capture = engine.CaptureAll()
	} else {
		var globs []string
		for _, name := range trace.Points(&m.Config) {
			if rng.IntN(4) == 0 {
				globs = append(globs, name)
			}
		}
		o.Capture = engine.CaptureOf(append(globs, "logits")...)
	}
	var boundaries []int // layers whose tier is not the one before
	for l := range p.Layers {
		if l == 0 && p.Layers[0] != p.Embed || l > 0 && p.Layers[l] != p.Layers[l-1] {
			boundaries = append(boundaries, l)
		}
	}
	l := m.Layers - 1 // the head's tier differs from the last layer's, if no layer's does
	if len(boundaries) > 0 {
		l = boundaries[rng.IntN(len(boundaries))]
	}
	before := max(l-1, 0)
	o.Hooks = append(o.Hooks,
		engine.AddVector(trace.LayerPoint(before, "hook_resid_post"), ramp(m.DModel), 0.5, nil),
		engine.Scale(trace.LayerPoint(l, "hook_resid_pre"), 0.75),
		engine.AblateHead(l, rng.IntN(m.Heads)),
		engine.Hook{Point: trace.LayerPoint(l, "hook_resid_mid"), Host: func(_ string, _ []int, x []float32) error {
			for i := range x {
				x[i] = -x[i]
			}
			return nil
		}})
	if m.MoE() {
		o.Hooks = append(o.Hooks, engine.AblateExpert(l, rng.IntN(m.Experts)))
	}
	return o
}

func ramp(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%7) - 3
	}
	return v
}

// prefillTwice prefills tokens and then the same tokens again at the next
// position, in one session, so that the second reads the first's KV cache
// on each layer's tier. It reads each trace, wherever its captures are,
// before the session closes: the norms of each capture's rows (reduced on
// the tier that holds it), then every capture.
func prefillTwice(t *testing.T, e *engine.Engine, tokens []int32, o engine.Options) []read {
	t.Helper()
	s, err := e.NewSession(2 * len(tokens))
	require.NoError(t, err)
	defer s.Close()
	var out []read
	for range 2 {
		tr, err := s.Prefill(context.Background(), tokens, o)
		require.NoError(t, err)
		out = append(out, readAll(t, tr))
	}
	return out
}

// read is a trace read to the host, and the norms of its captures' rows
// as they were reduced where the captures were.
type read struct {
	tr    *trace.Trace
	norms map[string][]float64
}

func readAll(t *testing.T, tr *trace.Trace) read {
	t.Helper()
	norms := map[string][]float64{}
	for _, name := range tr.Names {
		n, err := tr.RowNorms(name)
		require.NoError(t, err)
		norms[name] = n
	}
	require.NoError(t, tr.Load())
	return read{tr, norms}
}

// stepped runs to a point of the first layer after a tier boundary (or the
// last layer), reads the trace there, then goes on a layer at a time.
func stepped(t *testing.T, e *engine.Engine, tokens []int32, o engine.Options, p engine.Placement) (mid, end read) {
	t.Helper()
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Start(context.Background(), tokens, o)
	require.NoError(t, err)
	layer := len(p.Layers) - 1
	for l := 1; l < len(p.Layers); l++ {
		if p.Layers[l] != p.Layers[l-1] {
			layer = l
			break
		}
	}
	require.NoError(t, r.RunTo(trace.LayerPoint(layer, "hook_resid_mid")))
	tr, err := r.Trace()
	require.NoError(t, err)
	mid = readAll(t, tr)
	for r.Next() {
	}
	require.NoError(t, r.Err())
	tr, err = r.Finish()
	require.NoError(t, err)
	return mid, readAll(t, tr)
}

// equalTraces requires the same points with the same bits, the same row
// norms, and the same predictions.
func equalTraces(t *testing.T, wantRead, gotRead read) {
	t.Helper()
	want, got := wantRead.tr, gotRead.tr
	require.Equal(t, wantRead.norms, gotRead.norms)
	require.Equal(t, want.Names, got.Names)
	for _, name := range want.Names {
		w, err := want.Get(name)
		require.NoError(t, err)
		g, err := got.Get(name)
		require.NoError(t, err)
		require.Equal(t, w.Shape, g.Shape, name)
		for i := range w.Data {
			if math.Float32bits(w.Data[i]) != math.Float32bits(g.Data[i]) {
				require.Failf(t, "split run differs", "%s[%d]: split %g, unsplit %g", name, i, g.Data[i], w.Data[i])
			}
		}
	}
	require.Equal(t, want.Predicted, got.Predicted)
}

// CheckTierCancel cancels a run from a hook in a layer on tier 1: the run
// stops before the next layer with the context's error, and the session's
// next prefill equals the unsplit engine's.
func CheckTierCancel(t *testing.T, tiers [2]backend.Backend, m *model.Model) {
	t.Helper()
	p := engine.OneTier(m.Layers)
	for l := m.Layers / 2; l < m.Layers; l++ {
		p.Layers[l], p.Head = 1, 1
	}
	split, err := engine.NewTieredEngine(m, tiers[:], p)
	require.NoError(t, err)
	s, err := split.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelAt := trace.LayerPoint(m.Layers/2, "hook_resid_mid")
	var reached []string
	o := engine.Options{Hooks: []engine.Hook{{Point: "blocks.*.hook_resid_*", Host: func(name string, _ []int, _ []float32) error {
		reached = append(reached, name)
		if name == cancelAt {
			cancel()
		}
		return nil
	}}}}
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	_, err = s.Prefill(ctx, tokens, o)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, trace.LayerPoint(m.Layers/2, "hook_resid_post"), reached[len(reached)-1], "stops within the layer on tier 1")
	require.Equal(t, 0, s.Pos())
	o = engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	tr, err := s.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	one, err := engine.NewEngine(m, tiers[0])
	require.NoError(t, err)
	equalTraces(t, prefillTwice(t, one, tokens, o)[0], readAll(t, tr))
}
