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
	mix, err := synth.ParseMix(name)
	require.NoError(t, err)
	w, err := synth.GenerateMix(s, mix, 1)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), "mix")
	require.NoError(t, err)
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
	require.ErrorContains(t, err, "nor a mix (Q4_K_M, Q5_K_M)")
}
