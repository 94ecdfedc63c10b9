package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// parityTol bounds max|engine - float64 reference| / max|reference| per
// point. The engine accumulates in float32 over at most 768 terms per dot
// product through two layers, norms and softmax; the largest error seen is
// 1.4e-6, and 2e-5 leaves room for other summation orders while a wrong
// head, pair or offset shows up as an O(1) error.
const parityTol = 2e-5

var testTokens = []int32{5, 77, 300, 12, 12, 450, 99, 256, 3, 140, 77, 300}

func newEngine(t testing.TB, m *model.Model) *engine.Engine {
	t.Helper()
	e, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	return e
}

func prefill(t testing.TB, e *engine.Engine, tokens []int32, o engine.Options) *trace.Trace {
	t.Helper()
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	tr, err := s.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	return tr
}

func TestEveryPointMatchesFloat64Reference(t *testing.T) {
	cases := []struct {
		shape string
		types []gguf.Type
	}{
		{"tiny-llama", []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0}},
		{"tiny-llama3", []gguf.Type{gguf.F32, gguf.Q4_K}},
		{"tiny-qwen2", []gguf.Type{gguf.F32, gguf.Q4_0}},
		{"tiny-qwen3", []gguf.Type{gguf.F32, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.Q1_0_G128, gguf.TQ2_0_G128}},
		{"tiny-gpt2", []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K}},
		{"tiny-gemma2", []gguf.Type{gguf.F32, gguf.Q8_0, gguf.Q4_K}},
		{"tiny-gemma3", []gguf.Type{gguf.F32, gguf.Q6_K}},
		{"tiny-phi3", []gguf.Type{gguf.F32, gguf.Q4_K}},
		{"tiny-qwen3moe", []gguf.Type{gguf.F32, gguf.Q8_0, gguf.Q4_K}},
		{"tiny-mixtral", []gguf.Type{gguf.F32, gguf.Q4_0}},
	}
	for _, c := range cases {
		for _, typ := range c.types {
			t.Run(c.shape+"/"+typ.String(), func(t *testing.T) {
				m := genModel(t, c.shape, typ, 7)
				want := newRef(m).points(testTokens)
				tr := prefill(t, newEngine(t, m), testTokens, engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll})
				names := trace.Points(&m.Config)
				require.Len(t, tr.Names, len(names), "every point is captured")
				worst, worstName := 0.0, ""
				for _, name := range names {
					x, err := tr.Get(name)
					require.NoError(t, err)
					rel, ok := relErr(x.Data, want[name])
					require.True(t, ok, "%s: shape %v or -Inf mask differs from the reference", name, x.Shape)
					require.LessOrEqual(t, rel, parityTol, "%s", name)
					if rel > worst {
						worst, worstName = rel, name
					}
				}
				t.Logf("largest error %.2g at %s", worst, worstName)
			})
		}
	}
}

func TestSteppedRunIsBitIdentical(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q1_0_G128, 3)
	e := newEngine(t, m)
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	oneShot := prefill(t, e, testTokens, o)

	s, err := e.NewSession(0)
	require.NoError(t, err)
	r, err := s.Start(context.Background(), testTokens, o)
	require.NoError(t, err)
	require.NoError(t, r.RunTo("blocks.0.attn.hook_pattern"))
	require.NoError(t, r.RunTo("blocks.0.attn.hook_pattern"), "where the run is")
	// A point already passed, or a typo, is named at once, the run not
	// advanced to its end.
	require.EqualError(t, r.RunTo("blocks.0.attn.hook_q"), "engine: the run is past blocks.0.attn.hook_q already: it is at blocks.0.attn.hook_pattern")
	require.EqualError(t, r.RunTo("blocks.1.hook_z"), `engine: no capture point named "blocks.1.hook_z": did you mean blocks.1.attn.hook_z?`)
	mid, err := r.Trace()
	require.NoError(t, err)
	require.True(t, mid.Has("blocks.0.attn.hook_pattern"))
	require.False(t, mid.Has("blocks.0.attn.hook_z"), "points after the pause are not there yet")
	layers := 0
	for r.Next() {
		layers++
	}
	require.NoError(t, r.Err())
	require.Equal(t, m.Layers, layers, "Next stops once per layer")
	stepped, err := r.Finish()
	require.NoError(t, err)
	for _, name := range oneShot.Names {
		require.Equal(t, oneShot.Tensor(name).Data, stepped.Tensor(name).Data, name)
	}
	require.Equal(t, len(testTokens), s.Pos())
}

