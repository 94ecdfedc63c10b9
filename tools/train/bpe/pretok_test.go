package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func split(text string) []string {
	var chunks []string
	preTokenize([]byte(text), func(c []byte) { chunks = append(chunks, string(c)) })
	return chunks
}

// The expected splits are worked out by hand from the Qwen2 regex (see preTokenize).
func TestPreTokenizeQwen2(t *testing.T) {
	cases := []struct {
		name string
		text string
		want []string
	}{
		{"go code", "func main() {\n\tfmt.Println(\"hi\")\n}\n",
			[]string{"func", " main", "()", " {\n", "\tfmt", ".Println", "(\"", "hi", "\")\n", "}\n"}},
		// The space takes the quote (` ?[^\s\p{L}\p{N}]+`) before 'S could match as a contraction.
		{"contractions", "don't 'S x'll it'RE 've'",
			[]string{"don", "'t", " '", "S", " x", "'ll", " it", "'RE", " '", "ve", "'"}},
		{"digits one by one", "x12 3.5", []string{"x", "1", "2", " ", "3", ".", "5"}},
		{"whitespace", "a  \n\n  b   ", []string{"a", "  \n\n", " ", " b", "   "}},
		{"indent", "\t\tif x {", []string{"\t", "\tif", " x", " {"}},
		{"crlf", "x := y\r\n", []string{"x", " :=", " y", "\r\n"}},
		{"punct then newlines", "}}\n\n\tx", []string{"}}\n\n", "\tx"}},
		{"unicode letters and numbers", "héllo wörld 日本 ½", []string{"héllo", " wörld", " 日本", " ", "½"}},
		{"newline never leads a word", "\nx", []string{"\n", "x"}},
		{"lone trailing space", "a ", []string{"a", " "}},
		{"invalid utf-8 leads a word like a symbol", "a\xffb", []string{"a", "\xffb"}},
		{"empty", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, split(c.text))
		})
	}
}

func FuzzPreTokenize(f *testing.F) {
	for _, s := range []string{"func f() {}\n", "don't", "  \r\n\t x", "日本\xff\xfe 12"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		var joined []byte
		preTokenize(text, func(c []byte) {
			if len(c) == 0 {
				t.Fatalf("empty chunk in %q", text)
			}
			joined = append(joined, c...)
		})
		if !bytes.Equal(joined, text) {
			t.Fatalf("chunks of %q join to %q", text, joined)
		}
	})
}
