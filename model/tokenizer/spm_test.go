package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
)

// findShared locates path in the shared folder beside the repository root
// (the directory holding go.mod).
func findShared(path string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", path)
	_, err = os.Stat(p)
	return p, err == nil
}

func stories(t testing.TB) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	tok, err := FromGGUF(f)
	require.NoError(t, err)
	return tok
}

func TestStoriesOnceUponATime(t *testing.T) {
	tok := stories(t)
	require.Equal(t, 512, tok.VocabSize())
	require.Equal(t, int32(1), tok.BOS())
	require.Equal(t, int32(2), tok.EOS())

	// Published: llama2.c and llama.cpp agree on this tokenisation.
	ids, err := tok.Encode("Once upon a time", Options{})
	require.NoError(t, err)
	require.Equal(t, []int32{1, 403, 407, 261, 378}, ids)
	text, err := tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, "Once upon a time", text)

	noBOS := false
	ids, err = tok.Encode("Once upon a time", Options{AddBOS: &noBOS})
	require.NoError(t, err)
	require.Equal(t, []int32{403, 407, 261, 378}, ids)
	text, err = tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, "Once upon a time", text, "without BOS the first token's prefix space is stripped too")

	require.Equal(t, "<s>", tok.Piece(1))
	require.Equal(t, " Once", tok.Piece(403))
	require.Equal(t, "A", tok.Piece(3+'A'))
	require.Equal(t, `\n`, tok.Piece(3+'\n'))
	require.Equal(t, `\x01`, tok.Piece(3+1))
	require.Equal(t, `\xF0`, tok.Piece(3+0xF0))
	require.Equal(t, "<invalid id 512>", tok.Piece(512))
	require.True(t, tok.IsSpecial(0))
	require.True(t, tok.IsSpecial(1))
	require.True(t, tok.IsSpecial(2))
	require.False(t, tok.IsSpecial(403))
	require.False(t, tok.IsSpecial(3), "byte tokens are not special")
	require.True(t, tok.IsOrdinary(403))
	require.False(t, tok.IsOrdinary(3), "nor are they ordinary: byte fallback")
	require.False(t, tok.IsOrdinary(1))
	require.False(t, tok.IsOrdinary(512))
}

func TestStoriesRoundTrip(t *testing.T) {
	tok := stories(t)
	for _, s := range []string{
		", there was a little girl named Lily. She loved to play outside in the park. One day,",
		"Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
		"  two  spaces\nand a newline\n",
		"",
		" ",
	} {
		ids, err := tok.Encode(s, Options{})
		require.NoError(t, err)
		require.Equal(t, int32(1), ids[0])
		got, err := tok.Decode(ids)
		require.NoError(t, err)
		require.Equal(t, s, got)
		require.Equal(t, naiveSPM(t, tok, s), ids, "heap merging disagrees with the quadratic reference on %q", s)
	}
}

func TestStoriesByteFallback(t *testing.T) {
	tok := stories(t)
	s := "Hi 🙂 日"
	ids, err := tok.Encode(s, Options{})
	require.NoError(t, err)
	// 🙂 is F0 9F 99 82 and 日 is E6 97 A5: no piece holds them, so each
	// byte is its <0xNN> token, id 3+byte.
	byteIDs := func(bs ...byte) []int32 {
		var out []int32
		for _, b := range bs {
			out = append(out, 3+int32(b))
		}
		return out
	}
	tail := append(append(append([]int32{}, byteIDs(0xF0, 0x9F, 0x99, 0x82)...), tok.ids["▁"]), byteIDs(0xE6, 0x97, 0xA5)...)
	require.Equal(t, tail, ids[len(ids)-len(tail):])
	got, err := tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, s, got)

	// Invalid UTF-8 is bytes too, and comes back exactly.
	bad := "a\xffb\xc3"
	ids, err = tok.Encode(bad, Options{})
	require.NoError(t, err)
	require.Contains(t, ids, int32(3+0xFF))
	got, err = tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, bad, got)
}

func TestStoriesParseSpecial(t *testing.T) {
	tok := stories(t)
	noBOS := false
	ids, err := tok.Encode("<s>Once", Options{AddBOS: &noBOS, ParseSpecial: true})
	require.NoError(t, err)
	require.Equal(t, []int32{1, 403}, ids, "text after a special token gets the space prefix, as in llama.cpp")

	ids, err = tok.Encode("<s>", Options{AddBOS: &noBOS})
	require.NoError(t, err)
	require.NotContains(t, ids, int32(1), "without ParseSpecial <s> is plain text")
	got, err := tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, "<s>", got)
}

