package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

func strata(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := dispatch(context.Background(), args, &out)
	return out.String(), err
}

func TestInfoOnStories260K(t *testing.T) {
	out, err := strata(t, "info", sharedtest.Stories(t))
	require.NoError(t, err)
	for _, want := range []string{"architecture  llama", "layers        5", "d_model       64", "ffn           172",
		"8 query, 4 key/value (GQA 2:1), head_dim 8", "vocab         512", "F32            48 tensors",
		"tokenizer     llama, 512 tokens, BOS 1, EOS 2", "prefill of 512 tokens needs about"} {
		require.Contains(t, out, want)
	}
}

func TestTokenizeOnStories260K(t *testing.T) {
	out, err := strata(t, "tokenize", "--model", sharedtest.Stories(t), "Once upon a time")
	require.NoError(t, err)
	require.Equal(t, "1 403 407 261 378\n", out)
}

func TestRunOnStories260K(t *testing.T) {
	out, err := strata(t, "run", "--model", sharedtest.Stories(t), "--prompt", "Once upon a time", "-n", "30")
	require.NoError(t, err)
	require.Equal(t, ", there was a little girl named Lily. She loved to play outside in the park. One day,\n", out)
}

func TestTraceWritesNpzAndManifest(t *testing.T) {
	dir := t.TempDir()
	out, err := strata(t, "trace", "--model", sharedtest.Stories(t), "--tokens", "1,403,407,261,378",
		"--capture", "blocks.*.hook_resid_post,blocks.*.attn.hook_pattern,blocks.*.attn.cache_k,logits", "--out", dir)
	require.NoError(t, err)
	require.Contains(t, out, "traced 5 tokens through 5 layers")
	tr, err := trace.Load(dir)
	require.NoError(t, err)
	require.Equal(t, []int32{1, 403, 407, 261, 378}, tr.Tokens)
	require.Len(t, tr.Names, 5*3+1)
	require.Equal(t, []int{8, 5, 5}, tr.Tensor("blocks.4.attn.hook_pattern").Shape)
	require.Equal(t, []int{5, 4, 8}, tr.Tensor("blocks.0.attn.cache_k").Shape)
	require.Equal(t, []int{5, 512}, tr.Tensor("logits").Shape)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m trace.Manifest
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, []string{"<s>", " Once", " upon", " a", " time"}, m.Pieces)
}

func TestTraceRefusesBadRequests(t *testing.T) {
	_, err := strata(t, "trace", "--model", sharedtest.Stories(t), "--tokens", "1,x")
	require.ErrorContains(t, err, `"x" is not a token id`)
	_, err = strata(t, "trace", "--model", sharedtest.Stories(t), "--tokens", "1,2", "--capture", "blocks.*.nothing", "--out", t.TempDir())
	require.ErrorContains(t, err, "matches no capture point")
	_, err = strata(t, "info", filepath.Join(t.TempDir(), "missing.gguf"))
	require.ErrorContains(t, err, "missing.gguf")
	_, err = strata(t, "frobnicate")
	require.ErrorContains(t, err, `unknown command "frobnicate"`)
}

func TestGenWritesALoadableModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	out, err := strata(t, "gen", "--shape", "tiny-qwen3", "--type", "TQ2_0_g128", "--out", path)
	require.NoError(t, err)
	require.Contains(t, out, "wrote "+path)
	m, err := model.Open(path)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, "qwen3", m.Arch)
	require.Equal(t, "TQ2_0_g128", m.Blocks[0].Q.Type().String())
	_, err = strata(t, "gen", "--shape", "huge", "--out", path)
	require.ErrorContains(t, err, `unknown --shape "huge"`)
}

func TestBenchPrintsATable(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	out, err := strata(t, "bench", "--shape", "tiny-llama", "--type", "Q8_0", "--tokens", "8", "--capture", "none,all",
		"--precision", "exact,fast", "--iters", "1", "--json", jsonPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5)
	require.Contains(t, lines[1], "tiny-llama")
	require.Contains(t, lines[0], "precision")
	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rows []benchRow
	require.NoError(t, json.Unmarshal(raw, &rows))
	require.Len(t, rows, 4)
	require.Greater(t, rows[0].TokS, 0.0)
	require.Equal(t, []string{"exact", "exact", "fast", "fast"}, []string{rows[0].Precision, rows[1].Precision, rows[2].Precision, rows[3].Precision})
}

// bench --model names a generated Q4_K_M file as the mix it says it is
// (general.file_type), as bench --shape names it; a file that names no mix
// by its matrices' types, the most weights first, not by its LM head's.
func TestBenchNamesAMix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mix.gguf")
	_, err := strata(t, "gen", "--shape", "tiny-qwen3", "--type", "Q4_K_M", "--out", path)
	require.NoError(t, err)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	out, err := strata(t, "bench", "--model", path, "--backend", "cpu", "--tokens", "4", "--iters", "1", "--json", jsonPath)
	require.NoError(t, err)
	require.Contains(t, out, " Q4_K_M ")
	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rows []benchRow
	require.NoError(t, json.Unmarshal(raw, &rows))
	require.Equal(t, "Q4_K_M", rows[0].Type)
	f := &gguf.File{Tensors: []gguf.TensorInfo{
		{Name: "token_embd.weight", Dims: []int64{256, 512}, Type: gguf.Q4_K},
		{Name: "output.weight", Dims: []int64{256, 512}, Type: gguf.Q6_K},
		{Name: "blk.0.attn_q.weight", Dims: []int64{256, 256}, Type: gguf.Q4_K},
		{Name: "output_norm.weight", Dims: []int64{256}, Type: gguf.F32},
	}}
	require.Equal(t, "Q4_K+Q6_K", fileTypes(f))
}

