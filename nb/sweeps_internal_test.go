package nb

import (
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/trace"
)

// A sweep whose metric is NaN or infinite in some cells keeps them and says
// how many there are and which came first; a baseline run that is not
// finite is named as such, not blamed on a cell.
func TestSweepsSayWhichCellsAreNotFinite(t *testing.T) {
	m := Open("", Backend("cpu"))
	defer func(w io.Writer) { warnings = w }(warnings)
	var said strings.Builder
	warnings = &said
	clean, corrupt := "func add(a, b int) int {\n", "func sub(a, b int) int {\n"
	logitDiff := m.LogitDiff("\n", " ")
	// bad makes the metric of the given runs, counted from 1, NaN or ±Inf.
	bad := func(runs map[int]float64) func(*trace.Trace) float64 {
		n := 0
		return func(tr *trace.Trace) float64 {
			n++
			if v, ok := runs[n]; ok {
				return v
			}
			return logitDiff(tr)
		}
	}
	layers, heads := m.Config().Layers, m.Config().Heads
	ids, err := m.tokens(corrupt)
	require.NoError(t, err)
	T := len(ids)
	// said is what was said since the last call, which it forgets.
	saidNow := func() string { s := said.String(); said.Reset(); return s }
	cells := func(name string, n, total int, first string) string {
		return fmt.Sprintf("nb.%s: %d of %d cells are not finite; the first is %s. To see why, take that cell's run: %s\n", name, n, total, first, findHow)
	}

	// Run 1 is the plain run; runs 2, 3, ... ablate L0H0, L0H1, ...
	got := m.AblateHeads(clean, bad(map[int]float64{3: math.NaN(), heads + 4: math.Inf(1)}), ZeroAblation)
	require.True(t, math.IsNaN(got[0][1]))
	require.True(t, math.IsInf(got[1][2], 1))
	require.Equal(t, cells("AblateHeads", 2, layers*heads, "layer 0, head 1 (NaN)"), saidNow())
	m.AblateHeads(clean, bad(map[int]float64{1: math.NaN()}), ZeroAblation)
	require.Equal(t, "nb.AblateHeads: the plain run's metric is NaN, so is every cell, a difference from it. To see why, "+findHow+"\n", saidNow())

	// Runs 1 and 2 are the clean and corrupted baselines, then a run per
	// head (layer by layer) and, for PatchHeadPositions, per position.
	p := m.PatchHeads(clean, corrupt, bad(map[int]float64{2 + heads + 2 + 1: math.Inf(-1)}))
	require.True(t, math.IsInf(p.Patched[1][2], -1))
	require.Equal(t, cells("PatchHeads", 1, layers*heads, "layer 1, head 2 (-Inf)"), saidNow())
	m.PatchHeads(clean, corrupt, bad(map[int]float64{2: math.NaN()}))
	require.Equal(t, "nb.PatchHeads: the corrupted run's metric is NaN, so the result cannot be normalised. To see why, "+findHow+"\n", saidNow())

	p = m.PatchHeadPositions(clean, corrupt, bad(map[int]float64{2 + (heads+2)*T + 3 + 1: math.NaN()}))
	require.True(t, math.IsNaN(p.Patched[heads+2][3]))
	require.Equal(t, cells("PatchHeadPositions", 1, layers*heads*T, "layer 1, head 2, position 3 (NaN)"), saidNow())

	// PatchResid takes its baselines first too: run 3 patches layer 0,
	// position 0.
	m.PatchResid(clean, corrupt, bad(map[int]float64{2 + T + 1 + 1: math.Inf(-1)}))
	require.Equal(t, cells("PatchResid", 1, layers*T, "layer 1, position 1 (-Inf)"), saidNow())

	// A finite sweep says nothing.
	m.PatchHeads(clean, corrupt, logitDiff)
	require.Empty(t, saidNow())
}
