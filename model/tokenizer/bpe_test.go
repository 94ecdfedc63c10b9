package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// testBPEVocab is a byte-level vocabulary: ids 0..255 are the byte-level
// characters of bytes 0..255, then one token per merge result (except
// "x y", whose result is no token), then "Ġhello" that no merge reaches,
// then special tokens.
func testBPEVocab(pre string) Vocab {
	v := Vocab{Model: "gpt2", Pre: pre, BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	for b := range 256 {
		v.Tokens = append(v.Tokens, byteChars[b])
	}
	for _, m := range []string{
		"Ġ t", "h e", "Ġt he", "i n", "in g", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
		"1 2", "' s", "Ċ Ċ", "x y",
	} {
		v.Merges = append(v.Merges, m)
		if m != "x y" {
			v.Tokens = append(v.Tokens, strings.ReplaceAll(m, " ", ""))
		}
	}
	v.Tokens = append(v.Tokens, "Ġhello")
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TypeNormal
	}
	for _, s := range []struct {
		text string
		typ  int32
	}{{"<|endoftext|>", TypeControl}, {"<|im_start|>", TypeControl}, {"<|im_end|>", TypeControl}, {"<tool>", TypeUserDefined}} {
		v.Tokens = append(v.Tokens, s.text)
		v.Types = append(v.Types, s.typ)
	}
	v.EOS = len(v.Tokens) - 4
	v.BOS = v.EOS
	return v
}

func newBPE(t *testing.T, pre string) *Tokenizer {
	t.Helper()
	tok, err := New(testBPEVocab(pre))
	require.NoError(t, err)
	return tok
}

// texts maps ids to token texts, for readable assertions.
func texts(tok *Tokenizer, ids []int32) []string {
	out := []string{}
	for _, id := range ids {
		out = append(out, tok.vocab.Tokens[id])
	}
	return out
}

func TestBPEEncodeHandWorked(t *testing.T) {
	for _, c := range []struct {
		pre, text string
		want      []string
	}{
		// " the": Ġ t h e -> Ġt (rank 0) -> he (1) -> Ġthe (2).
		// " world": Ġw (5), or (6), Ġwor (7), ld (8), Ġworld (9).
		{"qwen2", " the world", []string{"Ġthe", "Ġworld"}},
		// Pieces "the" " king" "'s" " " "1" "2": "t he" is no merge; in, ing; 's.
		{"qwen2", "the king's 12", []string{"t", "he", "Ġ", "k", "ing", "'s", "Ġ", "1", "2"}},
		// Llama-3 keeps "12" in one piece, so the 1 2 merge applies.
		{"llama-bpe", "the king's 12", []string{"t", "he", "Ġ", "k", "ing", "'s", "Ġ", "12"}},
		// GPT-2 puts the space in front of the number.
		{"gpt2", "the king's 12", []string{"t", "he", "Ġ", "k", "ing", "'s", "Ġ", "12"}},
		// Llama-3's ignore_merges takes a piece that is a token as it is.
		{"llama-bpe", " hello", []string{"Ġhello"}},
		{"qwen2", " hello", []string{"Ġ", "he", "l", "l", "o"}},
		// "x y" merges to "xy", no token, which goes out as its bytes.
		{"qwen2", "xy", []string{"x", "y"}},
		// "\n\n" is one piece for Qwen2, two for GPT-2.
		{"qwen2", "a\n\nb", []string{"a", "ĊĊ", "b"}},
		{"gpt2", "a\n\nb", []string{"a", "Ċ", "Ċ", "b"}},
		// é is C3 A9: two byte-level characters.
		{"qwen2", "é", []string{"Ã", "©"}},
		// The default pre-tokenizer cuts digits in threes: "123" "4".
		{"default", "1234", []string{"12", "3", "4"}},
	} {
		tok := newBPE(t, c.pre)
		ids, err := tok.Encode(c.text, Options{})
		require.NoError(t, err)
		require.Equal(t, c.want, texts(tok, ids), "%s %q", c.pre, c.text)
		got, err := tok.Decode(ids)
		require.NoError(t, err)
		require.Equal(t, c.text, got)
	}
}

