package vulkan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/internal/niltest"
)

// The sweep of issue 47 over nil: every exported function of the Vulkan
// backend, and every exported method of its Backend on a new one, given
// nil and zero arguments (and -1 for integers), returns: an error or a
// zero result, never a panic.
func TestEveryExportedCallTakesNil(t *testing.T) {
	testBackend(t) // skips without a device
	open := func() any {
		b, err := vulkan.Open(vulkan.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		return b
	}
	niltest.Sweep(t, "vulkan", niltest.Exported(t, "."), map[string]any{
		"Open": vulkan.Open, "ParseClamp": vulkan.ParseClamp, "Devices": vulkan.Devices,
		"Chosen": vulkan.Chosen, "DefaultTuning": vulkan.DefaultTuning, "WeightBytes": vulkan.WeightBytes,
	}, map[string][]func() any{
		"Backend": {open},
		"Clamp":   {func() any { return vulkan.Clamp(0) }, func() any { return vulkan.ClampApple }},
	}, niltest.Policy{Prefix: "vulkan: "})
}
