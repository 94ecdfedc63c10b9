package nb

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
