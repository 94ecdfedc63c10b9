package viz

import "fmt"

// HeadHeatmap draws one value per head, [layer][head], with layers as rows
// (L0 at the bottom) and heads as columns, on a scale centred at 0: for
// ablation effects, head patching and direct logit attribution per head;
// from 0 when no value is negative, as composition scores. The colour bar
// is labelled barLabel (at most one), or "value".
func HeadHeatmap(scores [][]float64, title string, barLabel ...string) (*Figure, error) {
	if len(scores) == 0 {
		return nil, fmt.Errorf("viz: HeadHeatmap: no layers")
	}
	return PatchingHeatmap(scores, LayerLabels(len(scores)), HeadLabels(len(scores[0])), title, barLabel...)
}

// LayerLabels are "L0".."L<n-1>", the row labels of per-layer figures;
// none for n <= 0, as HeadLabels and LayerHeadLabels.
func LayerLabels(n int) []string { return indexLabels("L", n) }

// LayerHeadLabels are "L0H0".."L<layers-1>H<heads-1>", layer by layer:
// the row labels of a result with a row per head (nb.PatchHeadPositions).
func LayerHeadLabels(layers, heads int) []string {
	if layers <= 0 || heads <= 0 {
		return nil
	}
	out := make([]string, 0, layers*heads)
	for l := range layers {
		for h := range heads {
			out = append(out, fmt.Sprintf("L%dH%d", l, h))
		}
	}
	return out
}

// HeadLabels are "H0".."H<n-1>".
func HeadLabels(n int) []string { return indexLabels("H", n) }

func indexLabels(prefix string, n int) []string {
	if n <= 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
