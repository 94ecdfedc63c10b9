package model_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// rewrite generates a model of shape and writes it again through edit,
// which may change keys, and tensor, which may drop or reshape tensors.
func rewrite(t *testing.T, shape string, edit func(key string, v any) (any, bool), tensor func(ti *gguf.TensorInfo) ([]int64, bool)) *gguf.Writer {
	t.Helper()
	w, err := synth.Generate(synth.Shapes[shape], gguf.F32, 1)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), shape)
	require.NoError(t, err)
	out := gguf.NewWriter()
	for _, kv := range f.KVs {
		v, keep := kv.Value.Any(), true
		if edit != nil {
			v, keep = edit(kv.Key, v)
		}
		if keep {
			require.NoError(t, out.AddKV(kv.Key, v))
		}
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		dims, keep := ti.Dims, true
		if tensor != nil {
			dims, keep = tensor(ti)
		}
		if keep {
			require.NoError(t, out.AddTensor(ti.Name, ti.Type, dims, f.Data(ti)))
		}
	}
	return out
}

// rebuild loads the model rewrite makes.
func rebuild(t *testing.T, shape string, edit func(key string, v any) (any, bool), tensor func(ti *gguf.TensorInfo) ([]int64, bool)) (*model.Model, error) {
	t.Helper()
	var buf bytes.Buffer
	_, err := rewrite(t, shape, edit, tensor).WriteTo(&buf)
	require.NoError(t, err)
	g, err := gguf.Parse(buf.Bytes(), shape+" (edited)")
	require.NoError(t, err)
	return model.Load(g)
}

func TestConfigPerArchitecture(t *testing.T) {
	for name, want := range map[string]struct {
		rope          model.RopeMode
		bias, qkNorm  bool
		heads, kv, hd int
	}{
		"tiny-llama": {model.RopeAdjacent, false, false, 4, 2, 64},
		"tiny-qwen2": {model.RopeNeoX, true, false, 8, 2, 32},
		"tiny-qwen3": {model.RopeNeoX, false, true, 8, 4, 32},
	} {
		m, err := rebuild(t, name, nil, nil)
		require.NoError(t, err, name)
		require.Equal(t, want.rope, m.Rope.Mode, name)
		require.Equal(t, want.bias, m.QKVBias, name)
		require.Equal(t, want.qkNorm, m.QKNorm, name)
		require.Equal(t, [3]int{want.heads, want.kv, want.hd}, [3]int{m.Heads, m.KVHeads, m.HeadDim}, name)
		require.Equal(t, m.HeadDim, m.Rope.Dim, name)
		require.Equal(t, float32(1e-6), m.NormEps, name)
		require.False(t, m.TiedEmbd, name)
		if want.bias {
			require.Len(t, m.Blocks[1].KBias, m.KVDim())
		}
		if want.qkNorm {
			require.Len(t, m.Blocks[1].QNorm, m.HeadDim)
		}
	}
}

