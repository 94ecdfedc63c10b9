package synth_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model/synth"
)

// Issue 47.13: llama.cpp refused two generated families: tiny-gpt2 named
// its pre-tokenizer "gpt2" (llama.cpp writes and expects "gpt-2"), and a
// model named phi3 had no <unk>, <s> or </s>, which llama.cpp looks up by
// name to set their attributes (_Map_base::at). This checks that metadata
// in every tiny family; with STRATA_PEERBIN set to llama.cpp's bin folder
// (../shared/bench/llama_cpp_peer.sh builds it), llama-bench also loads
// and runs each file on the CPU.
func TestGeneratedFilesSuitLlamaCpp(t *testing.T) {
	peer := os.Getenv("STRATA_PEERBIN")
	for name, s := range synth.Shapes {
		if !strings.HasPrefix(name, "tiny-") {
			continue
		}
		mix := synth.Uniform(gguf.F32)
		if name == "tiny-qwen3" {
			mix = synth.Mixes["Q4_K_M"] // Q4_K, Q6_K and the recipe's mix of them
		}
		w, err := synth.GenerateMix(s, mix, 1)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), name+".gguf")
		require.NoError(t, w.WriteFile(path))
		f, err := gguf.Open(path)
		require.NoError(t, err)
		pre, err := f.String("tokenizer.ggml.pre")
		require.NoError(t, err)
		require.Contains(t, []string{"gpt-2", "qwen2"}, pre, "%s: a pre-tokenizer llama.cpp knows", name)
		if s.Arch == "gpt2" {
			require.Equal(t, "gpt-2", pre, name)
		}
		title, err := f.String("general.name")
		require.NoError(t, err)
		v, ok := f.Lookup("tokenizer.ggml.tokens")
		require.True(t, ok)
		tokens, ok := v.Any().([]string)
		require.True(t, ok, "%s: tokens are strings", name)
		if strings.Contains(title, "phi3") || strings.Contains(title, "phi-3") {
			for _, tok := range []string{"<unk>", "<s>", "</s>", "<|endoftext|>"} {
				require.True(t, slices.Contains(tokens, tok), "%s: llama.cpp looks up %s in a phi3 model", name, tok)
			}
		}
		f.Close()
		if peer != "" {
			out, err := exec.Command(filepath.Join(peer, "llama-bench"), "-m", path, "-p", "16", "-n", "0", "-t", "1", "-r", "1", "-ngl", "0").CombinedOutput()
			require.NoError(t, err, "%s: llama-bench: %s", name, out)
			require.Contains(t, string(out), "pp16", "%s: %s", name, out)
		}
	}
}
