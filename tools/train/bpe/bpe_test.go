package main

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Worked by hand: (a,b) occurs 2+3 = 5 times, then (a,a) and (a,256) tie at 2 and the
// smaller ids win, then (257,256) is the only pair left.
func TestLearnMerges(t *testing.T) {
	counts := map[string]int64{"aaab": 2, "ab": 3}
	merges, err := learnMerges(counts, 3)
	require.NoError(t, err)
	assert.Equal(t, []pair{{'a', 'b'}, {'a', 'a'}, {257, 256}}, merges)

	_, err = learnMerges(counts, 4)
	assert.ErrorContains(t, err, "ran out of pairs after 3 merges")
}

func TestEncodeChunkByRank(t *testing.T) {
	enc := newEncoder([]pair{{'a', 'b'}, {'a', 'a'}, {257, 256}})
	assert.Equal(t, []uint16{258}, enc.encodeChunk([]byte("aaab")))
	assert.Equal(t, []uint16{257, 257}, enc.encodeChunk([]byte("aaaa")))
	assert.Equal(t, []uint16{257, 'a'}, enc.encodeChunk([]byte("aaa")))
	assert.Equal(t, []uint16{'b', 'a'}, enc.encodeChunk([]byte("ba")))
}

// Merging the lowest rank first must equal applying each merge in turn over the whole
// chunk, which is how the merges were learned.
func TestEncoderMatchesSequentialMerges(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	alphabet := []byte("ab c\n")
	randomText := func(n int) []byte {
		b := make([]byte, n)
		for k := range b {
			b[k] = alphabet[rng.Intn(len(alphabet))]
		}
		return b
	}
	counts := map[string]int64{}
	for k := 0; k < 300; k++ {
		preTokenize(randomText(20), func(c []byte) { counts[string(c)]++ })
	}
	merges, err := learnMerges(counts, 40)
	require.NoError(t, err)
	enc := newEncoder(merges)
	for k := 0; k < 500; k++ {
		chunk := randomText(1 + rng.Intn(12))
		want := make([]int32, len(chunk))
		for i, b := range chunk {
			want[i] = int32(b)
		}
		for r, m := range merges {
			want = mergePair(want, m, int32(256+r))
		}
		got := enc.encodeChunk(chunk)
		require.Len(t, got, len(want), "chunk %q", chunk)
		for i := range want {
			require.Equal(t, want[i], int32(got[i]), "chunk %q", chunk)
		}
	}
}

// GPT-2's published byte-to-unicode table: space is Ġ, newline Ċ, tab ĉ, NUL Ā and the
// soft hyphen 0xAD, the last unprintable byte, Ń.
func TestTokenString(t *testing.T) {
	assert.Equal(t, "Ġ", tokenString([]byte(" ")))
	assert.Equal(t, "Ċ", tokenString([]byte("\n")))
	assert.Equal(t, "ĉ", tokenString([]byte("\t")))
	assert.Equal(t, "Ā", tokenString([]byte{0}))
	assert.Equal(t, "Ń", tokenString([]byte{0xAD}))
	assert.Equal(t, "ĠfooÃ©", tokenString([]byte(" fooé")))
}

func TestBuildTokenizer(t *testing.T) {
	tok := buildTokenizer([]pair{{' ', 'a'}, {256, 'b'}})
	require.Len(t, tok.Tokens, 259)
	assert.Equal(t, []string{"Ġ a", "Ġa b"}, tok.Merges)
	assert.Equal(t, "Ġab", tok.Tokens[257])
	assert.Equal(t, endOfText, tok.Tokens[258])
	assert.Equal(t, int32(3), tok.TokenTypes[258])
	assert.Equal(t, int32(1), tok.TokenTypes[0])
	assert.Equal(t, 258, tok.EOS)
}
