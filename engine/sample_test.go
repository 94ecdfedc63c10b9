package engine_test

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// referenceDistribution is the filters of engine.Sampler written from their
// definitions, on probabilities: softmax of logits/T over every token; keep
// the k most likely (ties to the lower id), renormalise; keep tokens while
// the mass of those before them is below p, renormalise; keep those of at
// least minP times the most likely's probability, renormalise.
func referenceDistribution(logits []float32, temp float64, k int, p, minP float64) ([]int32, []float64) {
	n := len(logits)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	prob := make([]float64, n)
	var z float64
	for i, l := range logits {
		prob[i] = math.Exp(float64(l) / temp)
		z += prob[i]
	}
	for i := range prob {
		prob[i] /= z
	}
	kept := order
	renorm := func() {
		var s float64
		for _, i := range kept {
			s += prob[i]
		}
		for _, i := range kept {
			prob[i] /= s
		}
	}
	if k > 0 && k < len(kept) {
		kept = kept[:k]
		renorm()
	}
	if p > 0 && p < 1 {
		var before float64
		for j, i := range kept {
			if before >= p {
				kept = kept[:j]
				break
			}
			before += prob[i]
		}
		renorm()
	}
	if minP > 0 {
		most := prob[kept[0]]
		var next []int
		for _, i := range kept {
			if prob[i] >= minP*most {
				next = append(next, i)
			}
		}
		kept = next
		renorm()
	}
	ids := make([]int32, len(kept))
	probs := make([]float64, len(kept))
	for j, i := range kept {
		ids[j], probs[j] = int32(i), prob[i]
	}
	return ids, probs
}

func TestSamplerDistributionMatchesItsDefinition(t *testing.T) {
	// By hand: softmax(2, 1, 0) = 0.665, 0.245, 0.090; top-p 0.7 keeps the
	// first two (0.665 < 0.7), renormalised to e/(e+1) and 1/(e+1).
	ids, probs, err := engine.Sampler{Temperature: 1, TopP: 0.7}.Distribution([]float32{1, 2, 0})
	require.NoError(t, err)
	require.Equal(t, []int32{1, 0}, ids)
	require.InDeltaSlice(t, []float64{math.E / (math.E + 1), 1 / (math.E + 1)}, probs, 1e-15)

	// Top-p within rounding of a cumulative sum, with empty powers of two
	// between the last tokens: the draw once left token 1 out.
	boundary := []float32{-1.0675546, -5.820199, -7.029344, -1.4705, -7.3936386, -2.8232694, -2.8191626, 0.5229998, -2.6416523}
	s := engine.Sampler{Temperature: 1, TopP: 0.9981805549585002}
	want, _, err := s.Distribution(boundary)
	require.NoError(t, err)
	got, _, err := engine.DrawDistribution(s, boundary)
	require.NoError(t, err)
	require.ElementsMatch(t, want, got)
	// -0 ties with +0, so the lower id wins; -Inf can never be drawn.
	ids, _, err = engine.Sampler{Temperature: 1, TopK: 1}.Distribution([]float32{float32(math.Copysign(0, -1)), 0, -1})
	require.NoError(t, err)
	require.Equal(t, []int32{0}, ids)
	ids, _, err = engine.Sampler{Temperature: 1}.Distribution([]float32{1, float32(math.Inf(-1)), 2})
	require.NoError(t, err)
	require.Equal(t, []int32{2, 0}, ids)

	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 600 {
		var logits []float32
		if trial%2 == 0 {
			// Few distinct values, so ties are common.
			logits = make([]float32, 1+rng.IntN(60))
			for i := range logits {
				logits[i] = float32(rng.IntN(12)-6) * 0.75
			}
		} else {
			// Spread over many powers of two of probability.
			logits = make([]float32, 1+rng.IntN(3000))
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 4)
			}
		}
		n := len(logits)
		s := engine.Sampler{Temperature: []float64{0.3, 1, 2.5}[rng.IntN(3)]}
		if rng.IntN(2) == 0 {
			s.TopK = rng.IntN(n + 3)
		}
		atBoundary := false
		if rng.IntN(2) == 0 {
			s.TopP = rng.Float64()
			if atBoundary = rng.IntN(2) == 0; atBoundary {
				// Within rounding of where a token's mass ends.
				_, probs, err := engine.Sampler{Temperature: s.Temperature, TopK: s.TopK}.Distribution(logits)
				require.NoError(t, err)
				j := rng.IntN(len(probs))
				var cum float64
				for _, p := range probs[:j+1] {
					cum += p
				}
				s.TopP = min(cum*(1+(rng.Float64()-0.5)*1e-15), 1)
			}
		}
		if rng.IntN(2) == 0 {
			s.MinP = rng.Float64() * 0.5
		}
		ids, probs, err := s.Distribution(logits)
		require.NoError(t, err)
		if !atBoundary { // there, whether the next token is in is rounding's call
			wantIDs, wantProbs := referenceDistribution(logits, s.Temperature, s.TopK, s.TopP, s.MinP)
			require.Equal(t, wantIDs, ids, "trial %d: %+v", trial, s)
			// Both sum the same terms in float64, in other orders: 1e-12 is a
			// thousand roundings of the largest probability.
			require.InDeltaSlice(t, wantProbs, probs, 1e-12, "trial %d: %+v", trial, s)
		}

		// What a draw uses: the same tokens and probabilities, sorted only
		// where a filter needs it.
		drawIDs, drawProbs, err := engine.DrawDistribution(s, logits)
		require.NoError(t, err)
		require.ElementsMatch(t, ids, drawIDs, "trial %d: %+v", trial, s)
		want := map[int32]float64{}
		for i, id := range ids {
			want[id] = probs[i]
		}
		for i, id := range drawIDs {
			require.InDelta(t, want[id], drawProbs[i], 1e-12, "trial %d: %+v", trial, s)
		}
	}
}

