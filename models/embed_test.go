package models

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model/tokenizer"
)

// The shipped run's hyper-parameters, as MODEL.md states them.
const (
	layers, dModel, heads, kvHeads, headDim, ffn, ctx, vocab = 4, 256, 8, 4, 32, 768, 512, 2048
	endOfText                                                = 2047
)

func TestDefaultIsTheTrainedQwen3(t *testing.T) {
	data := GGUF()
	assert.LessOrEqual(t, len(data), 12<<20, "the embedded model should stay within about 12 MB")
	f, err := gguf.Parse(data, DefaultName+".gguf")
	require.NoError(t, err)

	str := func(key string) string {
		s, err := f.String(key)
		require.NoError(t, err, key)
		return s
	}
	u32 := func(key string) uint32 {
		v, err := f.Uint32(key)
		require.NoError(t, err, key)
		return v
	}
	assert.Equal(t, "qwen3", str("general.architecture"))
	assert.Equal(t, DefaultName, str("general.name"))
	assert.Equal(t, "gpt2", str("tokenizer.ggml.model"))
	assert.Equal(t, "qwen2", str("tokenizer.ggml.pre"))
	for key, want := range map[string]uint32{
		"qwen3.block_count": layers, "qwen3.embedding_length": dModel, "qwen3.feed_forward_length": ffn,
		"qwen3.context_length": ctx, "qwen3.attention.head_count": heads, "qwen3.attention.head_count_kv": kvHeads,
		"qwen3.attention.key_length": headDim, "qwen3.attention.value_length": headDim,
		"tokenizer.ggml.bos_token_id": endOfText, "tokenizer.ggml.eos_token_id": endOfText,
	} {
		assert.Equal(t, want, u32(key), key)
	}
	eps, err := f.Float32("qwen3.attention.layer_norm_rms_epsilon")
	require.NoError(t, err)
	assert.Equal(t, float32(1e-6), eps)
	theta, err := f.Float32("qwen3.rope.freq_base")
	require.NoError(t, err)
	assert.Equal(t, float32(10000), theta)

	tokens, err := f.Strings("tokenizer.ggml.tokens")
	require.NoError(t, err)
	require.Len(t, tokens, vocab)
	assert.Equal(t, "<|endoftext|>", tokens[endOfText])
	assert.Equal(t, "Ġ", tokens[' '], "byte tokens come first, GPT-2 byte-to-unicode mapped")
	merges, err := f.Strings("tokenizer.ggml.merges")
	require.NoError(t, err)
	assert.Len(t, merges, vocab-256-1)

	// ggml dims: dims[0] is the input (row) length.
	want := map[string][]int64{
		"token_embd.weight": {dModel, vocab}, "output_norm.weight": {dModel}, "output.weight": {dModel, vocab},
	}
	for i := 0; i < layers; i++ {
		for name, dims := range map[string][]int64{
			"attn_norm": {dModel}, "attn_q": {dModel, heads * headDim}, "attn_k": {dModel, kvHeads * headDim},
			"attn_v": {dModel, kvHeads * headDim}, "attn_output": {heads * headDim, dModel},
			"attn_q_norm": {headDim}, "attn_k_norm": {headDim}, "ffn_norm": {dModel},
			"ffn_gate": {dModel, ffn}, "ffn_up": {dModel, ffn}, "ffn_down": {ffn, dModel},
		} {
			want[fmt.Sprintf("blk.%d.%s.weight", i, name)] = dims
		}
	}
	require.Len(t, f.Tensors, len(want))
	for name, dims := range want {
		info, ok := f.Tensor(name)
		require.True(t, ok, name)
		assert.Equal(t, dims, info.Dims, name)
		wantType := gguf.F16
		if len(dims) == 1 {
			wantType = gguf.F32
		}
		assert.Equal(t, wantType, info.Type, name)
	}
}

// The engine reference (see MODEL.md) must describe this model: a prompt starting with
// <|endoftext|>, logits over the vocabulary and one residual stream per layer, all finite.
func TestReferenceShapes(t *testing.T) {
	ids := readNpy(t, "tokens.npy", "<i4")
	require.Len(t, ids.shape, 1)
	T := ids.shape[0]
	assert.Equal(t, 56, T)
	assert.Equal(t, uint32(endOfText), binary.LittleEndian.Uint32(ids.data))
	for k := 0; k < T; k++ {
		assert.Less(t, binary.LittleEndian.Uint32(ids.data[4*k:]), uint32(vocab))
	}
	logits := readNpy(t, "logits.npy", "<f4")
	assert.Equal(t, []int{T, vocab}, logits.shape)
	resid := readNpy(t, "resid_post.npy", "<f4")
	assert.Equal(t, []int{layers, T, dModel}, resid.shape)
	for _, a := range []npy{logits, resid} {
		for k := 0; k < len(a.data); k += 4 {
			if v := float64(math.Float32frombits(binary.LittleEndian.Uint32(a.data[k:]))); math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("value %d of shape %v is %v", k/4, a.shape, v)
			}
		}
	}
}

// The tokenizer stored in the GGUF, run by the project's tokenizer, must give the ids the
// reference was computed on (bpe wrote them; the BOS comes from add_bos_token).
func TestEmbeddedTokenizerGivesReferenceTokens(t *testing.T) {
	f, err := gguf.Parse(GGUF(), DefaultName+".gguf")
	require.NoError(t, err)
	tok, err := tokenizer.FromGGUF(f)
	require.NoError(t, err)
	prompt, err := os.ReadFile(filepath.Join("reference", "prompt.txt"))
	require.NoError(t, err)
	got, err := tok.Encode(string(prompt), tokenizer.Options{})
	require.NoError(t, err)

	ref := readNpy(t, "tokens.npy", "<i4")
	want := make([]int32, ref.shape[0])
	for k := range want {
		want[k] = int32(binary.LittleEndian.Uint32(ref.data[4*k:]))
	}
	assert.Equal(t, want, got)
}

type npy struct {
	shape []int
	data  []byte
}

var npyHeader = regexp.MustCompile(`^\{'descr': '([<>|][a-z][0-9])', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \}`)

// readNpy reads a version-1 .npy file (numpy's format: magic, header length, a dict header).
func readNpy(t *testing.T, name, descr string) npy {
	b, err := os.ReadFile(filepath.Join("reference", name))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b), 10)
	require.Equal(t, "\x93NUMPY\x01\x00", string(b[:8]), name)
	end := 10 + int(binary.LittleEndian.Uint16(b[8:10]))
	require.LessOrEqual(t, end, len(b), name)
	m := npyHeader.FindSubmatch(b[10:end])
	require.NotNil(t, m, "%s header %q", name, b[10:end])
	require.Equal(t, descr, string(m[1]), name)
	var shape []int
	count := 1
	for _, s := range regexp.MustCompile(`[0-9]+`).FindAll(m[2], -1) {
		var d int
		_, err := fmt.Sscan(string(s), &d)
		require.NoError(t, err)
		shape = append(shape, d)
		count *= d
	}
	require.Equal(t, 4*count, len(b)-end, "%s: data size for shape %v", name, shape)
	return npy{shape: shape, data: b[end:]}
}