// GPT-2 as llama.cpp writes it: LayerNorm with biases, learned positions,
// one fused attn_qkv matrix and bias (Q, K, V rows in that order), a GELU
// MLP without a gate.
func TestGPT2Layout(t *testing.T) {
	m, err := rebuild(t, "tiny-gpt2", nil, nil)
	require.NoError(t, err)
	require.Equal(t, model.NormLayer, m.Norm)
	require.Equal(t, model.PosLearned, m.Pos)
	require.Equal(t, model.MLPGELU, m.MLP)
	require.Equal(t, float32(1e-5), m.NormEps, "read from gpt2.attention.layer_norm_epsilon")
	require.Equal(t, [3]int{4, 4, 64}, [3]int{m.Heads, m.KVHeads, m.HeadDim})
	require.Equal(t, 512, m.PosEmbed.Rows)
	d := m.DModel
	for l, b := range m.Blocks {
		fused, ok := m.File.Tensor(fmt.Sprintf("blk.%d.attn_qkv.weight", l))
		require.True(t, ok)
		rows := make([]float32, 3*d*d)
		m.Blocks[l].Q.Format.Dequantize(rows, m.File.Data(fused))
		for i, part := range []*model.Weight{b.Q, b.K, b.V} {
			got := make([]float32, d*d)
			part.Format.Dequantize(got, part.Data)
			require.Equal(t, rows[i*d*d:(i+1)*d*d], got, "layer %d part %d", l, i)
		}
		bias, _ := m.File.Tensor(fmt.Sprintf("blk.%d.attn_qkv.bias", l))
		all := make([]float32, 3*d)
		m.Blocks[l].Q.Format.Dequantize(all, m.File.Data(bias))
		require.Equal(t, all, append(append(append([]float32{}, b.QBias...), b.KBias...), b.VBias...))
		require.Nil(t, b.Gate)
		require.Len(t, b.AttnNormBias, d)
		require.Len(t, b.DownBias, d)
	}
	var elements int64
	for _, ti := range m.File.Tensors {
		elements += ti.Elements()
	}
	require.Equal(t, elements, m.Params(), "every tensor of the file is a parameter")

	_, err = rebuild(t, "tiny-gpt2", func(k string, v any) (any, bool) {
		if k == "gpt2.context_length" {
			return uint32(1024), true
		}
		return v, true
	}, nil)
	require.ErrorContains(t, err, "tensor position_embd.weight has 512 positions, fewer than gpt2.context_length 1024")
	_, err = rebuild(t, "tiny-gpt2", nil, func(ti *gguf.TensorInfo) ([]int64, bool) { return ti.Dims, ti.Name != "blk.0.ffn_norm.bias" })
	require.ErrorContains(t, err, "tensor blk.0.ffn_norm.bias is missing")
}

// Gemma 2 and 3 as llama.cpp reads them: embedding times sqrt(d_model),
// norms after attention and MLP, GeGLU, tied LM head, sliding-window layers
// in its patterns (every other layer; five of six), Gemma 2's soft caps,
// Gemma 3's unscaled base-10000 RoPE on local layers.
func TestGemmaLayouts(t *testing.T) {
	g2, err := rebuild(t, "tiny-gemma2", nil, nil)
	require.NoError(t, err)
	require.Equal(t, float32(16), g2.EmbedScale)
	require.True(t, g2.PostNorms)
	require.True(t, g2.TiedEmbd)
	require.Equal(t, model.MLPGeGLU, g2.MLP)
	require.Equal(t, model.RopeNeoX, g2.Rope.Mode)
	require.Equal(t, [2]float32{50, 30}, [2]float32{g2.AttnSoftcap, g2.FinalSoftcap})
	require.Equal(t, []int{5, 0}, []int{g2.Window(0), g2.Window(1)})
	require.Zero(t, g2.AttnScale, "1/sqrt(head_dim)")
	require.Len(t, g2.Blocks[1].FFNPostNorm, 256)
	require.Equal(t, 512, g2.QDim(), "query width need not be d_model")

	g3, err := rebuild(t, "tiny-gemma3", nil, nil)
	require.NoError(t, err)
	var windows []int
	for l := range g3.Layers {
		windows = append(windows, g3.Window(l))
	}
	require.Equal(t, []int{5, 5, 5, 5, 5, 0}, windows)
	require.Zero(t, g3.AttnSoftcap)
	require.True(t, g3.QKNorm)
	require.Equal(t, model.RopeScaling{Type: "linear", Factor: 8, BetaFast: 32, BetaSlow: 1, AttnFactor: 1}, g3.RopeAt(5).Scaling)
	require.Equal(t, 1e6, g3.RopeAt(5).Theta)
	local := g3.RopeAt(0)
	require.Equal(t, 10000.0, local.Theta)
	require.Equal(t, "none", local.Scaling.Type)
	require.Equal(t, model.RopeNeoX, local.Mode)

	for _, m := range []*model.Model{g2, g3} {
		var elements int64
		for _, ti := range m.File.Tensors {
			elements += ti.Elements()
		}
		require.Equal(t, elements, m.Params(), "%s: every tensor of the file is a parameter", m.Arch)
	}

	// The 27B of each generation scales queries by 1/sqrt(d_model/heads).
	for arch, layers := range map[string]uint32{"gemma2": 46, "gemma3": 62} {
		w, err := synth.Generate(synth.Shapes["tiny-"+arch], gguf.F32, 1)
		require.NoError(t, err)
		var buf bytes.Buffer
		_, err = w.WriteTo(&buf)
		require.NoError(t, err)
		f, err := gguf.Parse(buf.Bytes(), arch)
		require.NoError(t, err)
		meta := gguf.NewWriter() // the metadata alone: ReadConfig reads no tensor
		for _, kv := range f.KVs {
			v := kv.Value.Any()
			if kv.Key == arch+".block_count" {
				v = layers
			}
			require.NoError(t, meta.AddKV(kv.Key, v))
		}
		buf.Reset()
		_, err = meta.WriteTo(&buf)
		require.NoError(t, err)
		f, err = gguf.Parse(buf.Bytes(), arch)
		require.NoError(t, err)
		c, err := model.ReadConfig(f)
		require.NoError(t, err)
		require.InEpsilon(t, 1/math.Sqrt(256.0/4), float64(c.AttnScale), 1e-7, arch)
	}
}