func TestBPESpecialTokens(t *testing.T) {
	tok := newBPE(t, "qwen2")
	text := "<|im_start|>user\nhi<|im_end|>"
	ids, err := tok.Encode(text, Options{ParseSpecial: true})
	require.NoError(t, err)
	require.Equal(t, []string{"<|im_start|>", "u", "s", "e", "r", "Ċ", "h", "i", "<|im_end|>"}, texts(tok, ids))
	got, err := tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, "user\nhi", got, "control tokens decode to nothing")

	ids, err = tok.Encode(text, Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"<|", "im", "_start", "|>", "user", "\n", "hi", "<|", "im", "_end", "|>"}, piecesOf(t, "qwen2", text))
	for _, id := range ids {
		require.False(t, tok.IsSpecial(id), "without ParseSpecial %q is plain text", text)
	}
	got, err = tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, text, got)

	// User-defined tokens are cut out even without ParseSpecial, and decode as written.
	ids, err = tok.Encode("a<tool>b", Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "<tool>", "b"}, texts(tok, ids))
	got, err = tok.Decode(ids)
	require.NoError(t, err)
	require.Equal(t, "a<tool>b", got)

	yes := true
	ids, err = tok.Encode("hi", Options{AddBOS: &yes})
	require.NoError(t, err)
	require.Equal(t, []string{"<|endoftext|>", "h", "i"}, texts(tok, ids))
	require.True(t, tok.IsSpecial(ids[0]))
}

func piecesOf(t *testing.T, pre, text string) []string {
	t.Helper()
	split, _, err := preTokenizerFor(pre)
	require.NoError(t, err)
	return split(text)
}

func TestBPEPiece(t *testing.T) {
	tok := newBPE(t, "qwen2")
	require.Equal(t, " the", tok.Piece(tok.ids["Ġthe"]))
	require.Equal(t, `\n`, tok.Piece('\n'), "byte-level Ċ is a newline byte")
	require.Equal(t, `\xC3`, tok.Piece(0xC3), "half a UTF-8 character")
	require.Equal(t, `\\`, tok.Piece('\\'), "a backslash doubled, so that it and t do not read as a tab")
	require.Equal(t, `a\\tb\tc`, Display("a\\tb\tc"))
	require.Equal(t, "<|im_start|>", tok.Piece(tok.ids["<|im_start|>"]))
	require.Equal(t, "<invalid id -1>", tok.Piece(-1))
}

