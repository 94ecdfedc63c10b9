package nb

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/trace"
)

// A batch patching sweep gives each prompt what PatchHeads gives it alone,
// bit for bit on the CPU, and their means; long, it reports its progress.
func TestPatchHeadsBatchEqualsPatchHeads(t *testing.T) {
	m := Open("", Backend("cpu"))
	defer m.Close()
	// Which parameter a call copies: the clean prompts name key, s and
	// line; the corrupted ones val, n and file.
	call := func(name string) string { return "func f(" + name + " T) error {\n\treturn g(" }
	goods, bads := []string{"key", "s", "line"}, []string{"val", "n", "file"}
	var clean, corrupt []string
	for i := range goods {
		clean, corrupt = append(clean, call(goods[i])), append(corrupt, call(bads[i]))
	}
	metrics := m.LogitDiffs(goods, bads)
	var out bytes.Buffer
	defer func(w io.Writer, a time.Duration) { progressOut, progressAfter = w, a }(progressOut, progressAfter)
	progressOut, progressAfter = &out, 0
	got := m.PatchHeadsBatch(clean, corrupt, metrics)
	require.Len(t, got.Prompts, len(clean))
	var cleanMean float64
	for i := range clean {
		want := m.PatchHeads(clean[i], corrupt[i], metrics[i])
		require.Equal(t, want.Clean, got.Prompts[i].Clean, "prompt %d", i)
		require.Equal(t, want.Corrupt, got.Prompts[i].Corrupt, "prompt %d", i)
		require.Equal(t, want.Patched, got.Prompts[i].Patched, "prompt %d", i)
		cleanMean += want.Clean / float64(len(clean))
		for l := range want.Patched {
			for h := range want.Patched[l] {
				require.InDelta(t, (got.Prompts[0].Patched[l][h]+got.Prompts[1].Patched[l][h]+got.Prompts[2].Patched[l][h])/3, got.Patched[l][h], 1e-12)
			}
		}
	}
	require.InDelta(t, cleanMean, got.Clean, 1e-12)
	require.NotEqual(t, got.Clean, got.Corrupt, "the corruption changes the metric")
	cells := m.Engine().Model.Layers * m.Engine().Model.Heads
	require.Contains(t, out.String(), "nb.PatchHeadsBatch: ████████████████████ ")
	require.Contains(t, out.String(), fmt.Sprintf("%d/%d (", cells, cells))

	require.PanicsWithError(t, "nb.PatchHeadsBatch: clean prompt 1 has 11 tokens, its corrupted one 3; patching needs equal lengths", func() {
		m.PatchHeadsBatch(clean[:2], []string{corrupt[0], "x y"}, metrics[:1])
	})
	require.PanicsWithError(t, "nb.PatchHeadsBatch: 3 metrics for 2 prompts: give one for all, or one per prompt", func() {
		m.PatchHeadsBatch(clean[:2], corrupt[:2], metrics)
	})
	require.PanicsWithError(t, "nb.LogitDiffs: 3 good tokens and 2 bad ones: give one of each for every prompt", func() {
		m.LogitDiffs(goods, bads[:2])
	})
}

// HeadMeans is each head's hook_z averaged over every position of every
// prompt of the corpus, as a float64 sum over single prefills gives it
// (to float32's rounding of the mean); its Ablate puts that mean in every
// row of the head, and AblateHeadsWith sweeps it.
func TestHeadMeansOverACorpus(t *testing.T) {
	m := Open("", Backend("cpu"))
	defer m.Close()
	corpus := []string{"func main() {\n\tfmt.Println(", "x := 1", "if err != nil {\n\treturn err\n}"}
	hm := m.HeadMeans(corpus)
	c := &m.engine().Model.Config
	require.Len(t, hm, c.Layers)
	const layer, head = 2, 5
	point := trace.LayerPoint(layer, trace.AttnZ)
	want := make([]float64, c.HeadDim)
	rows := 0
	for _, p := range corpus {
		z := Must(m.Prefill(p, Capture(point)).Get(point))
		for r := range z.Shape[0] {
			for j := range want {
				want[j] += float64(z.Data[(r*c.Heads+head)*c.HeadDim+j])
			}
		}
		rows += z.Shape[0]
	}
	for j := range want {
		require.InDelta(t, want[j]/float64(rows), float64(hm[layer][head][j]), 1e-6*(1+math.Abs(want[j]/float64(rows))), "element %d", j)
	}

	prompt := "for i := 0; i < n; i++ {"
	z := Must(m.Prefill(prompt, Capture(point), Hooks(hm.Ablate(layer, head))).Get(point))
	for r := range z.Shape[0] {
		require.Equal(t, hm[layer][head], z.Data[(r*c.Heads+head)*c.HeadDim:(r*c.Heads+head+1)*c.HeadDim], "row %d is the mean", r)
	}
	metric := m.LogitDiff("+", "-")
	sweep := m.AblateHeadsWith(prompt, metric, hm.Ablate)
	base := metric(m.Prefill(prompt))
	require.Equal(t, metric(m.Prefill(prompt, Hooks(hm.Ablate(layer, head))))-base, sweep[layer][head])
	_, err := m.TryPrefill(prompt, Hooks(hm.Ablate(1, 9)))
	require.ErrorContains(t, err, "nb.HeadMeans.Ablate: layer 1 head 9 is outside the means' 4 layers of 8 heads")
}