// testSPMVocab is a small SentencePiece vocabulary with scores chosen to
// exercise merge order: <unk> <s> </s>, the 256 byte tokens (ids 3..258),
// then pieces.
func testSPMVocab() Vocab {
	v := Vocab{Model: "llama", BOS: 1, EOS: 2, UNK: 0, PAD: -1, AddBOS: true, AddSpacePrefix: true}
	add := func(text string, score float32, typ int32) {
		v.Tokens = append(v.Tokens, text)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	for b := range 256 {
		add("<0x"+strings.ToUpper(hex2(byte(b)))+">", 0, TypeByte)
	}
	for _, p := range []struct {
		text  string
		score float32
	}{
		{"▁", -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"d", -1}, {"x", -1}, {"y", -1}, {"z", -1},
		{"ab", -5}, {"bc", -5}, // a tie: the leftmost pair merges first
		{"xy", -4}, {"yz", -2}, // a better score wins wherever it is
		{"▁a", -3}, {"▁ab", -2}, {"cd", -6},
	} {
		add(p.text, p.score, TypeNormal)
	}
	return v
}

func TestSPMMergeOrder(t *testing.T) {
	tok, err := New(testSPMVocab())
	require.NoError(t, err)
	noBOS := false
	for _, c := range []struct {
		text string
		want []string
	}{
		// "▁abc": pairs ▁a(-3) ab(-5) bc(-5): ▁a first, then ▁a+b = ▁ab(-2), then c alone.
		{"abc", []string{"▁ab", "c"}},
		// "▁bcd": ▁b is no token; bc(-5) beats cd(-6), leaving d.
		{"bcd", []string{"▁", "bc", "d"}},
		// "▁xyz": yz(-2) beats xy(-4).
		{"xyz", []string{"▁", "x", "yz"}},
		// Equal scores ab and bc in "▁cabc"... ▁c is no token: ab(-5) ties bc(-5), leftmost ab wins.
		{"cabc", []string{"▁", "c", "ab", "c"}},
	} {
		ids, err := tok.Encode(c.text, Options{AddBOS: &noBOS})
		require.NoError(t, err)
		var got []string
		for _, id := range ids {
			got = append(got, tok.vocab.Tokens[id])
		}
		require.Equal(t, c.want, got, "text %q", c.text)
		require.Equal(t, naiveSPM(t, tok, c.text)[1:], ids)
	}
}

func TestSPMUserDefinedToken(t *testing.T) {
	v := testSPMVocab()
	v.Tokens = append(v.Tokens, "<ud>")
	v.Scores = append(v.Scores, 0)
	v.Types = append(v.Types, TypeUserDefined)
	tok, err := New(v)
	require.NoError(t, err)
	ud := int32(len(v.Tokens) - 1)
	ids, err := tok.Encode("a<ud>a", Options{})
	require.NoError(t, err)
	// User-defined tokens are cut out even without ParseSpecial, and the
	// text after one gets a space prefix again (llama.cpp's is_prev_special).
	require.Equal(t, []int32{1, tok.ids["▁a"], ud, tok.ids["▁a"]}, ids)
	got, err := tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, "a<ud> a", got)
}

// naiveSPM is a quadratic reference for Encode with BOS on an SPM
// vocabulary without special tokens in s: rescan all adjacent pairs, merge
// the best-scoring one (leftmost on ties), repeat.
func naiveSPM(t testing.TB, tok *Tokenizer, s string) []int32 {
	t.Helper()
	text := strings.ReplaceAll(" "+s, " ", "▁")
	if s == "" {
		text = ""
	}
	var pieces []string
	for i := 0; i < len(text); {
		n := 1
		switch c := text[i]; {
		case c >= 0xF0:
			n = 4
		case c >= 0xE0:
			n = 3
		case c >= 0xC0:
			n = 2
		}
		n = min(n, len(text)-i)
		pieces = append(pieces, text[i:i+n])
		i += n
	}
	for {
		best := -1
		var bestScore float32
		for i := 0; i+1 < len(pieces); i++ {
			id, ok := tok.ids[pieces[i]+pieces[i+1]]
			if ok && (best < 0 || tok.vocab.Scores[id] > bestScore) {
				best, bestScore = i, tok.vocab.Scores[id]
			}
		}
		if best < 0 {
			break
		}
		pieces = append(pieces[:best], append([]string{pieces[best] + pieces[best+1]}, pieces[best+2:]...)...)
	}
	ids := []int32{1}
	for _, p := range pieces {
		if id, ok := tok.ids[p]; ok {
			ids = append(ids, id)
			continue
		}
		for i := 0; i < len(p); i++ {
			id, ok := tok.ids["<0x"+strings.ToUpper(hex2(p[i]))+">"]
			require.True(t, ok)
			ids = append(ids, id)
		}
	}
	return ids
}

func hex2(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

// Gemma's SentencePiece as its GGUF files describe it: no space prefix
// (tokenizer.ggml.add_space_prefix false), BOS 2 and EOS 1, and bytes
// outside the vocabulary falling back to <0xNN> tokens.
func TestGemmaStyleSPM(t *testing.T) {
	v := testSPMVocab()
	v.AddSpacePrefix, v.BOS, v.EOS = false, 2, 1
	tok, err := New(v)
	require.NoError(t, err)
	ids, err := tok.Encode("ab c€", Options{})
	require.NoError(t, err)
	var got []string
	for _, id := range ids {
		got = append(got, tok.vocab.Tokens[id])
	}
	// No leading ▁: "ab" merges as itself; the euro sign is three bytes.
	require.Equal(t, []string{"</s>", "ab", "▁", "c", "<0xE2>", "<0x82>", "<0xAC>"}, got)
	text, err := tok.Decode(ids[1:])
	require.NoError(t, err)
	require.Equal(t, "ab c€", text, "decoding keeps the text as written, with no space to strip")
}

// Text that continues a prompt is tokenized as inside the whole: no BOS, no
// space prefix (which made " there" the tokens " " and " there").
func TestStoriesContinuedText(t *testing.T) {
	tok := stories(t)
	whole, err := tok.Encode("Once upon a time there was.", Options{})
	require.NoError(t, err)
	first, err := tok.Encode("Once upon a time", Options{})
	require.NoError(t, err)
	rest, err := tok.Encode(" there was.", Options{Continue: true})
	require.NoError(t, err)
	require.Equal(t, whole, append(first, rest...))
	dot, err := tok.Encode(".", Options{Continue: true})
	require.NoError(t, err)
	require.Len(t, dot, 1, "a piece without a leading space")
	bos := true
	withBOS, err := tok.Encode("x", Options{Continue: true, AddBOS: &bos})
	require.NoError(t, err)
	require.Equal(t, int32(1), withBOS[0], "AddBOS still asks for one")
}