// A continued prefill starts at position split: RoPE angles and learned
// position embeddings must both be taken from there.
func TestContinuedPrefillMatchesOneShot(t *testing.T) {
	for _, shape := range []string{"tiny-llama", "tiny-gpt2"} {
		t.Run(shape, func(t *testing.T) { continuedPrefill(t, shape) })
	}
}

func continuedPrefill(t *testing.T, shape string) {
	m := genModel(t, shape, gguf.Q8_0, 11)
	e := newEngine(t, m)
	want := newRef(m).points(testTokens)
	s, err := e.NewSession(64)
	require.NoError(t, err)
	ctx := context.Background()
	split := 7
	_, err = s.Prefill(ctx, testTokens[:split], engine.Options{})
	require.NoError(t, err)
	tr, err := s.Prefill(ctx, testTokens[split:], engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.*.attn.cache_k", "blocks.*.attn.hook_pattern"), Logits: engine.LogitsAll})
	require.NoError(t, err)
	require.Equal(t, split, tr.Pos0)
	T, d := len(testTokens), m.DModel
	for l := 0; l < m.Layers; l++ {
		name := trace.LayerPoint(l, "hook_resid_post")
		rel, ok := relErr(tr.Tensor(name).Data, want[name][split*d:])
		require.True(t, ok)
		require.LessOrEqual(t, rel, parityTol, name)
		name = trace.LayerPoint(l, "attn.cache_k")
		rel, ok = relErr(tr.Tensor(name).Data, want[name])
		require.True(t, ok)
		require.LessOrEqual(t, rel, parityTol, name)
		// The pattern's rows are the reference's last T-split query rows.
		name = trace.LayerPoint(l, "attn.hook_pattern")
		got := tr.Tensor(name)
		require.Equal(t, []int{m.Heads, T - split, T}, got.Shape)
		var wantRows []float64
		for h := 0; h < m.Heads; h++ {
			wantRows = append(wantRows, want[name][(h*T+split)*T:(h+1)*T*T]...)
		}
		rel, ok = relErr(got.Data, wantRows)
		require.True(t, ok)
		require.LessOrEqual(t, rel, parityTol, name)
	}
	rel, _ := relErr(tr.Tensor("logits").Data, want["logits"][split*m.Vocab:])
	require.LessOrEqual(t, rel, parityTol)
}

func TestCaptureBudgetRefusedBeforeWork(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 1)
	s, err := newEngine(t, m).NewSession(0)
	require.NoError(t, err)
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.CaptureAll(), Budget: 1 << 10})
	require.ErrorContains(t, err, "over the budget of 1.0 KiB")
	require.Equal(t, 0, s.Pos())
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.CaptureOf("blocks.*.attn.hook_nothing")})
	require.ErrorContains(t, err, "matches no capture point")
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.CaptureOf("blocks.9.hook_resid_post")})
	require.ErrorContains(t, err, fmt.Sprintf("layer 9 is past the model's last layer %d", m.Layers-1))
	_, err = s.Prefill(context.Background(), nil, engine.Options{})
	require.ErrorContains(t, err, "prompt is empty")
	_, err = s.Prefill(context.Background(), make([]int32, 600), engine.Options{})
	require.ErrorContains(t, err, "exceed the KV cache of 512 positions")
	_, err = s.Prefill(context.Background(), []int32{1, 9999}, engine.Options{})
	require.ErrorContains(t, err, "token 9999 at index 1 is outside the vocabulary of 512")
}

