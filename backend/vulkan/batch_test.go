package vulkan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
			enginetest.CheckBatch(t, b, m, pointTol)
		})
	}
}
