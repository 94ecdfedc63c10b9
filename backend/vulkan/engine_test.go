package vulkan_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// pointTol bounds each capture point's max|vulkan - cpu| / max|cpu|. Both
// run the same float32 program and differ only in summation order and in
// exp (a few ulp); lavapipe stays under 3e-6 through two layers of norms,
// attention and MLP. The 10x margin is for other drivers' exp and fused
// multiply-adds; a wrong head, pair, offset or block shows up as O(1).
const pointTol = 2e-5

var testTokens = []int32{5, 77, 300, 12, 12, 450, 99, 256, 3, 140, 77, 300}

func engines(t testing.TB, m *model.Model) (c, v *engine.Engine) {
	t.Helper()
	c, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	v, err = engine.NewEngine(m, testBackend(t))
	require.NoError(t, err)
	return c, v
}

func prefill(t testing.TB, e *engine.Engine, tokens []int32, o engine.Options) *trace.Trace {
	t.Helper()
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	tr, err := s.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	require.NoError(t, tr.Load(), "read before the session closes")
	return tr
}

// requireSameTrace compares every point of want (cpu) with got (vulkan).
func requireSameTrace(t testing.TB, got, want *trace.Trace, tol float64) {
	t.Helper()
	require.Equal(t, want.Names, got.Names)
	worst, at := 0.0, ""
	for _, name := range want.Names {
		g, err := got.Get(name)
		require.NoError(t, err)
		w, err := want.Get(name)
		require.NoError(t, err)
		require.Equal(t, w.Shape, g.Shape, name)
		requireClose(t, g.Data, w.Data, tol, name)
		if rel, _ := relErr(g.Data, w.Data); rel > worst {
			worst, at = rel, name
		}
	}
	t.Logf("largest relative difference %.2g at %s", worst, at)
}

// withoutPattern captures every point but scores and pattern, so attention
// takes the fused flash path.
func withoutPattern(c *model.Config) engine.Capture {
	var globs []string
	for _, p := range trace.Points(c) {
		if !strings.HasSuffix(p, "hook_attn_scores") && !strings.HasSuffix(p, "hook_pattern") {
			globs = append(globs, p)
		}
	}
	return engine.CaptureOf(globs...)
}

func TestEveryPointMatchesCPU(t *testing.T) {
	cases := []struct {
		shape string
		types []gguf.Type
	}{
		{"tiny-llama", []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0, gguf.Q1_0_G128, gguf.TQ2_0_G128, gguf.Q4_K, gguf.Q6_K}},
		{"tiny-qwen3", []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0, gguf.Q1_0_G128, gguf.TQ2_0_G128, gguf.BF16, gguf.Q5_K}},
		{"tiny-qwen2", []gguf.Type{gguf.F32, gguf.Q8_0}},
		{"tiny-llama3", []gguf.Type{gguf.F32, gguf.Q6_K}},
		{"tiny-gpt2", []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K}},
		{"tiny-gemma2", []gguf.Type{gguf.F32, gguf.Q8_0, gguf.Q4_K}},
		{"tiny-gemma3", []gguf.Type{gguf.F32, gguf.Q6_K}},
		{"tiny-phi3", []gguf.Type{gguf.F32, gguf.Q8_0}},
		{"tiny-qwen3moe", []gguf.Type{gguf.F32, gguf.Q4_K, gguf.Q1_0_G128}},
	}
	for _, c := range cases {
		for _, typ := range c.types {
			t.Run(c.shape+"/"+typ.String(), func(t *testing.T) {
				m := genModel(t, c.shape, typ, 7)
				ce, ve := engines(t, m)
				o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll, Predict: true}
				want, got := prefill(t, ce, testTokens, o), prefill(t, ve, testTokens, o)
				require.Len(t, got.Names, len(trace.Points(&m.Config)), "every point is captured")
				requireSameTrace(t, got, want, pointTol)
				requirePredictions(t, got, want, m.Vocab)

				o.Capture = withoutPattern(&m.Config)
				flash := prefill(t, ve, testTokens, o)
				for _, name := range flash.Names {
					requireClose(t, flash.Tensor(name).Data, want.Tensor(name).Data, pointTol, name+" (flash attention)")
				}
			})
		}
	}
}

