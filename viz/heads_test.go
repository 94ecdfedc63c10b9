package viz

import (
	"bytes"
	"image/png"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeadHeatmapLabelsLayersAndHeads(t *testing.T) {
	require.Equal(t, []string{"L0", "L1", "L2"}, LayerLabels(3))
	require.Equal(t, []string{"H0", "H1"}, HeadLabels(2))
	f, err := HeadHeatmap([][]float64{{1, -1}, {0.5, 0}}, "effect per head")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, f.Encode(&buf, "png"))
	img, err := png.Decode(&buf)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 100)

	_, err = HeadHeatmap(nil, "x")
	require.ErrorContains(t, err, "no layers")
	_, err = HeadHeatmap([][]float64{{1, 2}, {3}}, "x")
	require.ErrorContains(t, err, "row 1 has 1 values")
}

func TestXYRefusesMismatchedSeries(t *testing.T) {
	f, err := XY("sweep", "alpha", "metric", []float64{0, 1, 2}, []float64{-3, 0, 4})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, f.Encode(&buf, "png"))
	_, err = XY("sweep", "alpha", "metric", []float64{0, 1}, []float64{1})
	require.ErrorContains(t, err, "2 x values and 1 y values")
	_, err = XY("sweep", "alpha", "metric", nil, nil)
	require.Error(t, err)
}
