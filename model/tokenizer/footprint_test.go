package tokenizer

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Footprint is checked against the heap a tokenizer of Qwen's size really
// takes: 151,936 tokens and 150,000 merges, built from texts as a GGUF
// reader makes them.
func TestFootprintMatchesTheHeap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := Vocab{Model: "gpt2", Pre: "qwen2", BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	for b := range 256 {
		v.Tokens = append(v.Tokens, string(byteChars[b]))
	}
	for i := len(v.Tokens); i < 151936; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("tok%06dx", i))
	}
	for i := range 150000 {
		v.Merges = append(v.Merges, fmt.Sprintf("m%d %d", i, i%977))
	}
	tok, err := New(v)
	require.NoError(t, err)
	v = Vocab{} // only the tokenizer's copies stay reachable
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	est := tok.Footprint()
	t.Logf("heap %.1f MiB, footprint %.1f MiB", float64(heap)/(1<<20), float64(est)/(1<<20))
	// A formula over Go's map layout, not its accounting: within a quarter.
	require.InDelta(t, 1, float64(est)/float64(heap), 0.25)
	runtime.KeepAlive(tok)
}