// Phi-3: fused QKV (or, from other converters, Q, K and V apart), gate and
// up in one ffn_up, gate first; LongRoPE's two sets of factors with the
// original context and the attention factor from the metadata.
func TestPhi3Layout(t *testing.T) {
	m, err := rebuild(t, "tiny-phi3", nil, nil)
	require.NoError(t, err)
	require.True(t, m.FusedGateUp)
	require.Equal(t, model.MLPSwiGLU, m.MLP)
	require.Equal(t, 64, m.Rope.Scaling.OrigContext)
	require.InEpsilon(t, math.Sqrt(1+math.Log(8)/math.Log(64)), m.Rope.Scaling.AttnFactor, 1e-7)
	require.NotNil(t, m.LongRope)
	require.Equal(t, m.Rope.Scaling, m.LongRope.Scaling)
	require.InDelta(t, 8, m.LongRope.FreqFactors[31], 1e-6, "the long factors reach the context ratio")
	require.InDelta(t, 1.1, m.Rope.FreqFactors[31], 1e-6, "Rope has the short ones")
	d, ffn := m.DModel, m.FFN
	decode := func(w *model.Weight) []float32 {
		out := make([]float32, w.Rows*w.Cols)
		w.Format.Dequantize(out, w.Data)
		return out
	}
	up, _ := m.File.Tensor("blk.1.ffn_up.weight")
	both := make([]float32, 2*ffn*d)
	m.Blocks[1].Up.Format.Dequantize(both, m.File.Data(up))
	require.Equal(t, both[:ffn*d], decode(m.Blocks[1].Gate), "gate rows first")
	require.Equal(t, both[ffn*d:], decode(m.Blocks[1].Up))

	// The same weights with Q, K and V stored apart load the same.
	q, k, v := m.QDim(), m.KVDim(), m.KVDim()
	w, err := synth.Generate(synth.Shapes["tiny-phi3"], gguf.F32, 1)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), "phi3")
	require.NoError(t, err)
	out := gguf.NewWriter()
	for _, kv := range f.KVs {
		require.NoError(t, out.AddKV(kv.Key, kv.Value.Any()))
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		var l int
		if _, err := fmt.Sscanf(ti.Name, "blk.%d.attn_qkv.weight", &l); err == nil {
			data, row := f.Data(ti), 4*d
			for _, part := range []struct {
				name       string
				rows, from int
			}{{"attn_q", q, 0}, {"attn_k", k, q}, {"attn_v", v, q + k}} {
				name := fmt.Sprintf("blk.%d.%s.weight", l, part.name)
				require.NoError(t, out.AddTensor(name, ti.Type, []int64{int64(d), int64(part.rows)}, data[part.from*row:(part.from+part.rows)*row]))
			}
			continue
		}
		require.NoError(t, out.AddTensor(ti.Name, ti.Type, ti.Dims, f.Data(ti)))
	}
	var apartBuf bytes.Buffer // out's tensors alias buf
	_, err = out.WriteTo(&apartBuf)
	require.NoError(t, err)
	g, err := gguf.Parse(apartBuf.Bytes(), "phi3 apart")
	require.NoError(t, err)
	apart, err := model.Load(g)
	require.NoError(t, err)
	for l := range m.Layers {
		for i, pair := range [][2]*model.Weight{{m.Blocks[l].Q, apart.Blocks[l].Q}, {m.Blocks[l].K, apart.Blocks[l].K}, {m.Blocks[l].V, apart.Blocks[l].V}} {
			require.Equal(t, decode(pair[0]), decode(pair[1]), "layer %d part %d", l, i)
		}
	}
}

