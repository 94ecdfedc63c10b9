package vulkan

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every tile the GEMM may take holds matmul_coop.comp's assumptions, which
// only a device with cooperative matrices would otherwise break on, and is
// one of coopTiles, which the precision test runs on such a device.
func TestCoopTilesFitTheKernel(t *testing.T) {
	for _, exact := range []bool{false, true} {
		for _, splitW := range []bool{false, true} {
			for _, first := range []bool{false, true} {
				require.Contains(t, coopTiles(), usualCoopTile(exact, splitW, first), "exact %v, split %v, first %v", exact, splitW, first)
			}
		}
	}
	require.Contains(t, coopTiles(), smallCoopTile())
	for _, c := range coopTiles() {
		const lanes, subgroups = 256, 8
		chunks := c.bk / 8 // uvec4s of 8 halves per tile row and k step
		require.Contains(t, []int{32, 64}, c.bk, c.String())
		require.True(t, c.tm >= 1 && c.tm <= 4 && c.tn >= 1 && c.tn <= 4, "%v: at most 4 x 4 accumulators", c)
		require.Zero(t, subgroups%c.wgm, "%v: the subgroups stand in a grid", c)
		require.Zero(t, c.bn()*chunks%lanes, "%v: every lane loads as many of B's chunks", c)
		require.GreaterOrEqual(t, c.bn()*(chunks+1), 64*subgroups, "%v: Bhi stages 1 KiB of results per subgroup", c)
		require.LessOrEqual(t, len(c.spec(true, 1, 1, 1, true)), maxSpec, "%v: the pipeline key holds every constant", c)
	}
}
