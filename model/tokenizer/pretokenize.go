package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A preTokenizer splits text into pieces that BPE merges never cross; the
// pieces concatenate back to the text.
type preTokenizer func(text string) []string

// preTokenizerFor maps tokenizer.ggml.pre to its splitter and reports
// whether llama.cpp's ignore_merges applies.
func preTokenizerFor(pre string) (preTokenizer, bool, error) {
	switch pre {
	case "llama-bpe", "llama3", "llama-v3":
		return func(s string) []string { return splitLlama3(s, 3) }, true, nil
	case "qwen2", "deepseek-r1-qwen":
		return func(s string) []string { return splitLlama3(s, 1) }, false, nil
	case "gpt2", "gpt-2":
		return splitGPT2, false, nil
	case "default", "":
		return splitDefault, false, nil
	}
	return nil, false, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q (supported: llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen, gpt2, gpt-2, default)", pre)
}

// addsBOSByDefault is llama.cpp's add_bos when tokenizer.ggml.add_bos_token
// is absent: SentencePiece and the Llama-3 pre-tokenizer add it.
func addsBOSByDefault(model, pre string) bool {
	if model == "llama" {
		return true
	}
	switch pre {
	case "llama-bpe", "llama3", "llama-v3":
		return true
	}
	return false
}

// cpClass is the part of a code point's Unicode category the patterns test.
type cpClass uint8

const (
	clsNone    cpClass = iota // past the end of the text
	clsOther                  // [^\s\p{L}\p{N}], and bytes that are not valid UTF-8
	clsLetter                 // \p{L}
	clsNumber                 // \p{N}
	clsSpace                  // \s other than \r and \n
	clsNewline                // \r or \n
)

func classify(r rune) cpClass {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsSpace(r): // the same set as llama.cpp's whitespace flag
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	}
	return clsOther
}

var asciiClass [utf8.RuneSelf]cpClass

func init() {
	for r := range rune(utf8.RuneSelf) {
		asciiClass[r] = classify(r)
	}
}

// codePoints is text cut into code points; an invalid byte is a code point
// of its own (rune -1, class other), so splitting never loses bytes.
type codePoints struct {
	text  string
	runes []rune
	class []cpClass
	off   []int // byte offset of each code point, plus len(text)
}

func cutCodePoints(s string) *codePoints {
	cp := &codePoints{
		text:  s,
		runes: make([]rune, 0, len(s)),
		class: make([]cpClass, 0, len(s)),
		off:   make([]int, 0, len(s)+1),
	}
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		c := clsOther
		if r < utf8.RuneSelf {
			c = asciiClass[r]
		} else if r, size = utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && size == 1 {
			r = -1
		} else {
			c = classify(r)
		}
		cp.runes = append(cp.runes, r)
		cp.class = append(cp.class, c)
		cp.off = append(cp.off, i)
		i += size
	}
	cp.off = append(cp.off, len(s))
	return cp
}

func (cp *codePoints) rune(i int) rune {
	if i < len(cp.runes) {
		return cp.runes[i]
	}
	return -1
}

func (cp *codePoints) cls(i int) cpClass {
	if i < len(cp.class) {
		return cp.class[i]
	}
	return clsNone
}

func (cp *codePoints) isSpace(i int) bool { c := cp.cls(i); return c == clsSpace || c == clsNewline }

// run returns the end of the run of class c starting at i.
func (cp *codePoints) run(i int, c cpClass) int {
	for cp.cls(i) == c {
		i++
	}
	return i
}

