// Package tokenizer implements the tokenizers that GGUF files describe in
// their tokenizer.ggml.* metadata, following llama.cpp (src/llama-vocab.cpp):
// "llama" is SentencePiece BPE with scores and byte fallback, "gpt2" is
// byte-level BPE with merge ranks and a per-model pre-tokenizer.
package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Token types as stored in tokenizer.ggml.token_type.
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Vocab is a tokenizer's description, as read from tokenizer.ggml.* keys.
type Vocab struct {
	Model  string    // "llama" (SentencePiece BPE with scores) or "gpt2" (byte-level BPE)
	Pre    string    // gpt2 pre-tokenizer: "qwen2", "llama-bpe", "gpt2", "default" or an alias (see New); "" is "default"
	Tokens []string  // token texts, indexed by id
	Scores []float32 // llama merge scores; nil means all zero
	Types  []int32   // Type* per token; nil means all normal
	Merges []string  // gpt2 "a b" pairs in rank order; ignored for llama

	BOS, EOS, UNK, PAD int // -1 if absent

	AddBOS         bool // Encode adds BOS unless Options say otherwise
	AddSpacePrefix bool // llama only: Encode prefixes text with a space, Decode strips it
}

type modelKind int

const (
	modelSPM modelKind = iota
	modelBPE
)

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	vocab        Vocab
	kind         modelKind
	pre          preTokenizer
	ids          map[string]int32  // token text -> id (empty texts are left out)
	ranks        map[mergePair]int // gpt2 merge ranks
	special      []int32           // control, unknown and user-defined ids, longest text first
	byteTok      [256]int32        // token for each raw byte, -1 if none
	byteVal      map[int32]byte    // byte-typed token -> its byte
	ignoreMerges bool              // llama-bpe: a pre-token that is itself a token skips merging
}

type mergePair struct{ left, right string }