// requirePredictions checks the argmax ids: each is the index of its
// row's largest logit, and where the CPU's best logit leads clearly, the
// same id as the CPU's.
func requirePredictions(t testing.TB, got, want *trace.Trace, vocab int) {
	t.Helper()
	logits := got.Tensor("logits").Data
	require.Len(t, got.Predicted, len(want.Predicted))
	for pos, id := range got.Predicted {
		row := logits[pos*vocab : (pos+1)*vocab]
		require.Equal(t, slices.Index(row, slices.Max(row)), int(id), "position %d", pos)
		ref := slices.Clone(want.Tensor("logits").Data[pos*vocab : (pos+1)*vocab])
		slices.Sort(ref)
		if ref[vocab-1]-ref[vocab-2] > 1e-3*max(ref[vocab-1], -ref[0]) {
			require.Equal(t, want.Predicted[pos], id, "position %d", pos)
		}
	}
}

func TestSteppedRunIsBitIdentical(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q1_0_G128, 3)
	e, err := engine.NewEngine(m, testBackend(t))
	require.NoError(t, err)
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	oneShot := prefill(t, e, testTokens, o)

	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Start(context.Background(), testTokens, o)
	require.NoError(t, err)
	require.NoError(t, r.RunTo("blocks.0.attn.hook_pattern"))
	mid, err := r.Trace()
	require.NoError(t, err)
	require.True(t, mid.Has("blocks.0.attn.hook_pattern"))
	require.False(t, mid.Has("blocks.0.attn.hook_z"), "points after the pause are not there yet")
	layers := 0
	for r.Next() {
		layers++
	}
	require.NoError(t, r.Err())
	require.Equal(t, m.Layers, layers)
	stepped, err := r.Finish()
	require.NoError(t, err)
	// A second Finish made a trace of the buffers the session had back.
	_, err = r.Finish()
	require.EqualError(t, err, "engine: the run has finished already: Finish hands over its trace once")
	for _, name := range oneShot.Names {
		require.Equal(t, oneShot.Tensor(name).Data, stepped.Tensor(name).Data, name)
	}
}

// The Vulkan session's cache grows between the two prefills (Session.Grow
// copies the cached positions on the device); the CPU's is made whole.
func TestContinuedPrefillMatchesCPU(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q8_0, 11)
	ce, ve := engines(t, m)
	run := func(e *engine.Engine, first int) *trace.Trace {
		s, err := e.NewSession(first)
		require.NoError(t, err)
		defer s.Close()
		ctx := context.Background()
		_, err = s.Prefill(ctx, testTokens[:7], engine.Options{})
		require.NoError(t, err)
		require.NoError(t, s.Grow(64))
		require.Equal(t, 64, s.Capacity())
		tr, err := s.Prefill(ctx, testTokens[7:], engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll})
		require.NoError(t, err)
		require.NoError(t, tr.Load(), "read before the session closes")
		return tr
	}
	got, want := run(ve, 8), run(ce, 64)
	require.Equal(t, 7, got.Pos0)
	requireSameTrace(t, got, want, pointTol)
}