// Mixtures of experts as llama.cpp writes them: a router and each expert
// kind in one [cols, rows, experts] tensor, whose slabs are the experts.
func TestMixtureLayouts(t *testing.T) {
	for _, shape := range []string{"tiny-qwen3moe", "tiny-mixtral"} {
		m, err := rebuild(t, shape, nil, nil)
		require.NoError(t, err, shape)
		sh := synth.Shapes[shape]
		require.Equal(t, [3]int{sh.Experts, sh.ExpertsUsed, sh.ExpertFFN}, [3]int{m.Experts, m.ExpertsUsed, m.ExpertFFN}, shape)
		require.Len(t, m.Blocks[1].Experts, sh.Experts)
		require.Nil(t, m.Blocks[1].Gate)
		down, _ := m.File.Tensor("blk.1.ffn_down_exps.weight")
		all := make([]float32, sh.Experts*sh.DModel*sh.ExpertFFN)
		m.Blocks[1].Router.Format.Dequantize(all, m.File.Data(down))
		last := m.Blocks[1].Experts[sh.Experts-1].Down
		got := make([]float32, last.Rows*last.Cols)
		last.Format.Dequantize(got, last.Data)
		require.Equal(t, all[len(all)-len(got):], got, "%s: the last expert is the last slab", shape)
		var elements int64
		for _, ti := range m.File.Tensors {
			elements += ti.Elements()
		}
		require.Equal(t, elements, m.Params(), "%s: every tensor of the file is a parameter", shape)
	}
	for key, v := range map[string]uint32{"qwen3moe.expert_used_count": 9, "qwen3moe.expert_count": 100000} {
		_, err := rebuild(t, "tiny-qwen3moe", func(k string, old any) (any, bool) {
			if k == key {
				return v, true
			}
			return old, true
		}, nil)
		require.ErrorContains(t, err, "is out of range", key)
	}
	_, err := rebuild(t, "tiny-qwen3moe", func(k string, v any) (any, bool) { return v, k != "qwen3moe.expert_used_count" }, nil)
	require.ErrorContains(t, err, "qwen3moe.expert_count is 8 but")
}

func TestStories260KConfig(t *testing.T) {
	m, err := model.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	defer m.Close()
	c := m.Config
	require.Equal(t, "llama", c.Arch)
	require.Equal(t, [7]int{5, 64, 172, 8, 4, 8, 512}, [7]int{c.Layers, c.DModel, c.FFN, c.Heads, c.KVHeads, c.HeadDim, c.Vocab})
	require.Equal(t, model.Rope{Mode: model.RopeAdjacent, Dim: 8, Theta: 10000, Scaling: c.Rope.Scaling}, c.Rope)
	require.Equal(t, "none", c.Rope.Scaling.Type)
	require.Equal(t, float32(1e-5), c.NormEps)
	require.Equal(t, int64(292800), m.Params())
}

func TestTiedEmbeddingsWhenOutputIsAbsent(t *testing.T) {
	m, err := rebuild(t, "tiny-qwen3", nil, func(ti *gguf.TensorInfo) ([]int64, bool) { return ti.Dims, ti.Name != "output.weight" })
	require.NoError(t, err)
	require.True(t, m.TiedEmbd)
	require.Same(t, m.Embed, m.Output)
}

