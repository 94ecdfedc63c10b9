package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzEncode runs every input through the test SPM vocabulary, the real
// stories260K one when present, and the test gpt2 vocabulary under each
// pre-tokenizer. Encode must not fail (every byte has a token) and must give
// ids in range; for valid UTF-8 without ParseSpecial, Decode must return the
// input (SPM: with U+2581 read as a space); merging must match the quadratic
// references; pre-token pieces must concatenate back to the input.
func FuzzEncode(f *testing.F) {
	spm, err := New(testSPMVocab())
	require.NoError(f, err)
	spms := map[string]*Tokenizer{"test-spm": spm}
	if _, ok := findShared("models/stories260K.gguf"); ok {
		spms["stories260K"] = stories(f)
	}
	bpes := map[string]*Tokenizer{}
	for _, pre := range []string{"qwen2", "llama-bpe", "gpt2", "default"} {
		tok, err := New(testBPEVocab(pre))
		require.NoError(f, err)
		bpes[pre] = tok
	}
	merges := testBPEVocab("").Merges

	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		for name, tok := range spms {
			want := strings.ReplaceAll(s, "▁", " ")
			checkEncode(t, name, tok, s, want)
			if len(s) <= 256 { // keep the quadratic reference cheap
				ids, err := tok.Encode(s, Options{})
				require.NoError(t, err)
				require.Equal(t, naiveSPM(t, tok, s), ids, "%s: merges differ from the reference on %q", name, s)
			}
		}
		for pre, tok := range bpes {
			checkEncode(t, pre, tok, s, s)
			pieces := tok.pre(s)
			require.Equal(t, s, strings.Join(pieces, ""), "%s: pre-token pieces lose text of %q", pre, s)
			m := tok.newBPEMerger()
			for _, p := range pieces {
				require.NotEmpty(t, p)
				if len(p) > 64 {
					continue
				}
				got, err := tok.encodeBPE(p, nil, m)
				require.NoError(t, err)
				require.Equal(t, naiveBPE(t, tok, merges, pre == "llama-bpe", p), got, "%s: merges differ from the reference on %q", pre, p)
			}
		}
	})
}

func checkEncode(t *testing.T, name string, tok *Tokenizer, s, want string) {
	for _, special := range []bool{false, true} {
		ids, err := tok.Encode(s, Options{ParseSpecial: special})
		require.NoError(t, err, "%s %q", name, s)
		for _, id := range ids {
			require.True(t, tok.inRange(id), "%s: id %d out of range", name, id)
		}
		got, err := tok.Decode(ids)
		require.NoError(t, err)
		if !special && utf8.ValidString(s) {
			require.Equal(t, want, got, "%s: Decode(Encode(%q))", name, s)
		}
	}
}