func TestInterventionsMatchCPU(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.F32, 5)
	ce, ve := engines(t, m)
	capture := engine.CaptureOf("blocks.*.ln2.hook_normalized", "logits", "blocks.*.attn.hook_z", "blocks.*.hook_resid_mid", "blocks.*.hook_resid_post", "blocks.*.hook_resid_pre", "blocks.*.hook_mlp_out")
	vec := make([]float32, m.DModel)
	for i := range vec {
		vec[i] = float32(i%7) - 3
	}
	other := []int32{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12}
	source := prefill(t, ce, other, engine.Options{Capture: engine.CaptureOf("blocks.1.hook_resid_pre")})
	negate := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(name string, shape []int, data []float32) error {
		for i := range data {
			data[i] = -data[i]
		}
		return nil
	}}
	hooks := map[string]engine.Hook{
		"ablate head":       engine.AblateHead(1, 3),
		"mean ablate head":  engine.MeanAblateHead(0, 2),
		"scale":             engine.Scale("blocks.0.hook_mlp_out", 0.5),
		"add vector":        engine.AddVector("blocks.1.hook_resid_pre", vec, 0.5, []int{4, 7}),
		"patch":             engine.Patch("blocks.1.hook_resid_pre", source, []int{2, 3}),
		"host hook":         negate,
		"frozen norm":       engine.Scale("blocks.1.ln2.hook_scale", 2),
		"frozen final norm": engine.Patch("ln_final.hook_scale", prefill(t, ce, other, engine.Options{Capture: engine.CaptureOf("ln_final.hook_scale"), Logits: engine.LogitsAll}), nil),
	}
	for name, h := range hooks {
		t.Run(name, func(t *testing.T) {
			o := engine.Options{Capture: capture, Logits: engine.LogitsAll, Hooks: []engine.Hook{h}}
			requireSameTrace(t, prefill(t, ve, testTokens, o), prefill(t, ce, testTokens, o), pointTol)
		})
	}
	t.Run("ablated head is exactly zero", func(t *testing.T) {
		tr := prefill(t, ve, testTokens, engine.Options{Capture: capture, Hooks: []engine.Hook{engine.AblateHead(1, 3)}})
		z, hd := tr.Tensor("blocks.1.attn.hook_z").Data, m.HeadDim
		for pos := range testTokens {
			require.Equal(t, make([]float32, hd), z[(pos*m.Heads+3)*hd:(pos*m.Heads+4)*hd])
		}
	})
}

// Routing interventions on a mixture: ablating and forcing experts routes
// the same on both backends.
func TestExpertInterventionsMatchCPU(t *testing.T) {
	m := genModel(t, "tiny-qwen3moe", gguf.Q8_0, 6)
	ce, ve := engines(t, m)
	capture := engine.CaptureOf("blocks.*.mlp.*", "blocks.*.hook_mlp_out")
	var all []engine.Hook
	for x := range m.Experts {
		all = append(all, engine.AblateExpert(1, x))
	}
	for name, hooks := range map[string][]engine.Hook{"ablate": {engine.AblateExpert(0, 3)}, "force": {engine.ForceExpert(1, 6)}, "ablate all": all} {
		t.Run(name, func(t *testing.T) {
			o := engine.Options{Capture: capture, Logits: engine.LogitsAll, Hooks: hooks}
			vt := prefill(t, ve, testTokens, o)
			requireSameTrace(t, vt, prefill(t, ce, testTokens, o), pointTol)
			if name == "ablate all" { // every slot empty, as documented; it was NaN
				n := len(testTokens) * m.ExpertsUsed
				require.Equal(t, slices.Repeat([]float32{-1}, n), vt.Tensor("blocks.1.mlp.hook_expert_ids").Data)
				require.Equal(t, make([]float32, n), vt.Tensor("blocks.1.mlp.hook_expert_weights").Data)
				require.Equal(t, make([]float32, len(testTokens)*m.DModel), vt.Tensor("blocks.1.hook_mlp_out").Data)
			}
		})
	}
}

func TestStories260K(t *testing.T) {
	m, err := model.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	defer m.Close()
	ce, ve := engines(t, m)
	prompt := []int32{1, 403, 407, 261, 378} // "Once upon a time" with BOS
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	requireSameTrace(t, prefill(t, ve, prompt, o), prefill(t, ce, prompt, o), pointTol)

	// The published greedy continuation (llama2.c and llama.cpp agree),
	// one token per prefill through the KV cache.
	s, err := ve.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	const want = ", there was a little girl named Lily. She loved to play outside in the park. One day,"
	tokens, text := prompt, ""
	var out []int32
	for len(text) < len(want) && len(out) < 60 {
		tr, err := s.Prefill(context.Background(), tokens, engine.Options{Predict: true})
		require.NoError(t, err)
		out = append(out, tr.Predicted[0])
		tokens = tr.Predicted[:1]
		text, err = m.Tok.Decode(out)
		require.NoError(t, err)
	}
	require.Equal(t, want, text)
}