func TestLoadErrorsNameTheProblem(t *testing.T) {
	_, err := rebuild(t, "tiny-llama", func(k string, v any) (any, bool) {
		if k == "general.architecture" {
			return "gpt-neox", true
		}
		return v, true
	}, nil)
	require.ErrorContains(t, err, `architecture "gpt-neox" is not supported (supported: `+strings.Join(model.Architectures(), ", ")+")")

	_, err = rebuild(t, "tiny-llama", nil, func(ti *gguf.TensorInfo) ([]int64, bool) { return ti.Dims, ti.Name != "blk.1.ffn_up.weight" })
	require.ErrorContains(t, err, "tensor blk.1.ffn_up.weight is missing")

	_, err = rebuild(t, "tiny-llama", func(k string, v any) (any, bool) {
		if k == "llama.feed_forward_length" {
			return uint32(256), true
		}
		return v, true
	}, nil)
	require.ErrorContains(t, err, "tensor blk.0.ffn_gate.weight has shape [256 512], want [256 256]")

	_, err = rebuild(t, "tiny-qwen3", nil, func(ti *gguf.TensorInfo) ([]int64, bool) {
		if ti.Name == "blk.0.attn_q_norm.weight" {
			return nil, false
		}
		return ti.Dims, true
	})
	require.ErrorContains(t, err, "tensor blk.0.attn_q_norm.weight is missing")

	_, err = rebuild(t, "tiny-llama", func(k string, v any) (any, bool) {
		if k == "llama.attention.head_count_kv" {
			return uint32(3), true
		}
		return v, true
	}, nil)
	require.ErrorContains(t, err, "head_count 4 is not a multiple of head_count_kv 3")

	_, err = rebuild(t, "tiny-llama", func(k string, v any) (any, bool) { return v, k != "llama.block_count" }, nil)
	require.ErrorContains(t, err, "llama.block_count")
}

func TestRopeScalingFromMetadata(t *testing.T) {
	m, err := rebuild(t, "tiny-qwen3", func(k string, v any) (any, bool) { return v, true }, nil)
	require.NoError(t, err)
	require.Equal(t, "none", m.Rope.Scaling.Type)
	add := func(kvs map[string]any) (*model.Model, error) {
		w, err := synth.Generate(synth.Shapes["tiny-qwen3"], gguf.F32, 1)
		require.NoError(t, err)
		for k, v := range kvs {
			require.NoError(t, w.AddKV(k, v))
		}
		var buf bytes.Buffer
		_, err = w.WriteTo(&buf)
		require.NoError(t, err)
		f, err := gguf.Parse(buf.Bytes(), "scaled")
		require.NoError(t, err)
		return model.Load(f)
	}
	m, err = add(map[string]any{"qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": float32(4), "qwen3.rope.scaling.original_context_length": uint32(128)})
	require.NoError(t, err)
	require.Equal(t, model.RopeScaling{Type: "yarn", Factor: 4, OrigContext: 128, BetaFast: 32, BetaSlow: 1, ExtFactor: 1, AttnFactor: 1}, m.Rope.Scaling)
	_, err = add(map[string]any{"qwen3.rope.scaling.type": "longrope"})
	require.ErrorContains(t, err, `rope.scaling.type "longrope" is not supported`)
}

