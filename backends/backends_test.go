package backends

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
)

func TestOpenNamesTheChoice(t *testing.T) {
	b, note, err := Open("cpu")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(b.Name(), "cpu ("))
	require.Equal(t, "using "+b.Name(), note)

	b, note, err = Open("auto")
	require.NoError(t, err)
	require.Contains(t, note, b.Name(), "the note says which backend runs")
	require.NoError(t, b.Close())

	_, _, err = Open("tpu")
	require.ErrorContains(t, err, `unknown backend "tpu"`)
}

// A device named by STRATA_DEVICE under auto was passed by without a word
// when it named nothing (or lavapipe), and the run went to the CPU.
func TestAutoTakesTheDeviceSTRATA_DEVICENames(t *testing.T) {
	for _, bad := range []string{"bogus", "-1"} {
		t.Setenv("STRATA_DEVICE", bad)
		_, _, err := Open("auto")
		require.ErrorContains(t, err, "STRATA_DEVICE="+bad+": vulkan: ")
		kind, err := resolve("auto")
		require.NoError(t, err)
		require.Equal(t, "vulkan", kind, "plans follow the device run uses")
	}
	t.Setenv("STRATA_DEVICE", "0")
	b, note, err := Open("auto")
	if errors.Is(err, vulkan.ErrNoDevice) {
		t.Skip("no Vulkan device (lavapipe counts)")
	}
	require.NoError(t, err)
	defer b.Close()
	require.IsType(t, &vulkan.Backend{}, b, "device 0, a CPU driver or not, as asked")
	require.Equal(t, "using "+b.Name(), note)
}

// STRATA_COOP2=on on a device without workgroup-scope cooperative matrices
// (lavapipe) is said to change nothing, rather than ignored in silence.
func TestOpenSaysWhenCoop2CannotRun(t *testing.T) {
	t.Setenv("STRATA_COOP2", "on")
	b, note, err := Open("vulkan")
	if errors.Is(err, vulkan.ErrNoDevice) {
		t.Skip("no Vulkan device (lavapipe counts)")
	}
	require.NoError(t, err)
	defer b.Close()
	if b.(*vulkan.Backend).Coop2() {
		require.Equal(t, "using "+b.Name(), note)
		return
	}
	require.Equal(t, "using "+b.Name()+" (STRATA_COOP2=on, but the device has no workgroup-scope cooperative matrices, VK_NV_cooperative_matrix2: the usual kernels run)", note)
}