func TestConcurrentSessionsAgree(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q4_0, 13)
	e, err := engine.NewEngine(m, testBackend(t))
	require.NoError(t, err)
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll}
	want := prefill(t, e, testTokens, o)
	got := make([]*trace.Trace, 3)
	errs := make([]error, len(got))
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			s, err := e.NewSession(0)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			if got[i], errs[i] = s.Prefill(context.Background(), testTokens, o); errs[i] == nil {
				errs[i] = got[i].Load() // reads while the other sessions run
			}
		})
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		for _, name := range want.Names {
			require.Equal(t, want.Tensor(name).Data, got[i].Tensor(name).Data, "session %d: %s", i, name)
		}
	}
}

// A fast-precision prefill stays close to the exact one at every point:
// float16 inputs carry 11 significant bits (2^-11 = 4.9e-4 relative), and
// over 2 layers the errors reached 6e-4 to 8e-4 of a point's largest value
// on lavapipe; the bound leaves 6x for other devices' rounding (toward zero
// doubles it) and summation order. Exact runs stay at pointTol.
func TestFastPrecisionPrefillStaysNearExact(t *testing.T) {
	const fastTol = 5e-3
	for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K, gguf.F16} {
		t.Run(typ.String(), func(t *testing.T) {
			m := genModel(t, "tiny-qwen3", typ, 9)
			ce, ve := engines(t, m)
			o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.*.attn.hook_pattern"), Logits: engine.LogitsAll}
			want := prefill(t, ce, testTokens, o)
			o.Precision = backend.PrecisionFast
			got := prefill(t, ve, testTokens, o)
			worst := 0.0
			for _, name := range want.Names {
				rel, ok := relErr(got.Tensor(name).Data, want.Tensor(name).Data)
				require.True(t, ok, name)
				require.LessOrEqual(t, rel, fastTol, name)
				worst = max(worst, rel)
			}
			t.Logf("%v: largest relative error of a fast point against the exact CPU run: %.2g", typ, worst)
			require.Greater(t, worst, pointTol/10, "the fast run rounded something")
		})
	}
	_, ve := engines(t, genModel(t, "tiny-qwen3", gguf.F32, 9))
	s, err := ve.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens[:3], engine.Options{Precision: 7})
	require.ErrorContains(t, err, "Options.Precision 7 is not PrecisionExact or PrecisionFast")
}

// A mixture's tokens are lined up by expert on the device unless a hook may
// have edited the experts' ids: then the ids are read back and checked on
// the host. Either way the prefill is the CPU's; the kernels that ran
// (with profiling on) say which way each layer went.
func TestMixtureRoutesOnTheDeviceUnlessIDsAreHooked(t *testing.T) {
	b, err := vulkan.Open(vulkan.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	if err := b.SetProfiling(true); err != nil {
		t.Skip(err)
	}
	m := genModel(t, "tiny-qwen3moe", gguf.Q4_K, 4)
	ve, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	ce, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	keep := engine.Hook{Point: "blocks.1.mlp.hook_expert_ids", Device: func(string, []int) ([]engine.DeviceEdit, error) { return nil, nil }}
	for _, c := range []struct {
		name          string
		hooks         []engine.Hook
		routed, ofIDs int // layers lined up on the device, and on the host
	}{
		{"no hooks", nil, m.Layers, 0},
		{"a hook at layer 1's ids", []engine.Hook{keep}, m.Layers - 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll, Hooks: c.hooks}
			b.StageTimes() // drop earlier kernels
			got := prefill(t, ve, testTokens, o)
			counts := map[string]int{}
			for _, st := range b.StageTimes() {
				counts[st.Name] += st.Count
			}
			require.Equal(t, c.routed, counts["sortexperts"], "layers sorted on the device")
			require.Equal(t, 3*c.routed, counts["experttiles"], "tiles written on the device: gate, up and down")
			require.Equal(t, c.ofIDs, counts["gather_rows"], "layers lined up on the host")
			requireSameTrace(t, got, prefill(t, ce, testTokens, o), pointTol)
		})
	}
}
