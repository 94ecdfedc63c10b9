package viz

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/recorder"
)

// A caption is drawn once, above the title, larger than it, and the
// figure grows to hold it rather than squeezing the plot.
func TestWithCaptionWritesAboveTheTitle(t *testing.T) {
	f, err := Bars([]string{"a", "b"}, []float64{1, -1}, "the title", "value")
	require.NoError(t, err)
	c := f.WithCaption("L3H0 ablated")
	require.Equal(t, f.Width, c.Width)
	require.Greater(t, c.Height, f.Height)
	require.Same(t, f, f.WithCaption(""), "no caption, the figure itself")

	var rec recorder.Canvas
	c.paint(&rec)
	at := map[string]vg.Point{}
	size := map[string]vg.Length{}
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok {
			require.NotContains(t, at, s.String, "%q drawn twice", s.String)
			at[s.String], size[s.String] = s.Point, s.Font.Size
		}
	}
	require.Contains(t, at, "L3H0 ablated")
	require.Greater(t, at["L3H0 ablated"].Y, at["the title"].Y, "above the title (y counts up)")
	require.Greater(t, size["L3H0 ablated"], size["the title"])

	long := strings.Repeat("a long caption ", 20)
	require.Greater(t, f.WithCaption(long).Width, f.Width, "widened to fit")
}

func TestHTMLWithCaption(t *testing.T) {
	h, err := TokenValues([]string{"a", "<b>"}, []float64{1, 2}, "loss")
	require.NoError(t, err)
	c := h.WithCaption("plain run <1>")
	require.True(t, strings.HasPrefix(c.Body, `<div class="strata-caption"`))
	require.Contains(t, c.Body, "plain run &lt;1&gt;</div>"+h.Body)
	require.Equal(t, "plain run <1>", c.Title)
}
