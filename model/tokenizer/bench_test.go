package tokenizer

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// text10KB is 10 KB of story prose with some digits and punctuation.
func text10KB() string {
	const para = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
		"One day, she saw 123 birds and said: \"Wow! Aren't they pretty?\"\n"
	s := strings.Repeat(para, 10240/len(para)+1)
	return s[:10240]
}

func benchmarkEncode(b *testing.B, tok *Tokenizer) {
	text := text10KB()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_, err := tok.Encode(text, Options{})
		require.NoError(b, err)
	}
}

func BenchmarkEncode10KBStories(b *testing.B) { benchmarkEncode(b, stories(b)) }

func BenchmarkEncode10KBLlamaBPE(b *testing.B) {
	tok, err := New(testBPEVocab("llama-bpe"))
	require.NoError(b, err)
	benchmarkEncode(b, tok)
}
