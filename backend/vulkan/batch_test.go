package vulkan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
)

// A batch on the GPU equals its prompts run one at a time there within
// pointTol: the products of the packed rows may take other tiles than
// those of one prompt's, which sum in another order.
func TestBatchEqualsPromptsOneAtATime(t *testing.T) {
	b := testBackend(t)
	for _, shape := range synth.ShapeNames() {
		if synth.Shapes[shape].Layers > 6 { // the tiny ones
			continue
		}
		t.Run(shape, func(t *testing.T) {
			m, err := synth.Random(synth.Shapes[shape], gguf.Q8_0, 11)
			require.NoError(t, err)
			e, err := engine.NewEngine(m, b)
			require.NoError(t, err)
			enginetest.CheckBatch(t, e, pointTol)
		})
	}
}

// BenchmarkBatch16x128 compares a batch of 16 prompts of 128 tokens with 16
// single prefills on the GPU (see enginetest.BenchBatch); on a real device,
// STRATA_BATCH_BENCH_SHAPE=bonsai-1.7b times the default model's shape:
// go test ./backend/vulkan -run=^$ -bench=Batch16x128 -benchtime=3x
func BenchmarkBatch16x128(b *testing.B) {
	be := benchBackend(b)
	enginetest.BenchBatch(b, be, enginetest.BatchBenchModel(b), 16, 128)
}