func TestPreTokenizerHandWorked(t *testing.T) {
	for _, c := range []struct {
		pre, text string
		want      []string
	}{
		{"llama-bpe", "Hello world", []string{"Hello", " world"}},
		{"llama-bpe", "I'm HE'LL we'Ve", []string{"I", "'m", " HE", "'LL", " we", "'Ve"}},
		{"llama-bpe", "12345 6", []string{"123", "45", " ", "6"}},
		{"llama-bpe", "a  b", []string{"a", " ", " b"}},
		{"llama-bpe", "a\n\nb", []string{"a", "\n\n", "b"}},
		{"llama-bpe", "x  \n y", []string{"x", "  \n", " y"}},
		{"llama-bpe", "hi!!\n\nthere", []string{"hi", "!!\n\n", "there"}},
		{"llama-bpe", " (x)", []string{" (", "x", ")"}},
		{"llama-bpe", "tail  ", []string{"tail", "  "}},
		{"llama-bpe", "$100", []string{"$", "100"}},
		{"qwen2", "12345", []string{"1", "2", "3", "4", "5"}},
		{"qwen2", "I'm", []string{"I", "'m"}},
		{"qwen2", "the king's 12", []string{"the", " king", "'s", " ", "1", "2"}},
		{"gpt2", "I'M", []string{"I", "'", "M"}},
		{"gpt2", "I'm", []string{"I", "'m"}},
		{"gpt2", " 12345", []string{" 12345"}},
		{"gpt2", "a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"gpt2", "a  b", []string{"a", " ", " b"}},
		{"gpt2", "\tx", []string{"\t", "x"}},
		{"default", "Hello, world!! 12345", []string{"Hello", ",", " world", "!!", " ", "123", "45"}},
		{"default", "a+b=c", []string{"a", "+", "b", "=", "c"}},
		{"default", "x1234567", []string{"x", "123", "456", "7"}},
		// Invalid UTF-8 is one "other" code point per byte.
		{"llama-bpe", "a\xff\xfeb", []string{"a", "\xff\xfe", "b"}},
	} {
		require.Equal(t, c.want, piecesOf(t, c.pre, c.text), "%s %q", c.pre, c.text)
	}
}

// TestPreTokenizerRegexReference compares the scanners with splits that
// testdata/gen_splits.py computed with Python's regex module from the
// patterns themselves, on random strings of awkward characters.
func TestPreTokenizerRegexReference(t *testing.T) {
	data, err := os.ReadFile("testdata/splits.json")
	require.NoError(t, err)
	var cases []struct {
		Pre, Text string
		Want      []string
	}
	require.NoError(t, json.Unmarshal(data, &cases))
	require.Len(t, cases, 600)
	for _, c := range cases {
		require.Equal(t, c.Want, piecesOf(t, c.Pre, c.Text), "%s %q", c.Pre, c.Text)
	}
}

// naiveBPE is a quadratic reference for one pre-token: rescan all
// adjacent pairs, merge the lowest-ranked one (leftmost on ties), repeat.
func naiveBPE(t testing.TB, tok *Tokenizer, merges []string, ignoreMerges bool, word string) []int32 {
	t.Helper()
	rank := map[string]int{}
	for i, m := range merges {
		if _, dup := rank[m]; !dup {
			rank[m] = i
		}
	}
	var pieces []string
	for i := 0; i < len(word); i++ {
		pieces = append(pieces, byteChars[word[i]])
	}
	if id, ok := tok.ids[strings.Join(pieces, "")]; ok && ignoreMerges {
		return []int32{id}
	}
	for {
		best, bestRank := -1, 0
		for i := 0; i+1 < len(pieces); i++ {
			r, ok := rank[pieces[i]+" "+pieces[i+1]]
			if ok && (best < 0 || r < bestRank) {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		pieces = append(pieces[:best], append([]string{pieces[best] + pieces[best+1]}, pieces[best+2:]...)...)
	}
	var ids []int32
	for _, p := range pieces {
		if id, ok := tok.ids[p]; ok {
			ids = append(ids, id)
			continue
		}
		for _, r := range p {
			id, ok := tok.ids[string(r)]
			require.True(t, ok)
			ids = append(ids, id)
		}
	}
	return ids
}

func TestConcurrentEncode(t *testing.T) {
	tok := newBPE(t, "llama-bpe")
	want, err := tok.Encode(" the world's 12345 <tool>", Options{})
	require.NoError(t, err)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 50 {
				got, err := tok.Encode(" the world's 12345 <tool>", Options{})
				if err == nil && !slices.Equal(got, want) {
					err = fmt.Errorf("got %v, want %v", got, want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
}

func TestByteTokens(t *testing.T) {
	bt := ByteTokens()
	require.Len(t, bt, 256)
	// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
	// rest count up from U+0100, giving its well-known Ġ (space), Ċ (newline),
	// ĉ (tab) and Ń (soft hyphen, 0xAD).
	require.Equal(t, "A", bt['A'])
	require.Equal(t, "Ā", bt[0x00])
	require.Equal(t, "ĉ", bt['\t'])
	require.Equal(t, "Ċ", bt['\n'])
	require.Equal(t, "Ġ", bt[' '])
	require.Equal(t, "ġ", bt[0x7F])
	require.Equal(t, "Ń", bt[0xAD])
	require.Equal(t, "ÿ", bt[0xFF])
	seen := map[string]bool{}
	for _, s := range bt {
		require.Equal(t, 1, utf8.RuneCountInString(s))
		require.False(t, seen[s], "%q twice", s)
		seen[s] = true
	}
	bt[0] = "changed"
	require.Equal(t, "Ā", ByteTokens()[0], "the result is a copy")
}
