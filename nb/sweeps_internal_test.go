package nb

import (
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/stratalab/strata/gpu/trace"
	"github.com/stretchr/testify/require"
)

// A sweep whose metric is NaN or infinite in some cells keeps them and says
// how many there are and which came first.
func TestSweepsSayWhichCellsAreNotFinite(t *testing.T) {
	m := MustOpen("", "cpu")
	defer func(w io.Writer) { warnings = w }(warnings)
	var said strings.Builder
	warnings = &said
	clean, corrupt := "func add(a, b int) int {\n", "func sub(a, b int) int {\n"
	logitDiff := m.LogitDiff("\n", " ")
	// bad makes the metric of the given runs, counted from 1, NaN or +Inf.
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
	layers, heads := m.Model.Layers, m.Model.Heads
	ids, err := m.tokens(corrupt)
	require.NoError(t, err)
	T := len(ids)

	// Run 1 is the plain run; runs 2, 3, ... ablate L0H0, L0H1, ...
	got := m.AblateHeads(clean, ZeroAblation, bad(map[int]float64{3: math.NaN(), heads + 3: math.Inf(1)}))
	require.True(t, math.IsNaN(got[0][1]))
	require.True(t, math.IsInf(got[1][1], 1))
	require.Equal(t, "nb.AblateHeads: the metric is not finite in 2 of "+fmt.Sprint(layers*heads)+" cells (the first, layer 0, head 1: NaN): the model or the metric went non-finite there; a trace of that run with nb.Capture(\"*\") names the first point that did\n", said.String())

	// Runs 1 and 2 are the clean and corrupted baselines.
	said.Reset()
	p := m.PatchHeadPositions(clean, corrupt, bad(map[int]float64{2 + T*2 + 5 + 1: math.NaN()}))
	require.True(t, math.IsNaN(p.Patched[2][5]))
	require.Contains(t, said.String(), fmt.Sprintf("nb.PatchHeadPositions: the metric is not finite in 1 of %d cells", layers*heads*T))
	require.Contains(t, said.String(), "(the first, layer 0, head 2, position 5: NaN)")

	// PatchResid takes no baselines: run 1 patches layer 0, position 0.
	said.Reset()
	m.PatchResid(clean, corrupt, bad(map[int]float64{T + 1 + 1: math.Inf(-1)}))
	require.Contains(t, said.String(), fmt.Sprintf("nb.PatchResid: the metric is not finite in 1 of %d cells", layers*T))
	require.Contains(t, said.String(), "(the first, layer 1, position 1: -Inf)")

	// A finite sweep says nothing.
	said.Reset()
	m.PatchHeads(clean, corrupt, logitDiff)
	require.Empty(t, said.String())
}