func TestInterventions(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.F32, 5)
	e := newEngine(t, m)
	capture := engine.CaptureOf("blocks.*.attn.hook_z", "blocks.*.hook_resid_mid", "blocks.*.hook_resid_post", "blocks.*.hook_resid_pre", "blocks.*.hook_mlp_out")
	base := prefill(t, e, testTokens, engine.Options{Capture: capture})
	hd, H := m.HeadDim, m.Heads

	t.Run("ablate head", func(t *testing.T) {
		tr := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.AblateHead(1, 3)}})
		z := tr.Tensor("blocks.1.attn.hook_z").Data
		zBase := base.Tensor("blocks.1.attn.hook_z").Data
		for pos := range testTokens {
			for h := 0; h < H; h++ {
				row, rowBase := z[(pos*H+h)*hd:(pos*H+h+1)*hd], zBase[(pos*H+h)*hd:(pos*H+h+1)*hd]
				if h == 3 {
					require.Equal(t, make([]float32, hd), row)
				} else {
					require.Equal(t, rowBase, row, "other heads are untouched")
				}
			}
		}
		require.NotEqual(t, base.Tensor("blocks.1.hook_resid_post").Data, tr.Tensor("blocks.1.hook_resid_post").Data)
		require.Equal(t, base.Tensor("blocks.0.hook_resid_post").Data, tr.Tensor("blocks.0.hook_resid_post").Data, "earlier layers are untouched")
	})

	t.Run("mean ablate head", func(t *testing.T) {
		tr := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.MeanAblateHead(0, 2)}})
		zBase, z := base.Tensor("blocks.0.attn.hook_z").Data, tr.Tensor("blocks.0.attn.hook_z").Data
		for d := 0; d < hd; d++ {
			mean := 0.0
			for pos := range testTokens {
				mean += float64(zBase[(pos*H+2)*hd+d])
			}
			mean /= float64(len(testTokens))
			for pos := range testTokens {
				require.InDelta(t, mean, z[(pos*H+2)*hd+d], 1e-6)
			}
		}
	})

	t.Run("scale to zero", func(t *testing.T) {
		tr := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.Scale("blocks.0.hook_mlp_out", 0)}})
		require.Equal(t, tr.Tensor("blocks.0.hook_resid_mid").Data, tr.Tensor("blocks.0.hook_resid_post").Data)
	})

	t.Run("add vector", func(t *testing.T) {
		vec := make([]float32, m.DModel)
		for i := range vec {
			vec[i] = float32(i%7) - 3
		}
		tr := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.AddVector("blocks.1.hook_resid_pre", vec, 0.5, []int{4})}})
		got, was := tr.Tensor("blocks.1.hook_resid_pre").Data, base.Tensor("blocks.1.hook_resid_pre").Data
		d := m.DModel
		for pos := range testTokens {
			for i := 0; i < d; i++ {
				want := was[pos*d+i]
				if pos == 4 {
					want += 0.5 * vec[i]
				}
				require.Equal(t, want, got[pos*d+i])
			}
		}
		// Unhooked, the two share their storage; hooked, the edit is the
		// next layer's alone.
		require.Equal(t, base.Tensor("blocks.0.hook_resid_post").Data, tr.Tensor("blocks.0.hook_resid_post").Data)
		// A negative position counts from the end.
		fromEnd := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.AddVector("blocks.1.hook_resid_pre", vec, 0.5, []int{4 - len(testTokens)})}})
		require.Equal(t, got, fromEnd.Tensor("blocks.1.hook_resid_pre").Data)
		// A row named twice, as itself and from the end, gets the vector
		// once (it was added twice).
		twice := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.AddVector("blocks.1.hook_resid_pre", vec, 0.5, []int{4, 4 - len(testTokens), 4})}})
		require.Equal(t, got, twice.Tensor("blocks.1.hook_resid_pre").Data)

		// A NaN scale made every logit NaN, with no error.
		s, err := e.NewSession(0)
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.AddVector("blocks.1.hook_resid_pre", vec, float32(math.NaN()), nil)}})
		require.ErrorContains(t, err, "adding to blocks.1.hook_resid_pre: the scale NaN is not finite")
		vec[3] = float32(math.Inf(1))
		_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.AddVector("blocks.1.hook_resid_pre", vec, 1, nil)}})
		require.ErrorContains(t, err, "adding to blocks.1.hook_resid_pre: element 3 of the vector is +Inf")
		_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.Scale("blocks.0.hook_mlp_out", float32(math.NaN()))}})
		require.ErrorContains(t, err, "scaling blocks.0.hook_mlp_out: the factor NaN is not finite")
	})

	t.Run("patch from another run", func(t *testing.T) {
		other := []int32{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12}
		src := prefill(t, e, other, engine.Options{Capture: engine.CaptureOf("blocks.1.hook_resid_pre", "blocks.1.hook_resid_post")})
		tr := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.Patch("blocks.1.hook_resid_pre", src, nil)}})
		// Only tokens' identity enters through the residual stream, so
		// patching all of it makes the rest of the run the other run's.
		require.Equal(t, src.Tensor("blocks.1.hook_resid_post").Data, tr.Tensor("blocks.1.hook_resid_post").Data)
	})

	t.Run("host hook", func(t *testing.T) {
		calls := 0
		hook := engine.Hook{Point: "blocks.*.hook_resid_post", Host: func(name string, shape []int, data []float32) error {
			calls++
			require.Equal(t, []int{len(testTokens), m.DModel}, shape)
			for i := range data {
				data[i] = -data[i]
			}
			return nil
		}}
		tr := prefill(t, e, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{hook}})
		require.Equal(t, m.Layers, calls)
		require.NotEqual(t, base.Tensor("blocks.1.hook_resid_post").Data, tr.Tensor("blocks.1.hook_resid_post").Data)
		// Layer 1's input is layer 0's output negated.
		for i, v := range base.Tensor("blocks.0.hook_resid_post").Data {
			require.Equal(t, -v, tr.Tensor("blocks.1.hook_resid_pre").Data[i])
		}
	})

	t.Run("hook errors name the point", func(t *testing.T) {
		s, err := e.NewSession(0)
		require.NoError(t, err)
		_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.AblateHead(0, 99)}})
		require.ErrorContains(t, err, "hook at blocks.0.attn.hook_z: head 99 is out of range")
		require.Equal(t, 0, s.Pos())
	})
}