// split cuts the text with match, which returns the end of the piece that
// starts at i (always past i).
func (cp *codePoints) split(match func(i int) int) []string {
	var out []string
	for i := 0; i < len(cp.runes); {
		j := match(i)
		out = append(out, cp.text[cp.off[i]:cp.off[j]])
		i = j
	}
	return out
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i, ASCII case-insensitive
// if fold; it returns i when there is none.
func (cp *codePoints) contraction(i int, fold bool) int {
	if cp.rune(i) != '\'' {
		return i
	}
	a, b := cp.rune(i+1), cp.rune(i+2)
	if fold {
		a, b = a|0x20, b|0x20 // ASCII letters only: the pattern is '[sS]...
	}
	switch {
	case a == 's' || a == 't' || a == 'm' || a == 'd':
		return i + 2
	case a == 'r' && b == 'e', a == 'v' && b == 'e', a == 'l' && b == 'l':
		return i + 3
	}
	return i
}

// whitespace matches the whitespace alternatives at i: \s*[\r\n]+ if
// newlines (Llama-3 and Qwen2), then \s+(?!\S), then \s+.
func (cp *codePoints) whitespace(i int, newlines bool) int {
	end := i
	lastNewline := -1
	for cp.isSpace(end) {
		if cp.cls(end) == clsNewline {
			lastNewline = end
		}
		end++
	}
	if newlines && lastNewline >= 0 {
		return lastNewline + 1
	}
	if end-i > 1 && end < len(cp.runes) {
		return end - 1 // leave the last space to prefix the next word
	}
	return end
}

// splitLlama3 is the Llama-3 pattern (maxDigits 3) and the Qwen2 pattern
// (maxDigits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitLlama3(s string, maxDigits int) []string {
	cp := cutCodePoints(s)
	return cp.split(func(i int) int {
		if j := cp.contraction(i, true); j > i {
			return j
		}
		c := cp.cls(i)
		if c == clsLetter {
			return cp.run(i, clsLetter)
		}
		if (c == clsOther || c == clsSpace) && cp.cls(i+1) == clsLetter {
			return cp.run(i+1, clsLetter)
		}
		if c == clsNumber {
			j := i
			for j-i < maxDigits && cp.cls(j) == clsNumber {
				j++
			}
			return j
		}
		j := i
		if cp.rune(i) == ' ' && cp.cls(i+1) == clsOther {
			j++
		}
		if cp.cls(j) == clsOther {
			return cp.run(cp.run(j, clsOther), clsNewline)
		}
		return cp.whitespace(i, true)
	})
}

// splitGPT2 is GPT-2's pattern:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(s string) []string {
	cp := cutCodePoints(s)
	return cp.split(func(i int) int {
		if j := cp.contraction(i, false); j > i {
			return j
		}
		j := i
		if cp.rune(i) == ' ' {
			j++
		}
		if c := cp.cls(j); c == clsLetter || c == clsNumber || c == clsOther {
			return cp.run(j, c)
		}
		return cp.whitespace(i, false)
	})
}

// splitDefault is llama.cpp's pre-tokenizer for "default": four patterns
// applied in turn, each splitting the pieces of the one before into
// matches and the text between them:
//
//	[\p{P}\$\+<=>\^~\|]+, then GPT-2's pattern, then \p{N}+, then [0-9][0-9][0-9]
func splitDefault(s string) []string {
	pieces := splitRuns([]string{s}, func(r rune) bool {
		return unicode.IsPunct(r) || strings.ContainsRune("$+<=>^~|", r)
	})
	var words []string
	for _, p := range pieces {
		words = append(words, splitGPT2(p)...)
	}
	words = splitRuns(words, unicode.IsNumber)
	var out []string
	for _, w := range words {
		out = append(out, splitDigitTriples(w)...)
	}
	return out
}

// splitRuns cuts each piece into maximal runs of code points that satisfy
// in and the text between them. Invalid bytes never satisfy in.
func splitRuns(pieces []string, in func(rune) bool) []string {
	var out []string
	for _, p := range pieces {
		start, inRun := 0, false
		for i := 0; i < len(p); {
			r, size := utf8.DecodeRuneInString(p[i:])
			now := !(r == utf8.RuneError && size == 1) && in(r)
			if i > 0 && now != inRun {
				out = append(out, p[start:i])
				start = i
			}
			inRun = now
			i += size
		}
		if start < len(p) {
			out = append(out, p[start:])
		}
	}
	return out
}

// splitDigitTriples cuts out each leftmost run of three ASCII digits.
func splitDigitTriples(s string) []string {
	var out []string
	start := 0
	for i := 0; i+3 <= len(s); {
		if isDigit(s[i]) && isDigit(s[i+1]) && isDigit(s[i+2]) {
			if i > start {
				out = append(out, s[start:i])
			}
			out = append(out, s[i:i+3])
			i += 3
			start = i
		} else {
			i++
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }
