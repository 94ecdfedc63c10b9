package vulkan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
)

func TestParseClamp(t *testing.T) {
	for s, want := range map[string]vulkan.Clamp{"": vulkan.ClampNone, "none": vulkan.ClampNone, "Apple": vulkan.ClampApple} {
		c, err := vulkan.ParseClamp(s)
		require.NoError(t, err)
		require.Equal(t, want, c)
	}
	_, err := vulkan.ParseClamp("metal")
	require.EqualError(t, err, `vulkan: unknown device clamp "metal" (want none or apple)`)
}

// Issue 47.14: the Apple clamp opens the device without cooperative
// matrices and says so in its name; an unknown clamp is refused.
func TestOptionsClamp(t *testing.T) {
	testBackend(t) // skips where there is no Vulkan device
	b, err := vulkan.Open(vulkan.Options{Clamp: vulkan.ClampApple})
	require.NoError(t, err)
	require.Contains(t, b.Name(), "clamped to an apple-like device")
	require.False(t, vulkan.Coop(b))
	shared, subgroup := vulkan.PlannedLimits(b)
	require.LessOrEqual(t, shared, 32<<10)
	require.EqualValues(t, 32, subgroup)
	require.NoError(t, b.Close())
	_, err = vulkan.Open(vulkan.Options{Clamp: 7})
	require.EqualError(t, err, "vulkan: Options.Clamp is Clamp(7), not a known device")
}