func TestCancellationStopsBetweenLayersAndSessionStaysUsable(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 2)
	e := newEngine(t, m)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	layersRun := 0
	hook := engine.Hook{Point: "blocks.*.hook_resid_post", Host: func(string, []int, []float32) error {
		layersRun++
		cancel()
		return nil
	}}
	_, err = s.Prefill(ctx, testTokens, engine.Options{Hooks: []engine.Hook{hook}})
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	require.Equal(t, 1, layersRun, "stops before the next layer")
	require.Equal(t, 0, s.Pos())
	tr, err := s.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.LogitsAll})
	require.NoError(t, err)
	want := newRef(m).points(testTokens)
	rel, _ := relErr(tr.Tensor("logits").Data, want["logits"])
	require.LessOrEqual(t, rel, parityTol)
}

func TestPredictGivesArgmaxPerPosition(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 9)
	tr := prefill(t, newEngine(t, m), testTokens, engine.Options{Logits: engine.LogitsAll, Predict: true})
	logits := tr.Tensor("logits")
	require.Len(t, tr.Predicted, len(testTokens))
	for pos, id := range tr.Predicted {
		row := logits.Data[pos*m.Vocab : (pos+1)*m.Vocab]
		require.Equal(t, slices.Index(row, slices.Max(row)), int(id))
	}
}

func TestCaptureSelectsByGlobAndLayer(t *testing.T) {
	c := engine.Capture{Globs: []string{"blocks.*.hook_resid_post"}, FirstLayer: 1, LastLayer: -1}
	require.False(t, c.Selects("blocks.0.hook_resid_post"))
	require.True(t, c.Selects("blocks.1.hook_resid_post"))
	require.False(t, c.Selects("blocks.1.hook_resid_pre"))
}

func TestLogitLensLastLayerIsTheModelsPrediction(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 4)
	e := newEngine(t, m)
	tr := prefill(t, e, testTokens, engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll, Predict: true})
	require.NoError(t, e.LogitLens(tr))
	require.Len(t, tr.Lens.Prob, m.Layers)
	last := m.Layers - 1
	require.Equal(t, tr.Predicted, tr.Lens.Token[last], "the lens of the last layer is the model's own output")
	want := newRef(m).points(testTokens)
	V := m.Vocab
	for pos := range testTokens {
		row := want["logits"][pos*V : (pos+1)*V]
		mx, sum := math.Inf(-1), 0.0
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		for _, v := range row {
			sum += math.Exp(v - mx)
		}
		require.InDelta(t, 1/sum, tr.Lens.Prob[last][pos], 1e-5)
	}
	require.Error(t, e.LogitLens(prefill(t, e, testTokens, engine.Options{})))
}

