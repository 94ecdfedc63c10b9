package tokenizer

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
)

func TestNewRejectsBadVocab(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(v *Vocab)
		want   string
	}{
		{"no tokens", func(v *Vocab) { v.Tokens, v.Scores, v.Types = nil, nil, nil }, "no tokens"},
		{"unknown model", func(v *Vocab) { v.Model = "bert" }, `unsupported tokenizer model "bert"`},
		{"unknown pre", func(v *Vocab) { v.Model, v.Pre, v.AddSpacePrefix = "gpt2", "tekken", false }, `unsupported pre-tokenizer "tekken"`},
		{"gpt2 space prefix", func(v *Vocab) { v.Model = "gpt2" }, "add_space_prefix"},
		{"scores size", func(v *Vocab) { v.Scores = v.Scores[:3] }, "3 scores for 274 tokens"},
		{"types size", func(v *Vocab) { v.Types = append(v.Types, 1) }, "275 token types for 274 tokens"},
		{"BOS range", func(v *Vocab) { v.BOS = 274 }, "BOS id 274 out of range for 274 tokens"},
		{"PAD range", func(v *Vocab) { v.PAD = -2 }, "PAD id -2 out of range"},
		{"add BOS without BOS", func(v *Vocab) { v.BOS = -1 }, "add_bos_token is set but the vocabulary has no BOS id"},
		{"type value", func(v *Vocab) { v.Types[5] = 9 }, `token 5 "<0x02>" has unknown type 9`},
		{"byte token form", func(v *Vocab) { v.Tokens[5] = "<0xZZ>" }, `byte token 5 is "<0xZZ>"`},
		{"duplicate", func(v *Vocab) { v.Tokens[260] = v.Tokens[259] }, `duplicate token "▁" at ids 259 and 260`},
		{"NaN score", func(v *Vocab) { v.Scores[260] = float32(math.NaN()) }, `token 260 "a" has a NaN score`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := testSPMVocab()
			c.change(&v)
			_, err := New(v)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestNewRejectsBadMerges(t *testing.T) {
	for _, m := range []string{"", "ab", "a ", " "} {
		v := testBPEVocab("qwen2")
		v.Merges = append(v.Merges, m)
		_, err := New(v)
		require.ErrorContains(t, err, fmt.Sprintf("merge %d %q is not two parts", len(v.Merges)-1, m))
	}
}

func TestNewCopiesVocab(t *testing.T) {
	v := testSPMVocab()
	tok, err := New(v)
	require.NoError(t, err)
	v.Tokens[260] = "changed"
	require.Equal(t, "a", tok.vocab.Tokens[260])
	require.Equal(t, "a", tok.Piece(260))
}

func TestEncodeErrors(t *testing.T) {
	// Without byte tokens, a character outside the vocabulary cannot be represented.
	v := Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>", "▁", "a"}, BOS: 1, EOS: 2, UNK: 0, PAD: -1, AddSpacePrefix: true}
	tok, err := New(v)
	require.NoError(t, err)
	_, err = tok.Encode("ab", Options{})
	require.ErrorContains(t, err, `needs byte 0x62, which has no token`)

	yes := true
	tok, err = New(Vocab{Model: "gpt2", Tokens: []string{"a"}, BOS: -1, EOS: -1, UNK: -1, PAD: -1})
	require.NoError(t, err)
	_, err = tok.Encode("a", Options{AddBOS: &yes})
	require.ErrorContains(t, err, "BOS requested but the vocabulary has no BOS token")
	_, err = tok.Encode("é", Options{})
	require.ErrorContains(t, err, "needs byte 0xC3")

	_, err = tok.Decode([]int32{0, 1})
	require.ErrorContains(t, err, "token 1 (position 1) out of range for 1 tokens")
	_, err = tok.Decode([]int32{-5})
	require.ErrorContains(t, err, "token -5 (position 0) out of range")
}

// fakeMetadata answers like *gguf.File: a missing key's error wraps gguf.ErrMissing.
type fakeMetadata map[string]any

func get[T any](m fakeMetadata, key string) (T, error) {
	var zero T
	x, ok := m[key]
	if !ok {
		return zero, fmt.Errorf("%w %s", gguf.ErrMissing, key)
	}
	v, ok := x.(T)
	if !ok {
		return zero, fmt.Errorf("key %s is %T, want %T", key, x, zero)
	}
	return v, nil
}

func (m fakeMetadata) String(k string) (string, error)      { return get[string](m, k) }
func (m fakeMetadata) Strings(k string) ([]string, error)   { return get[[]string](m, k) }
func (m fakeMetadata) Float32s(k string) ([]float32, error) { return get[[]float32](m, k) }
func (m fakeMetadata) Int32s(k string) ([]int32, error)     { return get[[]int32](m, k) }
func (m fakeMetadata) Uint32(k string) (uint32, error)      { return get[uint32](m, k) }
func (m fakeMetadata) Bool(k string) (bool, error)          { return get[bool](m, k) }

func bpeMetadata(pre string) fakeMetadata {
	v := testBPEVocab(pre)
	return fakeMetadata{
		"tokenizer.ggml.model":      "gpt2",
		"tokenizer.ggml.pre":        pre,
		"tokenizer.ggml.tokens":     v.Tokens,
		"tokenizer.ggml.token_type": v.Types,
		"tokenizer.ggml.merges":     v.Merges,
	}
}

func TestFromGGUFDefaults(t *testing.T) {
	// gpt2: no special ids, add_bos only for the Llama-3 pre-tokenizer.
	tok, err := FromGGUF(bpeMetadata("qwen2"))
	require.NoError(t, err)
	require.Equal(t, int32(-1), tok.BOS())
	require.False(t, tok.vocab.AddBOS)

	m := bpeMetadata("llama-bpe")
	_, err = FromGGUF(m)
	require.ErrorContains(t, err, "add_bos_token is set but the vocabulary has no BOS id")
	m["tokenizer.ggml.bos_token_id"] = uint32(270)
	tok, err = FromGGUF(m)
	require.NoError(t, err)
	require.True(t, tok.vocab.AddBOS)
	require.Equal(t, int32(270), tok.BOS())
	m["tokenizer.ggml.add_bos_token"] = false
	tok, err = FromGGUF(m)
	require.NoError(t, err)
	require.False(t, tok.vocab.AddBOS)

	// llama: BOS 1, EOS 2, UNK 0, add_bos and add_space_prefix on; -1 stored
	// as uint32 means no token.
	v := testSPMVocab()
	sm := fakeMetadata{
		"tokenizer.ggml.model":            "llama",
		"tokenizer.ggml.tokens":           v.Tokens,
		"tokenizer.ggml.scores":           v.Scores,
		"tokenizer.ggml.token_type":       v.Types,
		"tokenizer.ggml.padding_token_id": uint32(math.MaxUint32),
	}
	tok, err = FromGGUF(sm)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 0, -1}, []int{tok.vocab.BOS, tok.vocab.EOS, tok.vocab.UNK, tok.vocab.PAD})
	require.True(t, tok.vocab.AddBOS)
	require.True(t, tok.vocab.AddSpacePrefix)
	sm["tokenizer.ggml.add_space_prefix"] = false
	tok, err = FromGGUF(sm)
	require.NoError(t, err)
	ids, err := tok.Encode("a", Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"<s>", "a"}, texts(tok, ids))
}

func TestFromGGUFErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(m fakeMetadata)
		want   string
	}{
		{"no model", func(m fakeMetadata) { delete(m, "tokenizer.ggml.model") }, "missing key tokenizer.ggml.model"},
		{"no tokens", func(m fakeMetadata) { delete(m, "tokenizer.ggml.tokens") }, "missing key tokenizer.ggml.tokens"},
		{"no merges", func(m fakeMetadata) { delete(m, "tokenizer.ggml.merges") }, "gpt2 vocabulary needs merges"},
		{"pre of wrong type", func(m fakeMetadata) { m["tokenizer.ggml.pre"] = uint32(3) }, "key tokenizer.ggml.pre is uint32"},
		{"bad types", func(m fakeMetadata) { m["tokenizer.ggml.token_type"] = []float32{1} }, "key tokenizer.ggml.token_type is []float32"},
		{"EOS out of range", func(m fakeMetadata) { m["tokenizer.ggml.eos_token_id"] = uint32(5000) }, "EOS id 5000 out of range for 274 tokens"},
		{"add_bos of wrong type", func(m fakeMetadata) { m["tokenizer.ggml.add_bos_token"] = "yes" }, "key tokenizer.ggml.add_bos_token is string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := bpeMetadata("qwen2")
			c.change(m)
			_, err := FromGGUF(m)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestFromGGUFLlamaErrorsAndSmallVocab(t *testing.T) {
	v := testSPMVocab()
	base := func() fakeMetadata {
		return fakeMetadata{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": v.Tokens, "tokenizer.ggml.scores": v.Scores}
	}
	for key, bad := range map[string]any{
		"tokenizer.ggml.scores":           []int32{1},
		"tokenizer.ggml.add_space_prefix": uint32(1),
		"tokenizer.ggml.bos_token_id":     "1",
	} {
		m := base()
		m[key] = bad
		_, err := FromGGUF(m)
		require.ErrorContains(t, err, "key "+key+" is ", key)
	}

	// llama.cpp's default EOS 2 does not fit a two-token vocabulary and is dropped.
	tok, err := FromGGUF(fakeMetadata{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": []string{"<unk>", "<s>"}})
	require.NoError(t, err)
	require.Equal(t, int32(1), tok.BOS())
	require.Equal(t, int32(-1), tok.EOS())
}

func TestVocabEdgeTokens(t *testing.T) {
	// An empty token cannot be produced and decodes to nothing; byte tokens
	// may use lowercase hex; tokens outside the byte-level alphabet decode
	// as their own text.
	v := Vocab{Model: "gpt2", Tokens: append(ByteTokens(), "", "<0x0a>", "日本"), BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TypeNormal
	}
	v.Types[257] = TypeByte
	tok, err := New(v)
	require.NoError(t, err)
	got, err := tok.Decode([]int32{'a', 256, 257, 258})
	require.NoError(t, err)
	require.Equal(t, "a\n日本", got)
	require.Equal(t, `\n`, tok.Piece(257))
	require.Equal(t, "日本", tok.Piece(258))
	require.False(t, tok.IsSpecial(259))
	require.False(t, tok.IsSpecial(-1))
}
