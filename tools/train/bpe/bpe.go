package main

import (
	"fmt"
	"strings"
)

// pair is two adjacent token ids; merged pairs become new ids in rank order from 256.
type pair struct{ left, right int32 }

// learnMerges learns up to numMerges byte-level BPE merges from chunk counts (chunks never
// merge across each other, as the pre-tokenizer keeps them apart at run time). Each step merges
// the most frequent adjacent pair, ties going to the smaller (left, right) ids so runs repeat exactly.
func learnMerges(chunkCounts map[string]int64, numMerges int) ([]pair, error) {
	words := make([][]int32, 0, len(chunkCounts))
	counts := make([]int64, 0, len(chunkCounts))
	for chunk, c := range chunkCounts {
		ids := make([]int32, len(chunk))
		for k := 0; k < len(chunk); k++ {
			ids[k] = int32(chunk[k])
		}
		words = append(words, ids)
		counts = append(counts, c)
	}
	pairCounts := map[pair]int64{}
	where := map[pair][]int32{} // word indices holding the pair; may repeat and go stale
	for w, ids := range words {
		for k := 0; k+1 < len(ids); k++ {
			p := pair{ids[k], ids[k+1]}
			pairCounts[p] += counts[w]
			where[p] = append(where[p], int32(w))
		}
	}
	merges := make([]pair, 0, numMerges)
	seen := make([]int32, len(words)) // merge step+1 that last rewrote each word
	for step := 0; step < numMerges; step++ {
		best, bestCount := pair{}, int64(0)
		for p, c := range pairCounts {
			if c > bestCount || (c == bestCount && less(p, best)) {
				best, bestCount = p, c
			}
		}
		if bestCount == 0 {
			return nil, fmt.Errorf("corpus ran out of pairs after %d merges, %d asked", step, numMerges)
		}
		newID := int32(256 + step)
		for _, w := range where[best] {
			if seen[w] == int32(step+1) {
				continue
			}
			seen[w] = int32(step + 1)
			old := words[w]
			merged := mergePair(old, best, newID)
			if len(merged) == len(old) {
				continue
			}
			for k := 0; k+1 < len(old); k++ {
				p := pair{old[k], old[k+1]}
				if pairCounts[p] -= counts[w]; pairCounts[p] == 0 {
					delete(pairCounts, p)
				}
			}
			for k := 0; k+1 < len(merged); k++ {
				p := pair{merged[k], merged[k+1]}
				pairCounts[p] += counts[w]
				if p.left == newID || p.right == newID {
					where[p] = append(where[p], int32(w))
				}
			}
			words[w] = merged
		}
		delete(where, best)
		merges = append(merges, best)
	}
	return merges, nil
}

func less(a, b pair) bool {
	return a.left < b.left || (a.left == b.left && a.right < b.right)
}

// mergePair replaces non-overlapping occurrences of p, left to right, with id.
func mergePair(ids []int32, p pair, id int32) []int32 {
	out := make([]int32, 0, len(ids))
	for k := 0; k < len(ids); k++ {
		if k+1 < len(ids) && ids[k] == p.left && ids[k+1] == p.right {
			out = append(out, id)
			k++
			continue
		}
		out = append(out, ids[k])
	}
	return out
}

// encoder applies merges by rank as llama.cpp's and Hugging Face's BPE do: repeatedly merge
// the adjacent pair of lowest rank, the leftmost one first.
type encoder struct {
	rank  map[pair]int32
	cache map[string][]uint16
}

func newEncoder(merges []pair) *encoder {
	rank := make(map[pair]int32, len(merges))
	for r, p := range merges {
		rank[p] = int32(r)
	}
	return &encoder{rank: rank, cache: map[string][]uint16{}}
}

func (e *encoder) encodeChunk(chunk []byte) []uint16 {
	if ids, ok := e.cache[string(chunk)]; ok {
		return ids
	}
	ids := make([]int32, len(chunk))
	for k, b := range chunk {
		ids[k] = int32(b)
	}
	for len(ids) > 1 {
		bestRank, at := int32(-1), -1
		for k := 0; k+1 < len(ids); k++ {
			if r, ok := e.rank[pair{ids[k], ids[k+1]}]; ok && (at < 0 || r < bestRank) {
				bestRank, at = r, k
			}
		}
		if at < 0 {
			break
		}
		ids[at] = 256 + bestRank
		ids = append(ids[:at+1], ids[at+2:]...)
	}
	out := make([]uint16, len(ids))
	for k, id := range ids {
		out[k] = uint16(id)
	}
	e.cache[string(chunk)] = out
	return out
}

// encode appends the ids of text to dst.
func (e *encoder) encode(dst []uint16, text []byte) []uint16 {
	preTokenize(text, func(chunk []byte) { dst = append(dst, e.encodeChunk(chunk)...) })
	return dst
}

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves and
// the rest map to U+0100 onwards in byte order, so every token string is printable with no spaces.
var byteToRune = func() [256]rune {
	var m [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}()

func tokenString(bytes []byte) string {
	var sb strings.Builder
	for _, b := range bytes {
		sb.WriteRune(byteToRune[b])
	}
	return sb.String()
}
