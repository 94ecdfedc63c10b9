package vulkan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/internal/gputest"
	"github.com/stratalab/strata/gpu/vulkan"
	"github.com/stratalab/strata/model"
)

// Two logical devices opened on one physical device, as two tiers: a split
// run equals the run on one of them bit for bit, over random placements,
// captures and interventions.
func TestTwoVulkanTiersEqualOne(t *testing.T) {
	first := backend(t)
	second, err := vulkan.Open(vulkan.Options{Validation: shared.validating})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Close()) }()
	cases := 4
	if testing.Short() {
		cases = 2
	}
	for _, shape := range []string{"tiny-qwen3", "tiny-gpt2", "tiny-qwen3moe"} {
		t.Run(shape, func(t *testing.T) {
			m, err := model.Random(model.Shapes[shape], gguf.Q8_0, 5)
			require.NoError(t, err)
			gputest.CheckTiers(t, [2]gpu.Backend{first, second}, m, 13, cases)
		})
	}
}

func TestCancelOnSecondVulkanTier(t *testing.T) {
	first := backend(t)
	second, err := vulkan.Open(vulkan.Options{Validation: shared.validating})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Close()) }()
	m, err := model.Random(model.Shapes["tiny-qwen3"], gguf.Q8_0, 2)
	require.NoError(t, err)
	gputest.CheckTierCancel(t, [2]gpu.Backend{first, second}, m)
}
