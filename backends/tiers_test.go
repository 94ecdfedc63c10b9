package backends

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model/synth"
)

func TestEngineOverTiers(t *testing.T) {
	m, err := synth.Random(synth.Shapes["tiny-qwen3"], gguf.Q8_0, 1)
	require.NoError(t, err)
	q := engine.PlanRequest{Capacity: 64, Tokens: 64}

	e, note, err := Engine(m, "cpu", "0:0-1,0:2-3", q)
	require.NoError(t, err)
	require.Len(t, e.Tiers(), 2)
	require.Equal(t, []int{0, 0, 1, 1}, e.Placement().Layers)
	// The note gives the placement back as it was given: devices, not tiers.
	require.Contains(t, note, "using 2 tiers of cpu (--placement 0:0-1,0:2-3):\ndevice 0: tier 0 (embedding, layers 0-1) needs ")

	e, _, err = Engine(m, "cpu", "auto", q)
	require.NoError(t, err)
	require.Len(t, e.Tiers(), 1, "the host holds a tiny model whole")

	_, _, err = Engine(m, "cpu", "0:0-1,1:2-3", q)
	require.EqualError(t, err, "tier 1 is on device 1, but the cpu backend has only device 0 (host memory)")

	// A KV cache no host has: refused, saying what is short where, before
	// anything is allocated.
	_, _, err = Engine(m, "cpu", "0:0-1,0:2-3", engine.PlanRequest{Capacity: 1 << 30, Tokens: 1})
	require.ErrorIs(t, err, engine.ErrDoesNotFit)
	require.ErrorContains(t, err, "device 0 (host memory) has ")
	require.ErrorContains(t, err, "tier 0 (embedding, layers 0-1) needs 2048.00 GiB")
	require.ErrorContains(t, err, "and tier 1 (layers 2-3, head) needs")

	// Without --placement the engine is made (nb asks for the whole
	// context, and its caches start small), and a command that allocates
	// the request at once checks it: "fatal error: out of memory" from the
	// runtime otherwise.
	huge := engine.PlanRequest{Capacity: 1 << 30, Tokens: 1}
	e, _, err = Engine(m, "cpu", "", huge)
	require.NoError(t, err)
	err = HostFits(e, huge)
	require.ErrorContains(t, err, "host memory is short: this needs about 4096.00 GiB")
	require.ErrorContains(t, err, "(KV cache 4096.00 GiB for 1073741824 positions, scratch ")
	require.NoError(t, HostFits(e, q))

	_, _, err = Engine(m, "tpu", "auto", q)
	require.ErrorContains(t, err, `unknown backend "tpu"`)
}

// A plan for Vulkan devices counts the weights as Vulkan holds them (Q4_K
// as 4-bit codes, 4/3 of its file size); one for the CPU as the file maps
// them.
func TestPlanCountsTheBackendsWeights(t *testing.T) {
	m, err := synth.Random(synth.Shapes["tiny-qwen3"], gguf.Q4_K, 1)
	require.NoError(t, err)
	q := engine.PlanRequest{Capacity: 16, Tokens: 16}
	file := engine.Needs(m, engine.OneTier(m.Layers), q)[0].Weights
	q.WeightBytes = vulkan.WeightBytes
	onVulkan := engine.Needs(m, engine.OneTier(m.Layers), q)[0].Weights
	require.Greater(t, onVulkan, file, "Q4_K's codes are larger than its blocks")

	_, plan, _, err := Plan(m, "cpu", "", engine.PlanRequest{Capacity: 16, Tokens: 16})
	require.NoError(t, err)
	require.Equal(t, file, plan.Needs[0].Weights)
	kind, plan, _, err := Plan(m, "vulkan", "", engine.PlanRequest{Capacity: 16, Tokens: 16})
	if err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	require.Equal(t, "vulkan", kind)
	require.Equal(t, onVulkan, plan.Needs[0].Weights)
}