// Llama 3.1's frequency factors, computed here the way HuggingFace's
// _compute_llama3_parameters does (divide the low frequencies, blend the
// middle band of wavelengths) rather than the converter's way that
// model.Llama3FreqFactors follows: a file's rope_freqs.weight must give
// inv_freq / llama3_inv_freq for each pair.
func TestLlama3FrequencyFactorsFromTheFile(t *testing.T) {
	m, err := rebuild(t, "tiny-llama3", nil, nil)
	require.NoError(t, err)
	ff := m.Rope.FreqFactors
	require.Len(t, ff, 32)
	const theta, factor, low, high, orig = 5e5, 8.0, 1.0, 4.0, 8192.0
	seen := map[string]bool{}
	for i, got := range ff {
		inv := 1 / math.Pow(theta, float64(2*i)/64)
		wavelen := 2 * math.Pi / inv
		scaled := inv
		if wavelen > orig/low {
			scaled = inv / factor
		}
		if !(wavelen < orig/high) && !(wavelen > orig/low) {
			smooth := (orig/wavelen - low) / (high - low)
			scaled = (1-smooth)*scaled/factor + smooth*scaled
			seen["blended"] = true
		} else {
			seen[fmt.Sprint(inv/scaled)] = true
		}
		// float32 storage: 6e-8 relative.
		require.InEpsilon(t, inv/scaled, float64(got), 1e-6, "pair %d", i)
	}
	require.Equal(t, map[string]bool{"1": true, "8": true, "blended": true}, seen, "the shape covers all three bands")

	plain, err := rebuild(t, "tiny-llama", nil, nil)
	require.NoError(t, err)
	require.Nil(t, plain.Rope.FreqFactors, "no rope_freqs.weight: no factors")

	withFactors := func(ff []float32) error {
		w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.F32, 1)
		require.NoError(t, err)
		raw := make([]byte, 4*len(ff))
		for i, v := range ff {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		require.NoError(t, w.AddTensor("rope_freqs.weight", gguf.F32, []int64{int64(len(ff))}, raw))
		var buf bytes.Buffer
		_, err = w.WriteTo(&buf)
		require.NoError(t, err)
		f, err := gguf.Parse(buf.Bytes(), "factors")
		require.NoError(t, err)
		_, err = model.Load(f)
		return err
	}
	ok := make([]float32, 32)
	for i := range ok {
		ok[i] = 2
	}
	require.NoError(t, withFactors(ok))
	require.ErrorContains(t, withFactors(ok[:16]), "tensor rope_freqs.weight has shape [16], want [32]")
	ok[3] = 0
	require.ErrorContains(t, withFactors(ok), "tensor rope_freqs.weight: factor 3 is 0, want a positive number")
	ok[3] = float32(math.NaN())
	require.ErrorContains(t, withFactors(ok), "factor 3 is NaN")
}

// Generating a model holds one tensor at a time: writing a 40-layer model
// of about 70 MB allocates a small part of that (before, every tensor was
// made first and held until the file was written).
func TestGenerateHoldsOneTensorAtATime(t *testing.T) {
	s := synth.Shapes["tiny-qwen3"]
	s.Layers = 40
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w, err := synth.Generate(s, gguf.F32, 1)
	require.NoError(t, err)
	size := w.Size()
	n, err := w.WriteTo(io.Discard)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Equal(t, size, n)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("wrote %d MB, allocating %d MB", n>>20, allocated>>20)
	require.Less(t, allocated, uint64(size)/4)
}

// Issue 47.11: gen wrote mixtures in TQ2_0_g128 that Load then refused.
// Whatever Generate makes, Load takes: every tiny shape in every type.
func TestEveryGeneratedModelLoads(t *testing.T) {
	refused := 0
	for name, s := range synth.Shapes {
		if !strings.HasPrefix(name, "tiny-") {
			continue // the full-size shapes take minutes each
		}
		for id := range 64 {
			typ := gguf.Type(id)
			if _, ok := typ.Info(); !ok {
				continue
			}
			w, err := synth.Generate(s, typ, 1)
			if err != nil {
				refused++
				continue
			}
			var buf bytes.Buffer
			_, err = w.WriteTo(&buf)
			require.NoError(t, err)
			f, err := gguf.Parse(buf.Bytes(), name)
			require.NoError(t, err)
			_, err = model.Load(f)
			require.NoError(t, err, "%s in %s: generated, then refused", name, typ)
		}
	}
	require.Positive(t, refused, "some types are refused up front")
	_, err := synth.Generate(synth.Shapes["tiny-qwen3moe"], gguf.TQ2_0_G128, 1)
	require.ErrorContains(t, err, "a mixture's expert tensors in TQ2_0_g128 are not supported")
}

// An error from the file itself named it twice: "bad.gguf: gguf: missing key
// general.architecture in bad.gguf".
func TestOpenNamesTheFileOnce(t *testing.T) {
	out := rewrite(t, "tiny-llama", func(key string, v any) (any, bool) { return v, key != "general.architecture" }, nil)
	path := t.TempDir() + "/bad.gguf"
	require.NoError(t, out.WriteFile(path))
	_, err := model.Open(path)
	require.EqualError(t, err, "gguf: missing key general.architecture in "+path)
}