func TestGenAndInfoOfALlama3Shape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l3.gguf")
	_, err := strata(t, "gen", "--shape", "tiny-llama3", "--type", "F32", "--out", path)
	require.NoError(t, err)
	out, err := strata(t, "info", path)
	require.NoError(t, err)
	require.Contains(t, out, "positions     RoPE adjacent, 64 dims, theta 500000, scaling none, frequency factors 1 to 8 (rope_freqs.weight, Llama 3 style)")
	require.Contains(t, out, "tokenizer     gpt2, 512 tokens, BOS none, EOS 256")
}

// info without a file describes the default model, as the other commands
// use it without --model.
func TestInfoDefaultsToTheDefaultModel(t *testing.T) {
	out, err := strata(t, "info")
	require.NoError(t, err)
	require.Contains(t, out, "the default model, gostd-qwen3-4m.gguf (embedded)")
	require.Contains(t, out, "architecture  qwen3")
	_, err = strata(t, "info", "a.gguf", "b.gguf")
	require.ErrorContains(t, err, "info takes one MODEL.gguf (or none, for the default model), not 2")
}

// vulkanPresent reports whether the machine has a Vulkan device (lavapipe
// counts).
func vulkanPresent(t *testing.T) bool {
	b, err := vulkan.Open(vulkan.Options{})
	if errors.Is(err, vulkan.ErrNoDevice) {
		return false
	}
	require.NoError(t, err)
	require.NoError(t, b.Close())
	return true
}

// On a GPU, bench's per-kernel times are those of a prefill like the timed
// ones: a session's second, which reuses its capture arenas. The first
// makes them, and the device's zeroing of them ("fill") was counted as a
// capture's copying (10 ms of a bonsai-1.7b capture-all prefill at T=2048).
func TestBenchProfilesAPrefillLikeTheTimedOnes(t *testing.T) {
	if !vulkanPresent(t) {
		t.Skip("this machine has no Vulkan device")
	}
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	_, err := strata(t, "bench", "--backend", "vulkan", "--shape", "tiny-qwen3", "--tokens", "16", "--capture", "all",
		"--iters", "1", "--warmup", "0s", "--json", jsonPath)
	require.NoError(t, err)
	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rows []benchRow
	require.NoError(t, json.Unmarshal(raw, &rows))
	require.Len(t, rows, 1)
	require.True(t, slices.ContainsFunc(slices.Collect(maps.Keys(rows[0].Kernels)), func(k string) bool { return strings.HasPrefix(k, "matmul") }),
		"per-kernel times: %v", rows[0].Kernels)
	require.NotContains(t, rows[0].Kernels, "fill", "no arena was made in the profiled prefill")
	sum := 0.0
	for _, ms := range rows[0].Stages {
		sum += ms
	}
	for _, ms := range rows[0].Kernels {
		sum -= ms
	}
	require.InDelta(t, 0, sum, 1e-9, "the stages are the kernels grouped")
}

func TestRunDrawsAsTheLibraryDoes(t *testing.T) {
	const prompt = "func main() {"
	args := []string{"run", "--backend", "cpu", "--prompt", prompt, "-n", "12", "--temperature", "0.9", "--top-p", "0.95"}
	out, err := strata(t, append(args, "--seed", "7")...)
	require.NoError(t, err)
	m := nb.Open("", nb.Backend("cpu"))
	want := m.Generate(prompt, 12, nb.Sample(engine.Sampler{Temperature: 0.9, TopP: 0.95, Seed: 7})).Text
	require.Equal(t, want+"\n", out)
	other, err := strata(t, append(args, "--seed", "8")...)
	require.NoError(t, err)
	require.NotEqual(t, out, other)
	// Without --seed, each run draws anew (12 tokens alike by chance: far
	// below one in a million for this model at temperature 0.9).
	first, err := strata(t, args...)
	require.NoError(t, err)
	second, err := strata(t, args...)
	require.NoError(t, err)
	require.NotEqual(t, first, second)

	_, err = strata(t, "run", "--prompt", prompt, "--top-k", "5")
	require.ErrorContains(t, err, "set a temperature above 0")
	_, err = strata(t, "run", "--prompt", prompt, "--temperature", "1", "--top-p", "2")
	require.ErrorContains(t, err, "top-p 2: it must be in [0, 1]")
}

// Issue 47.13: tokenize refused a vocabulary-only GGUF (llama.cpp's
// ggml-vocab-*.gguf: "needs at least 144 tensors, but the file has 0");
// the tokenizer needs no tensors. stories260K's metadata alone tokenizes
// as the whole file does.
func TestTokenizeAVocabularyOnlyFile(t *testing.T) {
	f, err := gguf.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KVs {
		require.NoError(t, w.AddKV(kv.Key, kv.Value.Any()))
	}
	path := filepath.Join(t.TempDir(), "vocab.gguf")
	require.NoError(t, w.WriteFile(path))
	out, err := strata(t, "tokenize", "--model", path, "Once upon a time")
	require.NoError(t, err)
	require.Equal(t, "1 403 407 261 378\n", out)
	_, err = strata(t, "info", path)
	require.ErrorContains(t, err, "needs at least", "a model it is not")
}
