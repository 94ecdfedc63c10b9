package cpu_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/trace"
)

// A fast-precision CPU prefill (int8 products for quantized weights) stays
// near the exact one at every captured point: x rounded to max|x|/127 per
// block moves each input by at most 1/254 of its block's largest, and the
// errors grow through the layers: on random tiny-qwen3 models (4 layers)
// the worst point of each type, in the last layers or the logits, was
// 2.2% (Q8_0, Q6_K) to 3.1% (TQ2_0_g128) of its largest value (logged). The
// bound leaves room for other seeds; float weights (no codes) stay
// float32, bit for bit.
func TestFastPrecisionPrefillStaysNearExact(t *testing.T) {
	if !cpu.Int8Products() {
		t.Skip("this CPU has no AVX-512 VNNI (or is not amd64): fast precision multiplies in float32")
	}
	const fastTol = 5e-2
	r := rand.New(rand.NewPCG(5, 6))
	tokens := make([]int32, 40) // more than 8 rows: the int8 kernel
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.Q1_0_G128, gguf.TQ2_0_G128, gguf.F16} {
		t.Run(typ.String(), func(t *testing.T) {
			m, err := synth.Random(synth.Shapes["tiny-qwen3"], typ, 9)
			require.NoError(t, err)
			for i := range tokens {
				tokens[i] = int32(r.IntN(m.Vocab))
			}
			o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.*.attn.hook_pattern", "blocks.*.mlp.hook_post"), Logits: engine.LogitsAll}
			want, got := exactAndFast(t, m, tokens, o)
			f, err := quant.For(typ)
			require.NoError(t, err)
			worst := 0.0
			for _, name := range want.Names {
				w, g := want.Tensor(name).Data, got.Tensor(name).Data
				if f.Codes == nil {
					enginetest.RequireBits(t, w, g, "%s: float weights multiply in float32 at either precision", name)
					continue
				}
				rel := relErr(w, g)
				require.LessOrEqual(t, rel, fastTol, name)
				worst = max(worst, rel)
			}
			if f.Codes != nil {
				t.Logf("%v: largest error of a fast point, relative to its largest value: %.2g", typ, worst)
				require.Greater(t, worst, 1e-5, "the fast run rounded something")
			}
		})
	}
}

// A prompt of 8 tokens or fewer (a short prefill, a decoding step, a
// chunk of a long one) multiplies matrix-vector products, which stay
// float32 at fast precision, as backend.PrecisionFast says: every point equals
// the exact prefill's bit for bit; one token more takes the int8 kernel.
func TestFastPrecisionOfEightRowsOrFewerIsExact(t *testing.T) {
	if !cpu.Int8Products() {
		t.Skip("this CPU has no AVX-512 VNNI (or is not amd64): fast precision multiplies in float32")
	}
	m, err := synth.Random(synth.Shapes["tiny-qwen3"], gguf.Q8_0, 4)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 4))
	tokens := make([]int32, 9)
	for i := range tokens {
		tokens[i] = int32(r.IntN(m.Vocab))
	}
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	for _, n := range []int{1, 8} {
		want, got := exactAndFast(t, m, tokens[:n], o)
		for _, name := range want.Names {
			enginetest.RequireBits(t, want.Tensor(name).Data, got.Tensor(name).Data, "%d tokens: %s", n, name)
		}
	}
	want, got := exactAndFast(t, m, tokens, o)
	require.NotEqual(t, want.Tensor("logits").Data, got.Tensor("logits").Data, "9 tokens: the int8 kernel")
}

// On a real model, stories260K with its matrices in Q8_0 (those whose
// width is a whole number of blocks), the fast prefill of its published
// greedy continuation predicts what the exact prefill predicts at every
// position, and its logits stay within 2% of their largest (measured
// worst: see the log).
func TestFastPrecisionPredictsAsExactOnStories260K(t *testing.T) {
	if !cpu.Int8Products() {
		t.Skip("this CPU has no AVX-512 VNNI (or is not amd64): fast precision multiplies in float32")
	}
	m, err := model.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	defer m.Close()
	q8, err := quant.For(gguf.Q8_0)
	require.NoError(t, err)
	requant := func(w *model.Weight) *model.Weight {
		if w.Cols%q8.BlockSize != 0 {
			return w
		}
		f := make([]float32, w.Rows*w.Cols)
		w.Format.Dequantize(f, w.Data)
		data := make([]byte, w.Rows*w.Cols/q8.BlockSize*q8.BlockBytes)
		q8.Quantize(data, f)
		return &model.Weight{Name: w.Name, Rows: w.Rows, Cols: w.Cols, Format: q8, Data: data}
	}
	quantized := 0
	for i := range m.Blocks {
		b := &m.Blocks[i]
		for _, w := range []**model.Weight{&b.Q, &b.K, &b.V, &b.O, &b.Gate, &b.Up, &b.Down} {
			if *w = requant(*w); (*w).Format == q8 {
				quantized++
			}
		}
	}
	m.Output = requant(m.Output)
	require.Greater(t, quantized, 20, "matrices in Q8_0")
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day,"
	bos := true
	tokens, err := m.Tok.Encode(text, tokenizer.Options{AddBOS: &bos})
	require.NoError(t, err)
	want, got := exactAndFast(t, m, tokens, engine.Options{Logits: engine.LogitsAll})
	w, g := want.Tensor("logits").Data, got.Tensor("logits").Data
	rel := relErr(w, g)
	t.Logf("%d tokens: largest logit error %.2g of the largest logit", len(tokens), rel)
	argmax := func(row []float32) int {
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return best
	}
	for p := range tokens {
		require.Equal(t, argmax(w[p*m.Vocab:(p+1)*m.Vocab]), argmax(g[p*m.Vocab:(p+1)*m.Vocab]), "prediction at position %d", p)
	}
	require.Less(t, rel, 0.02)
}

// exactAndFast prefills tokens on the CPU with o at exact, then at fast precision.
func exactAndFast(t *testing.T, m *model.Model, tokens []int32, o engine.Options) (exact, fast *trace.Trace) {
	t.Helper()
	e, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	s, err := e.NewSession(len(tokens))
	require.NoError(t, err)
	defer s.Close()
	exact, err = s.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	s.Reset()
	o.Precision = backend.PrecisionFast
	fast, err = s.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	return exact, fast
}

// relErr is the largest difference of got from want, relative to want's largest magnitude.
func relErr(want, got []float32) float64 {
	var diff, largest float64
	for i := range want {
		diff = max(diff, math.Abs(float64(got[i])-float64(want[i])))
		largest = max(largest, math.Abs(float64(want[i])))
	}
	return diff / largest
}