// New validates v and builds its tokenizer. Errors name the offending field,
// token id or merge. Pre-tokenizer names follow llama.cpp: "llama-bpe",
// "llama3" and "llama-v3" use the Llama-3 pattern (and take a pre-token that
// is a whole token without merging); "qwen2" and "deepseek-r1-qwen" the Qwen2
// pattern; "gpt2" and "gpt-2" GPT-2's; "default" llama.cpp's default chain.
func New(v Vocab) (*Tokenizer, error) {
	// Own copies, so a caller changing its slices cannot change the tokenizer.
	v.Tokens, v.Scores, v.Types = slices.Clone(v.Tokens), slices.Clone(v.Scores), slices.Clone(v.Types)
	t := &Tokenizer{vocab: v}
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: vocabulary has no tokens")
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("tokenizer: %d tokens exceed the int32 id range", n)
	}
	switch v.Model {
	case "llama":
		t.kind = modelSPM
	case "gpt2":
		t.kind = modelBPE
		pre, ignoreMerges, err := preTokenizerFor(v.Pre)
		if err != nil {
			return nil, err
		}
		t.pre, t.ignoreMerges = pre, ignoreMerges
		if v.AddSpacePrefix {
			return nil, fmt.Errorf("tokenizer: add_space_prefix is only supported for model \"llama\", not \"gpt2\"")
		}
	default:
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q (want \"llama\" or \"gpt2\")", v.Model)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens: tokenizer.ggml.scores and tokenizer.ggml.tokens differ in length", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens: tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length", len(v.Types), n)
	}
	for _, s := range []struct {
		name string
		id   int
	}{{"BOS", v.BOS}, {"EOS", v.EOS}, {"UNK", v.UNK}, {"PAD", v.PAD}} {
		if s.id < -1 || s.id >= n {
			return nil, fmt.Errorf("tokenizer: %s id %d out of range for %d tokens", s.name, s.id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return nil, fmt.Errorf("tokenizer: add_bos_token is set but the vocabulary has no BOS id")
	}

	t.ids = make(map[string]int32, n)
	t.byteVal = make(map[int32]byte)
	for i, text := range v.Tokens {
		id := int32(i)
		if v.Scores != nil && math.IsNaN(float64(v.Scores[i])) {
			return nil, fmt.Errorf("tokenizer: token %d %q has a NaN score", i, text)
		}
		typ := t.typeOf(id)
		if typ < TypeUndefined || typ > TypeByte {
			return nil, fmt.Errorf("tokenizer: token %d %q has unknown type %d", i, text, typ)
		}
		if typ == TypeByte {
			b, ok := parseByteToken(text)
			if !ok {
				return nil, fmt.Errorf("tokenizer: byte token %d is %q, want the form <0xNN>", i, text)
			}
			t.byteVal[id] = b
		}
		if text == "" {
			continue // llama.cpp renames empty tokens; no text can reach them
		}
		if prev, dup := t.ids[text]; dup {
			return nil, fmt.Errorf("tokenizer: duplicate token %q at ids %d and %d", text, prev, i)
		}
		t.ids[text] = id
		if typ == TypeControl || typ == TypeUnknown || typ == TypeUserDefined {
			t.special = append(t.special, id)
		}
	}
	// Longest first, so "<|im_start|>" wins over any special token inside it.
	slices.SortStableFunc(t.special, func(a, b int32) int { return len(v.Tokens[b]) - len(v.Tokens[a]) })

	for b := range 256 {
		t.byteTok[b] = t.lookupByte(byte(b))
	}
	if t.kind == modelBPE {
		t.ranks = make(map[mergePair]int, len(v.Merges))
		for rank, m := range v.Merges {
			// llama.cpp splits at the first space after the first byte.
			sp := -1
			if len(m) > 1 {
				if k := strings.IndexByte(m[1:], ' '); k >= 0 {
					sp = k + 1
				}
			}
			if sp < 0 || sp == len(m)-1 {
				return nil, fmt.Errorf("tokenizer: merge %d %q is not two parts separated by a space", rank, m)
			}
			p := mergePair{m[:sp], m[sp+1:]}
			if _, dup := t.ranks[p]; !dup {
				t.ranks[p] = rank
			}
		}
	}
	return t, nil
}

func parseByteToken(text string) (byte, bool) {
	if len(text) != 6 || !strings.HasPrefix(text, "<0x") || text[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(text[3])
	lo, ok2 := hexDigit(text[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// lookupByte finds the token that stands for raw byte b: SPM uses <0xNN>,
// falling back to a one-byte token as llama.cpp does; gpt2 uses the byte's
// byte-level character.
func (t *Tokenizer) lookupByte(b byte) int32 {
	if t.kind == modelBPE {
		if id, ok := t.ids[byteChars[b]]; ok {
			return id
		}
		return -1
	}
	if id, ok := t.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
		return id
	}
	if id, ok := t.ids[string([]byte{b})]; ok {
		return id
	}
	return -1
}

func (t *Tokenizer) typeOf(id int32) int32 {
	if t.vocab.Types == nil {
		return TypeNormal
	}
	return t.vocab.Types[id]
}

func (t *Tokenizer) inRange(id int32) bool { return id >= 0 && int(id) < len(t.vocab.Tokens) }

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.vocab.Tokens) }

// Footprint estimates the bytes the tokenizer's tables hold, for memory
// estimates: token and merge texts with their string headers, scores and
// types, and the text-to-id and merge-rank maps. A Go map slot holds its key
// and value, padded; a map has between 1.15 and 2.3 slots per entry,
// depending on where its size falls between doublings (2 fits a vocabulary
// of Qwen's size, TestFootprintMatchesTheHeap).
func (t *Tokenizer) Footprint() int64 {
	const stringHeader, slotsPerEntry = 16, 2.0
	var n int64
	for _, s := range t.vocab.Tokens {
		n += stringHeader + int64(len(s))
	}
	for _, s := range t.vocab.Merges {
		n += stringHeader + int64(len(s))
	}
	n += 4 * int64(len(t.vocab.Scores)+len(t.vocab.Types))
	n += int64(slotsPerEntry * float64(len(t.ids)*(stringHeader+8)))
	n += int64(slotsPerEntry * float64(len(t.ranks)*(2*stringHeader+8)))
	return n
}

// BOS is the beginning-of-sequence id, -1 if the vocabulary has none.
func (t *Tokenizer) BOS() int32 { return int32(t.vocab.BOS) }

// EOS is the end-of-sequence id, -1 if the vocabulary has none.
func (t *Tokenizer) EOS() int32 { return int32(t.vocab.EOS) }

// IsSpecial reports whether id is a control, unknown or user-defined token
// or one of the BOS, EOS, UNK and PAD ids.
func (t *Tokenizer) IsSpecial(id int32) bool {
	if !t.inRange(id) {
		return false
	}
	switch t.typeOf(id) {
	case TypeControl, TypeUnknown, TypeUserDefined:
		return true
	}
	v := t.vocab
	return int(id) == v.BOS || int(id) == v.EOS || int(id) == v.UNK || int(id) == v.PAD
}

// IsOrdinary reports whether id is a token of text the model reads in
// training: not special (IsSpecial), not unused, and not a byte of SPM's
// byte fallback (<0xNN>), which stands in only for text the vocabulary
// cannot spell.
func (t *Tokenizer) IsOrdinary(id int32) bool {
	if !t.inRange(id) || t.IsSpecial(id) {
		return false
	}
	typ := t.typeOf(id)
	return typ != TypeUnused && typ != TypeByte
}

// Piece is id's text for display: SPM "▁" as a space, byte tokens and
// gpt2 byte-level characters as the bytes they stand for, special tokens as
// written. Bytes that are not printable text (ASCII controls, invalid UTF-8)
// are shown as \xNN. An id out of range gives "<invalid id N>".
func (t *Tokenizer) Piece(id int32) string {
	if !t.inRange(id) {
		return fmt.Sprintf("<invalid id %d>", id)
	}
	text := t.vocab.Tokens[id]
	switch t.typeOf(id) {
	case TypeByte:
		return Display(string([]byte{t.byteVal[id]}))
	case TypeNormal:
		return Display(string(t.normalBytes(text)))
	}
	return Display(text)
}

var controlEscapes = map[rune]string{'\n': `\n`, '\t': `\t`, '\r': `\r`, '\\': `\\`}

// Display is text as Piece shows it: newline, tab and carriage return as
// \n, \t, \r, a backslash as \\ (so that a tab and the two characters
// \ and t, common in source code, do not look alike), other ASCII control
// bytes and invalid UTF-8 as \xNN.
func Display(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if esc, ok := controlEscapes[r]; ok {
			sb.WriteString(esc)
		} else if (r == utf8.RuneError && size == 1) || r < 0x20 || r == 0x7f {
			fmt.Fprintf(&sb, `\x%02X`, s[i])
		} else {
			sb.WriteString(s[i : i+size])
		}
		i += size
	}
	return sb.String()
}