func TestDrawsFollowTheDistribution(t *testing.T) {
	logits := []float32{3, 1.5, 2, -1, 0.5, 2, -4, 1}
	s := engine.Sampler{Temperature: 0.9, TopK: 6, Seed: 11}
	ids, probs, err := s.Distribution(logits)
	require.NoError(t, err)
	const draws = 200000
	counts := map[int32]int{}
	d := s.Start()
	for range draws {
		id, err := d.Next(logits)
		require.NoError(t, err)
		counts[id]++
	}
	var chi2 float64
	for i, id := range ids {
		want := probs[i] * draws
		chi2 += (float64(counts[id]) - want) * (float64(counts[id]) - want) / want
		delete(counts, id)
	}
	require.Empty(t, counts, "tokens drawn that the filters removed")
	// 5 degrees of freedom: chi2 > 30 has probability 1.5e-5 for a right
	// sampler; one that ignored the temperature or top-k lands far above.
	require.Less(t, chi2, 30.0)

	// The same seed draws the same tokens; another seed, others.
	a, b, c := s.Start(), s.Start(), engine.Sampler{Temperature: 0.9, TopK: 6, Seed: 12}.Start()
	var same, differ int
	for range 50 {
		x, _ := a.Next(logits)
		y, _ := b.Next(logits)
		z, _ := c.Next(logits)
		if x == y {
			same++
		}
		if x != z {
			differ++
		}
	}
	require.Equal(t, 50, same)
	require.Greater(t, differ, 10)
}

func TestSamplerRefusesWhatMeansNothing(t *testing.T) {
	for _, c := range []struct {
		s    engine.Sampler
		want string
	}{
		{engine.Sampler{Temperature: -0.5}, "temperature -0.5"},
		{engine.Sampler{Temperature: math.Inf(1)}, "temperature +Inf"},
		{engine.Sampler{Temperature: math.NaN()}, "temperature NaN"},
		{engine.Sampler{Temperature: 1, TopK: -1}, "top-k -1"},
		{engine.Sampler{Temperature: 1, TopP: 1.5}, "top-p 1.5"},
		{engine.Sampler{Temperature: 1, MinP: -0.1}, "min-p -0.1"},
		{engine.Sampler{TopP: 0.9}, "set a temperature above 0"},
	} {
		require.ErrorContains(t, c.s.Check(), c.want)
	}
	_, err := engine.Sampler{Temperature: 1}.Start().Next([]float32{1, float32(math.NaN()), 2})
	require.ErrorIs(t, err, engine.ErrNaNLogits)
	require.ErrorContains(t, err, "logit 1")

	// Greedy picks the step's prediction and draws nothing.
	tr := trace.New()
	tr.Predicted = []int32{4, 9}
	id, err := engine.Sampler{}.Start().Pick(tr)
	require.NoError(t, err)
	require.Equal(t, int32(9), id)
	tr.Predicted = []int32{-1}
	_, err = engine.Sampler{}.Start().Pick(tr)
	require.ErrorIs(t, err, engine.ErrNaNLogits)
}

// A vocabulary of Qwen's size: sorting it is the cost of top-k and top-p.
func BenchmarkSamplerTopP(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	for _, s := range []engine.Sampler{{Temperature: 1}, {Temperature: 0.8, TopP: 0.95}, {Temperature: 0.8, TopK: 40}} {
		b.Run(name(s), func(b *testing.B) {
			d := s.Start()
			for b.Loop() {
				if _, err := d.Next(logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func name(s engine.Sampler) string {
	switch {
	case s.TopP > 0:
		return "top-p"
	case s.TopK > 0:
		return "top-k"
	}
	return "temperature"
}

// Issue 47.12: Pick of a nil trace is an error, not a nil dereference.
func TestPickOfANilTrace(t *testing.T) {
	_, err := engine.Sampler{}.Start().Pick(nil)
	require.EqualError(t, err, "sampling: Pick of a nil trace")
	_, err = engine.Sampler{Temperature: 1}.Start().Pick(nil)
	require.EqualError(t, err, "sampling: Pick of a nil trace")
}
