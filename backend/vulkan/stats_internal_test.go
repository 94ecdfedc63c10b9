package vulkan

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The statistic struct is written by hand (its value is a union): its
// layout must be VkPipelineExecutableStatisticKHR's in C (vulkan_core.h:
// a 4-byte sType and 8-byte pNext, two 256-byte strings, a 4-byte format
// enum and an 8-byte union, 8-byte aligned).
func TestStatisticStructIsLaidOutAsInC(t *testing.T) {
	var s pipelineExecutableStatisticKHR
	require.EqualValues(t, 544, unsafe.Sizeof(s))
	require.EqualValues(t, 8, unsafe.Offsetof(s.PNext))
	require.EqualValues(t, 16, unsafe.Offsetof(s.Name))
	require.EqualValues(t, 272, unsafe.Offsetof(s.Description))
	require.EqualValues(t, 528, unsafe.Offsetof(s.Format))
	require.EqualValues(t, 536, unsafe.Offsetof(s.Value))
}
