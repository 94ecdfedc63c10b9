package enginetest

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// BatchBenchShape is the model the batch benchmarks run unless
// STRATA_BATCH_BENCH_SHAPE names one of synth.Shapes (bonsai-1.7b, say, on
// a GPU): a qwen3 small enough for a shared CPU, wide enough that the
// products, not the per-call work, take most of a prefill.
var BatchBenchShape = synth.Shape{Arch: "qwen3", Layers: 4, DModel: 512, FFN: 1536, Heads: 8, KVHeads: 4, HeadDim: 64,
	Vocab: 4096, Context: 512, Theta: 1e6}

// BatchBenchModel generates the batch benchmarks' model with random Q8_0
// weights (Q1_0_G128 for a named bonsai shape, as the published files).
func BatchBenchModel(b *testing.B) *model.Model {
	shape, typ := BatchBenchShape, gguf.Q8_0
	if name := os.Getenv("STRATA_BATCH_BENCH_SHAPE"); name != "" {
		s, ok := synth.Shapes[name]
		if !ok {
			b.Fatalf("STRATA_BATCH_BENCH_SHAPE=%q is not one of %v", name, synth.ShapeNames())
		}
		shape, typ = s, gguf.Q1_0_G128
	}
	m, err := synth.Random(shape, typ, 1)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchBatch times prompts prompts of tokens tokens each run as one batch
// (Session.PrefillBatch) and one at a time in a session (Reset, Prefill), no
// capture, each prompt's last logits, alternately in one loop so that both
// see the same machine. It reports each one's median and the median ratio
// of the two (singles/batch: the batch's speed-up).
func BenchBatch(b *testing.B, be backend.Backend, m *model.Model, prompts, tokens int) {
	e, err := engine.NewEngine(m, be)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([][]int32, prompts)
	for i := range batch {
		batch[i] = make([]int32, tokens)
		for j := range batch[i] {
			batch[i][j] = int32((i*7919 + j*97) % m.Vocab)
		}
	}
	s, err := e.NewSession(tokens)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// The batch's own session, so that each keeps its buffers, as a sweep
	// over batches would.
	bs, err := e.NewSession(tokens)
	if err != nil {
		b.Fatal(err)
	}
	defer bs.Close()
	ctx, o := context.Background(), engine.Options{}
	singles := func() time.Duration {
		start := time.Now()
		for _, p := range batch {
			if err := s.Reset(); err != nil {
				b.Fatal(err)
			}
			tr, err := s.Prefill(ctx, p, o)
			if err != nil {
				b.Fatal(err)
			}
			tr.Close()
		}
		return time.Since(start)
	}
	batched := func() time.Duration {
		start := time.Now()
		trs, err := bs.PrefillBatch(ctx, batch, o)
		if err != nil {
			b.Fatal(err)
		}
		for _, tr := range trs {
			tr.Close()
		}
		return time.Since(start)
	}
	singles() // warm-up: the session's buffers, the backend's pipelines
	batched()
	var one, all []time.Duration
	for b.Loop() {
		one = append(one, singles())
		all = append(all, batched())
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	ratios := make([]float64, len(all))
	for i := range all {
		ratios[i] = float64(one[i]) / float64(all[i])
	}
	slices.Sort(ratios)
	n := float64(prompts * tokens)
	b.ReportMetric(n/median(one).Seconds(), "singles-tok/s")
	b.ReportMetric(n/median(all).Seconds(), "batch-tok/s")
	b.ReportMetric(ratios[len(ratios)/2], "singles/batch")
}
