package engine

import (
	"math"
	"runtime"
	"slices"

	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Estimate is the memory a prefill needs beyond the resident weights, in bytes.
type Estimate struct {
	Scratch int64 // activations, scores and logits of this prefill
	Capture int64 // the captured tensors
	Cache   int64 // the session's KV cache
}

// Total sums the parts.
func (m Estimate) Total() int64 { return addBytes(m.Scratch, m.Capture, m.Cache) }

// MaxEstimate is where estimates saturate: a request whose buffers could
// count past it (512 heads over a context of 2^24 wrapped int64) gets it
// for each of its parts, which no device has.
const MaxEstimate = math.MaxInt64 / 4

// addBytes sums byte counts, saturating at math.MaxInt64.
func addBytes(parts ...int64) int64 {
	var sum int64
	for _, p := range parts {
		if p > math.MaxInt64-sum {
			return math.MaxInt64
		}
		sum += p
	}
	return sum
}

// overflows says whether a request of t tokens after pos0, with a cache of
// capacity positions, could count past MaxEstimate bytes: it bounds every
// buffer by the largest one's size times how many there can be, in float64,
// which cannot wrap. Below it, the layout's int sums cannot wrap either.
func overflows(c *model.Config, t, pos0, capacity int) bool {
	tokens, keys := float64(t), float64(pos0)+float64(t)
	widest := float64(max(c.DModel, c.FFN, c.QDim(), c.KVDim(), c.Vocab, c.Experts, c.ExpertFFN))
	widest = max(widest, float64(c.ExpertsUsed)*float64(max(c.DModel, c.ExpertFFN)), 2*float64(c.KVHeads)*float64(c.HeadDim+15))
	largest := max(float64(c.Heads)*tokens*keys, tokens*widest, keys*widest, float64(runtime.GOMAXPROCS(0))*36*keys)
	buffers := float64(len(trace.Points(c)) + 64) // every point, and the scratch's buffers
	cache := 8 * float64(c.Layers) * float64(capacity) * float64(c.KVDim())
	return 4*largest*buffers > MaxEstimate || cache > MaxEstimate
}

// EstimateMemory says what a prefill of t tokens at pos0 with options o
// needs, for a session of the given cache capacity. A session keeps a
// prefill's scratch and capture buffers for the next one (until Close), each
// at most twice the size the next one needs. Negative counts count as 0:
// callers refuse them (a prefill's check does). Past 64 bits, or for a nil
// config (nothing to count: nothing may fit), each part is MaxEstimate.
func EstimateMemory(c *model.Config, t, pos0, capacity int, o Options) Estimate {
	t, pos0, capacity = max(t, 0), max(pos0, 0), max(capacity, 0)
	if c == nil || overflows(c, t, pos0, capacity) {
		return Estimate{Scratch: MaxEstimate, Capture: MaxEstimate, Cache: MaxEstimate}
	}
	l := newLayout(c, t, pos0, o)
	var est Estimate
	est.Scratch = 4 * int64(l.scratchElements(c, o))
	est.Capture = 4 * int64(l.captureElements)
	est.Cache = 4 * 2 * int64(c.Layers) * int64(capacity) * int64(c.KVDim())
	return est
}

// EstimateBatch is what a batch of prompts of the given lengths needs as one
// prefill (Session.PrefillBatch): the scratch and captures of its packed
// rows, and a KV cache with a part for each prompt. Negative lengths count
// as 0; past 64 bits or for a nil config, each part is MaxEstimate.
func EstimateBatch(c *model.Config, lens []int, o Options) Estimate {
	if c == nil {
		return Estimate{Scratch: MaxEstimate, Capture: MaxEstimate, Cache: MaxEstimate}
	}
	lens = slices.Clone(lens)
	rows := 0
	for i, n := range lens {
		lens[i] = max(n, 0)
		if rows += lens[i]; rows < 0 || overflows(c, rows, 0, rows) {
			return Estimate{Scratch: MaxEstimate, Capture: MaxEstimate, Cache: MaxEstimate}
		}
	}
	l := packedLayout(c, lens, 0, o)
	return Estimate{
		Scratch: 4 * int64(l.scratchElements(c, o)),
		Capture: 4 * int64(l.captureElements),
		Cache:   4 * 2 * int64(c.Layers) * int64(rows) * int64(c.KVDim()),
	}
}
