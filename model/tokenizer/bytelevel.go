package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteChars is GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100.. in byte order, so every byte
// string becomes printable text without spaces.
var byteChars [256]string

// charByte inverts byteChars.
var charByte = map[rune]byte{}

func init() {
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !('!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF) {
			r = next
			next++
		}
		byteChars[b] = string(r)
		charByte[r] = byte(b)
	}
}

// byteLevelEncode maps each byte of s to its byte-level character.
func byteLevelEncode(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteChars[s[i]])
	}
	return sb.String()
}

// byteLevelDecode maps byte-level characters back to bytes; anything
// outside the byte-level alphabet is kept as it is.
func byteLevelDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if b, ok := charByte[r]; ok {
			out = append(out, b)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return out
}