func TestSessionsRunConcurrently(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 8)
	e := newEngine(t, m)
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.*.attn.hook_pattern"), Logits: engine.LogitsAll}
	prompts := [][]int32{testTokens, testTokens[:5], {4, 4, 4, 4, 4, 4, 4, 4}, {511, 0, 256}}
	serial := make([]*trace.Trace, len(prompts))
	for i, p := range prompts {
		serial[i] = prefill(t, e, p, o)
	}
	errs := make(chan error, len(prompts))
	got := make([]*trace.Trace, len(prompts))
	for i, p := range prompts {
		go func() {
			s, err := e.NewSession(0)
			if err == nil {
				got[i], err = s.Prefill(context.Background(), p, o)
				s.Close()
			}
			errs <- err
		}()
	}
	for range prompts {
		require.NoError(t, <-errs)
	}
	for i := range prompts {
		for _, name := range serial[i].Names {
			require.Equal(t, serial[i].Tensor(name).Data, got[i].Tensor(name).Data, "prompt %d %s", i, name)
		}
	}
}

// Phi-3 takes its long RoPE factors when the model's context is more than
// the original one, as llama.cpp chooses them by its context, whatever the
// session's cache. Issue 47.9: chosen by the cache's size, a prompt's
// logits differed (by up to 1.87) once nb's cache had grown past the
// original context, and run -n 4000 and -n 4100 differed.
func TestPhi3RopeFactorsFollowTheModelsContext(t *testing.T) {
	m := genModel(t, "tiny-phi3", gguf.F32, 2)
	e := newEngine(t, m)
	want := newRef(m).points(testTokens)
	orig := m.Rope.Scaling.OrigContext
	require.Equal(t, 64, orig)
	require.Greater(t, m.Context, orig)
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.attn.hook_rot_k", "blocks.*.hook_resid_post"), Logits: engine.LogitsAll}
	check := func(tr *trace.Trace, what string) {
		for _, name := range tr.Names {
			rel, ok := relErr(tr.Tensor(name).Data, want[name])
			require.True(t, ok, "%s: %d values, want %d", name, len(tr.Tensor(name).Data), len(want[name]))
			require.LessOrEqual(t, rel, parityTol, "%s %s", name, what)
		}
	}
	var logits [][]float32
	for _, capacity := range []int{len(testTokens), orig, orig + 1, m.Context} {
		s, err := e.NewSession(capacity)
		require.NoError(t, err)
		tr, err := s.Prefill(context.Background(), testTokens, o)
		require.NoError(t, err)
		check(tr, fmt.Sprintf("at capacity %d", capacity))
		logits = append(logits, tr.Tensor("logits").Data)
		s.Close()
	}
	for _, l := range logits[1:] {
		require.Equal(t, logits[0], l, "one prompt, one set of logits, whatever the cache's size")
	}
	// A cache grown past the original context, with positions in it, as
	// nb's grows: the same prompt again gives the same logits.
	s, err := e.NewSession(len(testTokens))
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, o)
	require.NoError(t, err)
	require.NoError(t, s.Grow(orig+1))
	require.NoError(t, s.Reset())
	tr, err := s.Prefill(context.Background(), testTokens, o)
	require.NoError(t, err)
	require.Equal(t, logits[0], tr.Tensor("logits").Data)
}

// A mixture's experts: routing is the float64 reference's at every point
// (TestEveryPointMatchesFloat64Reference), and the interventions do what
// they say: an ablated expert is never chosen and the rest are still
// weighted to sum to 1; a forced one comes first with weight 1.
func TestAblateAndForceExperts(t *testing.T) {
	m := genModel(t, "tiny-qwen3moe", gguf.F32, 4)
	e := newEngine(t, m)
	k := m.ExpertsUsed
	points := engine.CaptureOf("blocks.*.mlp.hook_expert_ids", "blocks.*.mlp.hook_expert_weights", "blocks.*.hook_mlp_out")
	clean := prefill(t, e, testTokens, engine.Options{Capture: points})
	// The expert layer 0 chooses most.
	count := map[float32]int{}
	for _, id := range clean.Tensor("blocks.0.mlp.hook_expert_ids").Data {
		count[id]++
	}
	busiest := float32(-1)
	for id, n := range count {
		if busiest < 0 || n > count[busiest] || (n == count[busiest] && id < busiest) {
			busiest = id
		}
	}
	usage, err := clean.ExpertUsage(0)
	require.NoError(t, err)
	require.Len(t, usage, m.Experts)
	total := 0
	for x, n := range usage {
		require.Equal(t, count[float32(x)], n, "expert %d", x)
		total += n
	}
	require.Equal(t, len(testTokens)*k, total)
	ablated := prefill(t, e, testTokens, engine.Options{Capture: points, Hooks: []engine.Hook{engine.AblateExpert(0, int(busiest))}})
	ids, ws := ablated.Tensor("blocks.0.mlp.hook_expert_ids").Data, ablated.Tensor("blocks.0.mlp.hook_expert_weights").Data
	require.NotContains(t, ids, busiest)
	for tok := range len(testTokens) {
		sum := float32(0)
		for _, w := range ws[tok*k : (tok+1)*k] {
			sum += w
		}
		require.InDelta(t, 1, sum, 1e-6, "token %d", tok)
	}
	require.NotEqual(t, clean.Tensor("blocks.0.hook_mlp_out").Data, ablated.Tensor("blocks.0.hook_mlp_out").Data)

	forced := prefill(t, e, testTokens, engine.Options{Capture: points, Hooks: []engine.Hook{engine.ForceExpert(1, 5)}})
	ids, ws = forced.Tensor("blocks.1.mlp.hook_expert_ids").Data, forced.Tensor("blocks.1.mlp.hook_expert_weights").Data
	for tok := range len(testTokens) {
		require.Equal(t, float32(5), ids[tok*k], "token %d", tok)
		require.Equal(t, float32(1), ws[tok*k], "token %d", tok)
		// The other experts' probabilities are 0: their slots are empty.
		require.Equal(t, []float32{-1}, ids[tok*k+1:(tok+1)*k], "token %d", tok)
		require.Equal(t, []float32{0}, ws[tok*k+1:(tok+1)*k], "token %d", tok)
	}
	require.Equal(t, clean.Tensor("blocks.0.mlp.hook_expert_ids").Data, forced.Tensor("blocks.0.mlp.hook_expert_ids").Data, "layer 0 is untouched")

	usage, err = forced.ExpertUsage(1)
	require.NoError(t, err)
	require.Equal(t, len(testTokens), usage[5], "the forced expert takes every token; the empty slots count for none")
	_, err = forced.ExpertUsage(2)
	require.ErrorContains(t, err, "blocks.2.mlp.hook_expert_ids")

	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.ForceExpert(0, 8)}})
	require.ErrorContains(t, err, "expert 8 is out of range")

	// Edited ids are checked before any expert runs.
	require.NoError(t, s.Reset())
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Hooks: []engine.Hook{engine.Scale("blocks.0.mlp.hook_expert_ids", 0)}})
	require.ErrorContains(t, err, "token 0 lists expert 0 twice")

	// Every expert ablated: every slot is empty (id -1, weight 0) and the
	// MLP adds nothing. It routed to experts 0 and 1 at NaN weights.
	require.NoError(t, s.Reset())
	var all []engine.Hook
	for x := range m.Experts {
		all = append(all, engine.AblateExpert(0, x))
	}
	tr, err := s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.CaptureOf("blocks.*.mlp.*", "blocks.*.hook_mlp_out"), Hooks: all})
	require.NoError(t, err)
	n := len(testTokens) * k
	require.Equal(t, slices.Repeat([]float32{-1}, n), tr.Tensor("blocks.0.mlp.hook_expert_ids").Data)
	require.Equal(t, make([]float32, n), tr.Tensor("blocks.0.mlp.hook_expert_weights").Data)
	require.Equal(t, make([]float32, n*m.DModel), tr.Tensor("blocks.0.mlp.hook_expert_out").Data)
	require.Equal(t, make([]float32, len(testTokens)*m.DModel), tr.Tensor("blocks.0.hook_mlp_out").Data)
	usage, err = tr.ExpertUsage(0)
	require.NoError(t, err)
	require.Equal(t, make([]int, m.Experts), usage, "ablated experts are not counted as used")
	name, _, err := tr.FirstNonFinite()
	require.NoError(t, err)
	require.Empty(t, name, "the ablated router logits' -Inf is no fault")
}

