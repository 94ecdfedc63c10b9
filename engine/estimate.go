package engine

import (
	"github.com/stratalab/strata/model"
)

// Estimate is the memory a prefill needs beyond the resident weights, in bytes.
type Estimate struct {
	Scratch int64 // activations, scores and logits of this prefill
	Capture int64 // the captured tensors
	Cache   int64 // the session's KV cache
}

// Total sums the parts.
func (m Estimate) Total() int64 { return m.Scratch + m.Capture + m.Cache }

// EstimateMemory says what a prefill of t tokens at pos0 with options o
// needs, for a session of the given cache capacity. A session keeps a
// prefill's scratch and capture buffers for the next one (until Close), each
// at most twice the size the next one needs. Negative counts count as 0:
// callers refuse them (a prefill's check does).
func EstimateMemory(c *model.Config, t, pos0, capacity int, o Options) Estimate {
	t, pos0, capacity = max(t, 0), max(pos0, 0), max(capacity, 0)
	l := newLayout(c, t, pos0, o)
	var est Estimate
	est.Scratch = 4 * int64(l.scratchElements(c, o))
	est.Capture = 4 * int64(l.captureElements)
	est.Cache = 4 * 2 * int64(c.Layers) * int64(capacity) * int64(c.KVDim())
	return est
}
