package tokenizer

import (
	"fmt"
	"strings"
)

// Options adjust one Encode call.
type Options struct {
	AddBOS *bool // nil: as the vocabulary says (Vocab.AddBOS)
	// ParseSpecial recognises control and unknown tokens written in the text,
	// e.g. "<s>" or "<|im_start|>". User-defined tokens are always recognised,
	// as in llama.cpp.
	ParseSpecial bool
	// Continue encodes text that follows earlier tokens, as it would be
	// tokenized inside the whole: no BOS unless AddBOS asks for one, and
	// SPM's space prefix only after a special token within it.
	Continue bool
}

// fragment is a stretch of raw text, or a special token cut out of it.
type fragment struct {
	text string
	id   int32 // -1 for text
}

// Encode tokenizes text as llama.cpp's llama_tokenize does (add_special
// meaning BOS only). Bytes that are not valid UTF-8 are kept: SPM sends them
// out as <0xNN> tokens, gpt2 through the byte-level alphabet (llama.cpp
// would replace them with U+FFFD). The only errors are a requested BOS the
// vocabulary lacks and a byte the vocabulary has no token for.
func (t *Tokenizer) Encode(text string, o Options) ([]int32, error) {
	addBOS := t.vocab.AddBOS && !o.Continue
	if o.AddBOS != nil {
		addBOS = *o.AddBOS
	}
	out := make([]int32, 0, len(text)/4+2) // about four bytes a token
	if addBOS {
		if t.vocab.BOS < 0 {
			return nil, fmt.Errorf("tokenizer: BOS requested but the vocabulary has no BOS token")
		}
		out = append(out, int32(t.vocab.BOS))
	}
	var err error
	prevSpecial := !o.Continue // SPM: text at the start or after a special token gets the space prefix
	var m *merger
	for _, f := range t.partition(text, o.ParseSpecial) {
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		switch t.kind {
		case modelSPM:
			s := f.text
			if t.vocab.AddSpacePrefix && prevSpecial {
				s = " " + s
			}
			out, err = t.encodeSPM(strings.ReplaceAll(s, " ", spmSpace), out)
		case modelBPE:
			if m == nil {
				m = t.newBPEMerger()
			}
			for _, w := range t.pre(f.text) {
				if out, err = t.encodeBPE(w, out, m); err != nil {
					break
				}
			}
		}
		if err != nil {
			return nil, err
		}
		prevSpecial = false
	}
	return out, nil
}

// spmSpace is SentencePiece's visible space, U+2581.
const spmSpace = "\u2581"

// partition cuts the special tokens out of text, longest token first, as
// llama.cpp's tokenizer_st_partition does.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{text: text, id: -1}}
	for _, id := range t.special {
		if !parseSpecial && t.typeOf(id) != TypeUserDefined {
			continue
		}
		tok := t.vocab.Tokens[id]
		var next []fragment
		for _, f := range frags {
			if f.id >= 0 || !strings.Contains(f.text, tok) {
				next = append(next, f)
				continue
			}
			rest := f.text
			for {
				k := strings.Index(rest, tok)
				if k < 0 {
					break
				}
				if k > 0 {
					next = append(next, fragment{text: rest[:k], id: -1})
				}
				next = append(next, fragment{id: id})
				rest = rest[k+len(tok):]
			}
			if rest != "" {
				next = append(next, fragment{text: rest, id: -1})
			}
		}
		frags = next
	}
	return frags
}

// Decode turns ids back into text as llama.cpp's detokenizer does with
// special tokens not rendered: control, unknown and unused tokens give
// nothing, user-defined tokens their text, byte tokens their byte. For a
// vocabulary with AddSpacePrefix, one leading space is stripped from the
// first token after an optional leading BOS, undoing Encode's prefix.
// Unlike llama.cpp, no clean-up of spaces before punctuation is applied, so
// Decode(Encode(s)) == s for valid UTF-8 s (SPM: U+2581 in s comes back as
// a space).
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	var sb strings.Builder
	strip := t.kind == modelSPM && t.vocab.AddSpacePrefix
	for i, id := range ids {
		if !t.inRange(id) {
			return "", fmt.Errorf("tokenizer: token %d (position %d) out of range for %d tokens", id, i, len(t.vocab.Tokens))
		}
		piece := t.decodePiece(id)
		if strip && !(i == 0 && int(id) == t.vocab.BOS) {
			piece = strings.TrimPrefix(piece, " ")
			strip = false
		}
		sb.WriteString(piece)
	}
	return sb.String(), nil
}

func (t *Tokenizer) decodePiece(id int32) string {
	text := t.vocab.Tokens[id]
	switch t.typeOf(id) {
	case TypeNormal:
		return string(t.normalBytes(text))
	case TypeUserDefined:
		return text
	case TypeByte:
		return string([]byte{t.byteVal[id]})
	}
	return "" // control, unknown, unused, undefined
}

// normalBytes is a normal token's text as the bytes it stands for.
func (t *Tokenizer) normalBytes(text string) []byte {
	if t.kind == modelBPE {
		return byteLevelDecode(text)
	}
	return []byte(strings.ReplaceAll(text, spmSpace, " "))
}