// TransformerLens's hook_scale: each row's divisor, and a hook there
// changes the division. Doubling it halves what the norm adds to its bias.
func TestHookScaleDividesTheNorm(t *testing.T) {
	for _, shape := range []string{"tiny-llama", "tiny-gpt2"} {
		t.Run(shape, func(t *testing.T) {
			m := genModel(t, shape, gguf.F32, 3)
			e := newEngine(t, m)
			points := engine.CaptureOf("blocks.1.ln1.hook_scale", "blocks.1.ln1.hook_normalized", "blocks.0.ln1.hook_normalized")
			clean := prefill(t, e, testTokens, engine.Options{Capture: points})
			require.Equal(t, []int{len(testTokens), 1}, clean.Tensor("blocks.1.ln1.hook_scale").Shape)
			frozen := prefill(t, e, testTokens, engine.Options{Capture: points, Hooks: []engine.Hook{engine.Scale("blocks.1.ln1.hook_scale", 2)}})
			var bias []float32
			if m.Blocks[1].AttnNormBias != nil {
				bias = m.Blocks[1].AttnNormBias
			}
			want, got := clean.Tensor("blocks.1.ln1.hook_normalized").Data, frozen.Tensor("blocks.1.ln1.hook_normalized").Data
			for i, w := range want {
				b := float32(0)
				if bias != nil {
					b = bias[i%m.DModel]
				}
				// One float32 rounding in the division and one in the bias.
				require.InDelta(t, (w-b)/2+b, got[i], 1e-6*(1+math.Abs(float64(w))), "element %d", i)
			}
			require.Equal(t, clean.Tensor("blocks.0.ln1.hook_normalized").Data, frozen.Tensor("blocks.0.ln1.hook_normalized").Data, "layer 0 is untouched")
		})
	}
}

// Masks are not faults: a sliding window's -Inf scores and an ablated
// expert's -Inf logit leave a trace finite.
func TestMasksAreNotNonFinite(t *testing.T) {
	for shape, hooks := range map[string][]engine.Hook{"tiny-gemma2": nil, "tiny-qwen3moe": {engine.AblateExpert(1, 2)}} {
		m := genModel(t, shape, gguf.F32, 1)
		tr := prefill(t, newEngine(t, m), testTokens, engine.Options{Capture: engine.CaptureAll(), Hooks: hooks})
		name, n, err := tr.FirstNonFinite()
		require.NoError(t, err)
		require.Empty(t, name, "%s: %+v", shape, n)
	}
}

// A pattern that matches nothing says why: a point of other families, or
// the name it is nearest to, in full (never the pattern itself).
func TestCaptureErrorsSayWhy(t *testing.T) {
	gpt2 := genModel(t, "tiny-gpt2", gguf.F32, 1)
	moe := genModel(t, "tiny-qwen3moe", gguf.F32, 1)
	for _, c := range []struct {
		m        *model.Model
		pattern  string
		contains string
	}{
		{gpt2, "blocks.*.attn.hook_rot_q", "it has learned positions, not RoPE"},
		{gpt2, "blocks.1.mlp.hook_pre_linear", "its MLP has no gate"},
		{gpt2, "blocks.*.attn.hook_patern", "did you mean blocks.*.attn.hook_pattern?"},
		{gpt2, "blocks.*.hook_patern", "did you mean blocks.*.attn.hook_pattern?"},
		{gpt2, "blocks.1.hook_resid_pots", "did you mean blocks.1.hook_resid_post?"},
		{gpt2, "hook_resid_post", "did you mean blocks.*.hook_resid_post?"},
		{gpt2, "hook_embd", "did you mean hook_embed?"},
		{gpt2, "blocks.0.mlp.hook_expert_ids", "it has no experts"},
		{moe, "blocks.*.mlp.hook_post", "its MLP is a mixture of experts, with points mlp.hook_router_logits"},
		{moe, "hook_pos_embed", "it has no learned positions"},
	} {
		err := engine.CaptureOf(c.pattern).Validate(&c.m.Config)
		require.ErrorContains(t, err, c.contains, c.pattern)
		require.ErrorContains(t, err, "strata info --points", c.pattern)
	}
}

// The lens refuses a trace another model made: its rows would go through
// this model's norm and unembedding.
func TestLensRefusesAnotherModelsTrace(t *testing.T) {
	a, b := newEngine(t, genModel(t, "tiny-qwen3", gguf.F32, 3)), newEngine(t, genModel(t, "tiny-llama", gguf.F32, 3))
	tr := prefill(t, a, testTokens, engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post")})
	require.NoError(t, a.LogitLens(tr))
	require.ErrorIs(t, b.LogitLens(tr), trace.ErrOtherModel)
	_, err := b.TokenLens(tr, 1)
	require.ErrorIs(t, err, trace.ErrOtherModel)
	_, err = b.LensLogits(tr, -1)
	require.ErrorIs(t, err, trace.ErrOtherModel)
}
