package main

import (
	"unicode"
	"unicode/utf8"
)

// preTokenize splits text the way the Qwen2 pre-tokenizer regex does (llama.cpp's
// tokenizer.ggml.pre = "qwen2"):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Go's regexp has no lookahead, so this is a hand scanner that takes, at each position,
// the first alternative that matches, with the regex's greedy-then-backtrack lengths.
// The chunks it emits alias text and always concatenate back to it.
func preTokenize(text []byte, emit func(chunk []byte)) {
	for i := 0; i < len(text); {
		end := chunkEnd(text, i)
		emit(text[i:end])
		i = end
	}
}

func chunkEnd(s []byte, i int) int {
	r, n := utf8.DecodeRune(s[i:])
	if r == '\'' {
		if k := contractionLen(s[i+1:]); k > 0 {
			return i + 1 + k
		}
	}
	if isLetter(r) {
		return letterRunEnd(s, i+n)
	}
	// [^\r\n\p{L}\p{N}]\p{L}+ : one leading non-letter, non-number (a space, a dot...).
	if r != '\r' && r != '\n' && !isNumber(r) && i+n < len(s) {
		if r2, _ := utf8.DecodeRune(s[i+n:]); isLetter(r2) {
			return letterRunEnd(s, i+n)
		}
	}
	if isNumber(r) {
		return i + n
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`; when the space is not followed by punctuation the
	// regex backtracks to no space, and a space is not punctuation, so it fails.
	start := i
	if r == ' ' {
		start = i + 1
	}
	if k := punctRunEnd(s, start); k > start {
		return newlineRunEnd(s, k)
	}
	// Only whitespace is left here.
	wsEnd, lastNewlineEnd, lastStart := i, -1, i
	for wsEnd < len(s) {
		r, n := utf8.DecodeRune(s[wsEnd:])
		if !isSpace(r) {
			break
		}
		lastStart = wsEnd
		wsEnd += n
		if r == '\r' || r == '\n' {
			lastNewlineEnd = wsEnd
		}
	}
	if lastNewlineEnd > 0 { // \s*[\r\n]+ : up to the run's last newline
		return lastNewlineEnd
	}
	if wsEnd == len(s) { // \s+(?!\S) at the end of the text
		return wsEnd
	}
	if lastStart > i { // \s+(?!\S) : leave the last space to lead the next chunk
		return lastStart
	}
	return wsEnd // \s+
}

// contractionLen matches s|t|re|ve|m|ll|d case-insensitively at the start of s.
func contractionLen(s []byte) int {
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		return s[k] | 0x20 // ASCII letters only; other bytes never equal the letters tested
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}

func letterRunEnd(s []byte, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRune(s[i:])
		if !isLetter(r) {
			break
		}
		i += n
	}
	return i
}

func punctRunEnd(s []byte, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRune(s[i:])
		if isSpace(r) || isLetter(r) || isNumber(r) {
			break
		}
		i += n
	}
	return i
}

func newlineRunEnd(s []byte, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// Invalid UTF-8 decodes to utf8.RuneError (U+FFFD, a symbol), so it counts as punctuation.
func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }

// isSpace is Unicode's White_Space property, which is what \s means in llama.cpp's regex.
func isSpace(r rune) bool { return unicode.IsSpace(r) }
