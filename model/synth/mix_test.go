package synth_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// Q4_K_M and Q5_K_M as llama.cpp's quantizer gives a 28-layer model
// (bonsai-1.7b's depth; llama_tensor_get_type, no importance matrix):
// attn_v and ffn_down in Q6_K in layers 0-2 and 24-27 (the first and last
// eighth) and in 5, 8, ..., 23 (every third after the first eighth), the LM
// head in Q6_K, every other matrix in the base type. The layers are listed
// here, not computed.
func TestKMMixesMatchLlamaCppRecipe(t *testing.T) {
	for name, base := range map[string]gguf.Type{"q4_k_m": gguf.Q4_K, "Q5_K_M": gguf.Q5_K} {
		t.Run(name, func(t *testing.T) { testKMMix(t, name, base) })
	}
}

func testKMMix(t *testing.T, name string, base gguf.Type) {
	s := synth.Shapes["tiny-qwen3"]
	s.Layers = 28
	f := generated(t, s, name)
	more := map[int]bool{0: true, 1: true, 2: true, 5: true, 8: true, 11: true, 14: true, 17: true, 20: true, 23: true, 24: true, 25: true, 26: true, 27: true}
	matrices := 0
	for _, ti := range f.Tensors {
		if len(ti.Dims) < 2 {
			require.Equal(t, gguf.F32, ti.Type, ti.Name)
			continue
		}
		matrices++
		want := base
		var layer int
		if _, err := fmt.Sscanf(ti.Name, "blk.%d.", &layer); err == nil &&
			(strings.HasSuffix(ti.Name, ".attn_v.weight") || strings.HasSuffix(ti.Name, ".ffn_down.weight")) && more[layer] {
			want = gguf.Q6_K
		}
		if ti.Name == "output.weight" {
			want = gguf.Q6_K
		}
		require.Equal(t, want, ti.Type, ti.Name)
	}
	require.Equal(t, 2+28*7, matrices, "the embedding, the head and seven matrices a layer")
	m, err := model.Load(f)
	require.NoError(t, err, "the mix loads")
	require.Equal(t, gguf.Q6_K, m.Output.Type())
}

func TestParseMixNamesWhatItKnows(t *testing.T) {
	m, err := synth.ParseMix("Q8_0")
	require.NoError(t, err)
	require.Equal(t, synth.Uniform(gguf.Q8_0).Name, m.Name)
	_, err = synth.ParseMix("Q4_K_L")
	require.ErrorContains(t, err, "Q4_K_L")
	require.ErrorContains(t, err, "or a mix of llama.cpp's quantizer (Q4_K_M, Q5_K_M)")
	require.ErrorContains(t, err, "Q6_K, BF16", "the tensor types too")
}

// The recipes' other rules, on the shapes they touch (llama_tensor_get_type
// of the llama.cpp release the peer benchmarks run): where the LM head is
// the embedding (Gemma), the embedding takes the head's Q6_K; a mixture's
// router and GPT-2's learned positions are not quantized; with 8 experts,
// attn_k and attn_v are Q8_0 and attn_output Q5_K. The file says which mix
// it is (general.file_type, llama.cpp's 15 and 17), and loads.
func TestKMMixesOnOtherShapes(t *testing.T) {
	for _, c := range []struct {
		mix, shape string
		base       gguf.Type
		want       map[string]gguf.Type // tensors with a type of their own; the other matrices are base
	}{
		{"Q4_K_M", "tiny-gemma2", gguf.Q4_K, map[string]gguf.Type{"token_embd.weight": gguf.Q6_K,
			"blk.1.attn_v.weight": gguf.Q6_K, "blk.1.ffn_down.weight": gguf.Q6_K}},
		{"Q5_K_M", "tiny-qwen3moe", gguf.Q5_K, map[string]gguf.Type{"output.weight": gguf.Q6_K,
			"blk.0.ffn_gate_inp.weight": gguf.F32, "blk.1.ffn_gate_inp.weight": gguf.F32,
			"blk.0.attn_k.weight": gguf.Q8_0, "blk.0.attn_v.weight": gguf.Q8_0, "blk.1.attn_k.weight": gguf.Q8_0, "blk.1.attn_v.weight": gguf.Q8_0,
			"blk.1.ffn_down_exps.weight": gguf.Q6_K}},
		{"Q4_K_M", "tiny-qwen3moe", gguf.Q4_K, map[string]gguf.Type{"output.weight": gguf.Q6_K,
			"blk.0.ffn_gate_inp.weight": gguf.F32, "blk.1.ffn_gate_inp.weight": gguf.F32,
			"blk.0.attn_k.weight": gguf.Q8_0, "blk.0.attn_v.weight": gguf.Q8_0, "blk.1.attn_k.weight": gguf.Q8_0, "blk.1.attn_v.weight": gguf.Q8_0,
			"blk.0.attn_output.weight": gguf.Q5_K, "blk.1.attn_output.weight": gguf.Q5_K, "blk.1.ffn_down_exps.weight": gguf.Q6_K}},
		{"Q4_K_M", "tiny-gpt2", gguf.Q4_K, map[string]gguf.Type{"output.weight": gguf.Q6_K, "position_embd.weight": gguf.F32,
			"blk.0.attn_qkv.weight": gguf.Q5_K, "blk.1.attn_qkv.weight": gguf.Q5_K, "blk.1.ffn_down.weight": gguf.Q6_K}},
		{"Q5_K_M", "tiny-phi3", gguf.Q5_K, map[string]gguf.Type{"output.weight": gguf.Q6_K,
			"blk.0.attn_qkv.weight": gguf.Q6_K, "blk.1.attn_qkv.weight": gguf.Q6_K, "blk.1.ffn_down.weight": gguf.Q6_K}},
	} {
		t.Run(c.mix+"/"+c.shape, func(t *testing.T) {
			f := generated(t, synth.Shapes[c.shape], c.mix)
			seen := 0
			for _, ti := range f.Tensors {
				want, named := c.want[ti.Name]
				switch {
				case named:
					seen++
				case len(ti.Dims) < 2:
					want = gguf.F32
				default:
					want = c.base
				}
				require.Equal(t, want, ti.Type, ti.Name)
			}
			require.Equal(t, len(c.want), seen, "every named tensor is in the file")
			got, ok := synth.MixOf(f)
			require.True(t, ok, "general.file_type names the mix")
			require.Equal(t, c.mix, got.Name)
			_, err := model.Load(f)
			require.NoError(t, err, "the mix loads")
		})
	}
	_, ok := synth.MixOf(generated(t, synth.Shapes["tiny-llama"], "Q4_K"))
	require.False(t, ok, "one type is no mix")
}

// generated is the file GenerateMix writes for the shape in the mix (or
// type) named, as read back.
func generated(t *testing.T, s synth.Shape, name string) *gguf.File {
	t.Helper()
	mix, err := synth.ParseMix(name)
	require.NoError(t, err)
	w, err := synth.GenerateMix(s, mix, 1)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), name)
	require.NoError(t, err)
	return f
}
