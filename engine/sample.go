package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/stratalab/strata/trace"
)

// Sampler draws each generated token from the model's next-token
// distribution instead of taking the most likely one, as Hugging Face's
// generate does with do_sample. The logits are divided by Temperature, then
// the filters that are set keep, in this order (each on what the one before
// kept, renormalised): the TopK most likely tokens; the fewest most likely
// whose probabilities add up to at least TopP; those at least MinP times as
// likely as the most likely. Ties in likelihood go to the lower token id
// (so top-k keeps exactly k, where Hugging Face keeps every token tied with
// the k-th).
//
// The zero Sampler is greedy: Temperature 0 takes the most likely token,
// and then no filter may be set. The same Seed, prompt and model give the
// same tokens.
type Sampler struct {
	Temperature float64
	TopK        int     // 0: no limit
	TopP        float64 // 0 or 1: no limit
	MinP        float64 // 0: no limit
	Seed        uint64
}

// ErrNaNLogits is why no token follows logits that hold NaN: the model
// went non-finite.
var ErrNaNLogits = errors.New("the logits hold NaN, so there is no distribution to draw from")

// Greedy says whether s takes the most likely token at each step.
func (s Sampler) Greedy() bool { return s.Temperature == 0 }

// Check refuses settings that mean nothing, naming the setting.
func (s Sampler) Check() error {
	switch {
	case math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0) || s.Temperature < 0:
		return fmt.Errorf("sampling: temperature %v: it must be a finite number of at least 0 (0 is greedy)", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("sampling: top-k %d: it must be at least 0 (0 keeps every token)", s.TopK)
	case !(s.TopP >= 0 && s.TopP <= 1):
		return fmt.Errorf("sampling: top-p %v: it must be in [0, 1] (0 and 1 keep every token)", s.TopP)
	case !(s.MinP >= 0 && s.MinP <= 1):
		return fmt.Errorf("sampling: min-p %v: it must be in [0, 1] (0 keeps every token)", s.MinP)
	case s.Greedy() && (s.TopK != 0 || s.TopP != 0 || s.MinP != 0 || s.Seed != 0):
		return fmt.Errorf("sampling: top-k, top-p, min-p and the seed choose what to draw and how, and temperature 0 draws nothing (it takes the most likely token): set a temperature above 0, 1 for the model's own distribution")
	}
	return nil
}

// Distribution returns the tokens s can draw after logits, most likely
// first, and their probabilities (which add up to 1). Logits holding NaN
// are an error; a greedy s gives the one most likely token.
func (s Sampler) Distribution(logits []float32) (ids []int32, probs []float64, err error) {
	return s.distribution(logits, true)
}

// distribution is Distribution, in id order where no filter needs the
// tokens sorted and ordered is false (a draw needs no order).
func (s Sampler) distribution(logits []float32, ordered bool) (ids []int32, probs []float64, err error) {
	if err := s.Check(); err != nil {
		return nil, nil, err
	}
	if len(logits) == 0 {
		return nil, nil, fmt.Errorf("sampling: no logits")
	}
	best := 0
	for i, l := range logits {
		if l != l {
			return nil, nil, fmt.Errorf("sampling: logit %d: %w", i, ErrNaNLogits)
		}
		if l > logits[best] {
			best = i
		}
	}
	if math.IsInf(float64(logits[best]), 0) {
		return nil, nil, fmt.Errorf("sampling: the largest logit is %v (token %d), so the probabilities are not defined", logits[best], best)
	}
	if s.Greedy() {
		return []int32{int32(best)}, []float64{1}, nil
	}
	// Weights relative to the most likely token, exp((l - max) / T) in
	// (0, 1], and their sum and count per power of two.
	top := float64(logits[best])
	weights := make([]float64, len(logits))
	var total float64
	var binMass [binCount]float64
	var binTokens [binCount]int
	for i, l := range logits {
		w := math.Exp((float64(l) - top) / s.Temperature)
		weights[i] = w
		total += w
		b := bin(w)
		binMass[b] += w
		binTokens[b]++
	}
	topP := s.TopP > 0 && s.TopP < 1
	if s.TopK > 0 || topP || ordered {
		// Sort only the bins that hold what top-k or top-p can keep: every
		// token of a bin is more likely than every token of the next.
		last := binCount - 1
		if s.TopK > 0 {
			n := 0
			for last = 0; last < binCount-1; last++ {
				if n += binTokens[last]; n >= s.TopK {
					break
				}
			}
		} else if topP && !ordered {
			// Past TopP by more than the sums here and the sorted sum below
			// can differ in rounding (n terms of at most total each).
			margin := float64(len(logits)) * 0x1p-52 * total
			var mass float64
			for last = 0; last < binCount-1; last++ {
				if mass += binMass[last]; mass >= s.TopP*total+margin {
					break
				}
			}
		}
		for i, w := range weights {
			if bin(w) <= last {
				ids = append(ids, int32(i))
			}
		}
		sortByLogit(ids, logits)
	} else {
		ids = make([]int32, len(logits))
		for i := range ids {
			ids[i] = int32(i)
		}
	}
	if s.TopK > 0 && s.TopK < len(ids) {
		ids = ids[:s.TopK]
	}
	probs = make([]float64, len(ids))
	for i, id := range ids {
		probs[i] = weights[id]
	}
	if topP {
		sum := total // what top-p takes its share of: every token, or top-k's
		if s.TopK > 0 {
			sum = 0
			for _, p := range probs {
				sum += p
			}
		}
		// The most likely tokens until they reach TopP of what is left.
		var before float64
		keep := len(ids)
		for i, p := range probs {
			if before >= s.TopP*sum {
				keep = i
				break
			}
			before += p
		}
		ids, probs = ids[:keep], probs[:keep]
	}
	// Min-p (weights are relative to the most likely token, which stays),
	// and tokens of weight 0 (a logit of -Inf, or one that underflowed),
	// which cannot be drawn, so are not listed.
	kept, sum := 0, 0.0
	for i, p := range probs {
		if p > 0 && p >= s.MinP {
			ids[kept], probs[kept] = ids[i], p
			sum += p
			kept++
		}
	}
	for i := range probs[:kept] {
		probs[i] /= sum
	}
	return ids[:kept], probs[:kept], nil
}

const binCount = 64

// bin is a weight's power of two: 0 for 1, k for [2^-k, 2^(1-k)), 63 for
// the smallest and for 0.
func bin(w float64) int {
	return min(1023-int(math.Float64bits(w)>>52&0x7ff), binCount-1)
}

// sortByLogit orders ids most likely first, ties by id, through one sort of
// packed keys (a vocabulary of 150,000 tokens sorts in a few milliseconds).
func sortByLogit(ids []int32, logits []float32) {
	keys := make([]uint64, len(ids))
	for i, id := range ids {
		v := logits[id]
		if v == 0 {
			v = 0 // -0 ties with +0
		}
		b := math.Float32bits(v)
		if b>>31 == 1 { // negative: larger magnitude is smaller
			b = ^b
		} else {
			b |= 1 << 31
		}
		keys[i] = uint64(^b)<<32 | uint64(uint32(id))
	}
	slices.Sort(keys)
	for i, k := range keys {
		ids[i] = int32(uint32(k))
	}
}

// Draws is a Sampler with its random stream: the tokens of one generation.
type Draws struct {
	s   Sampler
	rng *rand.Rand
}

// Start begins a generation's draws; two Starts of one Sampler draw alike.
func (s Sampler) Start() *Draws {
	return &Draws{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x5354524154410000))}
}

// errNoDraws is the error of a draw from a nil *Draws.
var errNoDraws = errors.New("sampling: a nil *Draws (use Sampler.Start)")

// Next draws the token that follows logits.
func (d *Draws) Next(logits []float32) (int32, error) {
	if d == nil {
		return -1, errNoDraws
	}
	ids, probs, err := d.s.distribution(logits, false)
	if err != nil {
		return -1, err
	}
	u := d.rng.Float64()
	for i, p := range probs {
		if u < p {
			return ids[i], nil
		}
		u -= p
	}
	return ids[len(ids)-1], nil // u within rounding of 1; every listed p > 0
}

// Pick is the token that follows a generation step's trace: the most
// likely after its last position (the prefill must Predict), or a draw from
// that position's logits. Logits holding NaN give ErrNaNLogits.
func (d *Draws) Pick(tr *trace.Trace) (int32, error) {
	if d == nil {
		return -1, errNoDraws
	}
	if tr == nil {
		return -1, errors.New("sampling: Pick of a nil trace")
	}
	if d.s.Greedy() {
		if len(tr.Predicted) == 0 {
			return -1, errors.New("sampling: the step predicted nothing (run it with Options.Predict)")
		}
		if id := tr.Predicted[len(tr.Predicted)-1]; id >= 0 {
			return id, nil
		}
		return -1, ErrNaNLogits
	}
	x, err := tr.Get(string(trace.Logits))
	if err != nil {
		return -1, err
	}
	vocab := x.Shape[len(x.Shape)-1]
	return d.Next(x.Data[len(x.Data)-vocab:])
}
