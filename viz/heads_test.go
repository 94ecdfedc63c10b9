package viz

import (
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/recorder"
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
	f, err := XY([]float64{0, 1, 2}, []float64{-3, 0, 4}, "sweep", "alpha", "metric")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, f.Encode(&buf, "png"))
	_, err = XY([]float64{0, 1}, []float64{1}, "sweep", "alpha", "metric")
	require.ErrorContains(t, err, "2 x values and 1 y values")
	_, err = XY(nil, nil, "sweep", "alpha", "metric")
	require.Error(t, err)

	// x nil is 0, 1, ...: the same figure as given those.
	var indexed, given bytes.Buffer
	require.NoError(t, must(XY(nil, []float64{-3, 0, 4}, "sweep", "alpha", "metric")).Encode(&indexed, "svg"))
	require.NoError(t, must(XY([]float64{0, 1, 2}, []float64{-3, 0, 4}, "sweep", "alpha", "metric")).Encode(&given, "svg"))
	require.Equal(t, given.String(), indexed.String())
}

// Bars puts each label's bar on its own row, in order from the top, on the
// side of zero its sign says: checked on the drawn pixels.
func TestBarsDrawEachValueOnItsRowAndSide(t *testing.T) {
	f, err := Bars([]string{"up", "down", "up again"}, []float64{2, -1, 1}, "dla", "logit")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, f.Encode(&buf, "png"))
	img, err := png.Decode(&buf)
	require.NoError(t, err)
	// Each colour's extent: blue rows and columns, red rows and columns.
	type extent struct{ minX, maxX, minY, maxY, n int }
	find := func(want func(r, g, b uint32) bool) extent {
		e := extent{minX: 1 << 30, minY: 1 << 30}
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if want(r>>8, g>>8, bl>>8) {
					e.minX, e.maxX, e.minY, e.maxY, e.n = min(e.minX, x), max(e.maxX, x), min(e.minY, y), max(e.maxY, y), e.n+1
				}
			}
		}
		return e
	}
	blue := find(func(r, g, b uint32) bool { return b > 150 && r < 60 })
	red := find(func(r, g, b uint32) bool { return r > 160 && g < 60 && b < 60 })
	require.Positive(t, red.n, "positive bars are red")
	require.Positive(t, blue.n, "negative bars are blue")
	require.Less(t, blue.maxX, red.minX+2, "the negative bar lies left of zero, the positive ones right")
	require.Greater(t, blue.minY, red.minY, "the blue bar is below the first red one")
	require.Less(t, blue.maxY, red.maxY, "and above the last")

	f, err = Bars([]string{"a", "b"}, []float64{1, 2}, "dla", "logit")
	require.NoError(t, err)
	buf.Reset()
	require.NoError(t, f.Encode(&buf, "png"))
	img, err = png.Decode(&buf)
	require.NoError(t, err)
	require.Zero(t, find(func(r, g, b uint32) bool { return b > 150 && r < 60 }).n, "no negative value, no blue")

	_, err = Bars([]string{"a"}, []float64{1, 2}, "x", "y")
	require.ErrorContains(t, err, "1 labels and 2 values")
	_, err = Bars([]string{"a"}, []float64{math.NaN()}, "x", "y")
	require.ErrorContains(t, err, "a is NaN")
}

// Lines draws each series in its own colour, named in the legend, and a
// dashed grey line at zero where the values change sign (the steering
// plot's flip had nothing to read it against).
func TestLinesNameEachSeriesAndMarkZero(t *testing.T) {
	x := []float64{0, 1, 2, 3}
	fig, err := Lines(x, []Series{{"clean", []float64{0.1, 0.2, 0.6, 0.9}}, {"corrupt", []float64{0.1, 0.1, 0.05, 0.02}}}, "p by layer", "layer", "probability")
	require.NoError(t, err)
	var rec recorder.Canvas
	fig.paint(&rec)
	texts, colors, dashed := map[string]bool{}, map[color.Color]bool{}, 0
	for _, a := range rec.Actions {
		switch a := a.(type) {
		case *recorder.FillString:
			texts[a.String] = true
		case *recorder.SetColor:
			colors[a.Color] = true
		case *recorder.SetLineDash:
			if len(a.Dashes) > 0 {
				dashed++
			}
		}
	}
	require.True(t, texts["clean"] && texts["corrupt"] && texts["layer"] && texts["probability"], "legend and axes: %v", texts)
	require.True(t, colors[lineColors[0]] && colors[lineColors[1]], "two colours")
	require.Zero(t, dashed, "all positive: no zero line")

	fig, err = XY([]float64{0, 1, 2}, []float64{-3, 0.5, 4}, "steering", "alpha", "metric")
	require.NoError(t, err)
	rec = recorder.Canvas{}
	fig.paint(&rec)
	for _, a := range rec.Actions {
		if d, ok := a.(*recorder.SetLineDash); ok && len(d.Dashes) > 0 {
			dashed++
		}
	}
	require.Positive(t, dashed, "a sign flip gets the zero line")

	_, err = Lines(nil, []Series{{"a", []float64{0.1, 0.3, 0.2}}}, "layers", "layer", "p")
	require.NoError(t, err, "x nil counts from 0")
	_, err = Lines(x, []Series{{"short", []float64{1}}}, "x", "a", "b")
	require.EqualError(t, err, `viz: Lines: 4 x values and 1 y values (series "short"); want the same number, at least one`)
	many := make([]Series, 11)
	for i := range many {
		many[i] = Series{fmt.Sprint(i), x}
	}
	_, err = Lines(x, many, "x", "a", "b")
	require.ErrorContains(t, err, "11 series, more than the 10 colours")
	_, err = Lines(x, []Series{{"nan", []float64{0, math.NaN(), 1, 2}}}, "x", "a", "b")
	require.ErrorContains(t, err, `viz: Lines (series "nan"): `)
}

// An axis of whole numbers (layers) ticks at whole numbers only: each one
// labelled up to 12, then every 2nd, 5th, 10th... with the others as minor
// ticks; other axes keep gonum's ticks.
func TestWholeNumberAxesTickAtWholeNumbers(t *testing.T) {
	drawn := func(fig *Figure) map[string]bool {
		var rec recorder.Canvas
		fig.paint(&rec)
		texts := map[string]bool{}
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok {
				texts[s.String] = true
			}
		}
		return texts
	}
	x := make([]float64, 12)
	for i := range x {
		x[i] = float64(i)
	}
	fig, err := XY(x, x, "by layer", "layer", "value")
	require.NoError(t, err)
	texts := drawn(fig)
	for i := range 12 {
		require.True(t, texts[fmt.Sprint(i)], "layer %d is labelled: %v", i, texts)
	}

	labels := func(ticks []plot.Tick) (labelled, minor []float64) {
		for _, tk := range ticks {
			if tk.Label != "" {
				labelled = append(labelled, tk.Value)
			} else {
				minor = append(minor, tk.Value)
			}
			require.Equal(t, math.Trunc(tk.Value), tk.Value, "a tick at %g", tk.Value)
		}
		return labelled, minor
	}
	lab, minor := labels(integerTicks{}.Ticks(0, 3))
	require.Equal(t, []float64{0, 1, 2, 3}, lab)
	require.Empty(t, minor, "no ticks between layers")
	lab, minor = labels(integerTicks{}.Ticks(-0.4, 27.3))
	require.Equal(t, []float64{0, 5, 10, 15, 20, 25}, lab)
	require.Equal(t, "0", integerTicks{}.Ticks(-0.4, 3)[0].Label, "not -0")
	require.Len(t, minor, 28-6, "every other layer a minor tick")
	lab, _ = labels(integerTicks{}.Ticks(0, 2047))
	require.Equal(t, []float64{0, 200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800, 2000}, lab)

	fig, err = XY([]float64{0, 0.25, 0.5}, []float64{1, 2, 3}, "steering", "alpha", "metric")
	require.NoError(t, err)
	fractions := 0
	for s := range drawn(fig) {
		if strings.HasPrefix(s, "0.") {
			fractions++
		}
	}
	require.Positive(t, fractions, "fractions keep gonum's ticks")
}

// drawnStrings are the strings fig draws at size points.
func drawnStrings(fig *Figure, size float64) []string {
	var rec recorder.Canvas
	fig.paint(&rec)
	var out []string
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok && float64(s.Font.Size) == size {
			out = append(out, s.String)
		}
	}
	return out
}

// Every cell of a heatmap prints its number with the same decimals, enough
// for two significant digits of the largest: cell by cell, notebook 02's
// K-composition put "0.2" beside "0.19", and notebook 05's head patching
// "-0.0033" and "0.00064" beside "0.41".
func TestHeatmapCellsShareTheirDecimals(t *testing.T) {
	// Notebook 02: K-composition into the induction head, layer 2's row.
	k := [][]float64{{0.0805, 0.056, 0.1875, 0.1969, 0.0329, 0.0242, 0.047, 0.0648}}
	require.Equal(t, [][]string{{"0.08", "0.06", "0.19", "0.20", "0.03", "0.02", "0.05", "0.06"}}, cellNumbers(k, 30))
	// Notebook 05: head patching; what rounds to 0 at two decimals is "0".
	p := [][]float64{{0.2484, 0.4124, -0.0033, 0.0408}, {0.0177, 0.00064, -0.00053, -0.0055}}
	require.Equal(t, [][]string{{"0.25", "0.41", "0", "0.04"}, {"0.02", "0", "0", "-0.01"}}, cellNumbers(p, 30))
	require.Equal(t, [][]string{{"24", "3", "0", "-12"}}, cellNumbers([][]float64{{24.3, 3.2, 0.4, -11.9}}, 30))
	require.Equal(t, [][]string{{"168", "40", "9"}}, cellNumbers([][]float64{{168, 39.6, 8.7}}, 30))
	require.Equal(t, [][]string{{"1.0", "0.5", "0"}}, cellNumbers([][]float64{{0.996, 0.5, -0.01}}, 30), "0.996 has two digits as 1.0")
	// A cell too narrow for two decimals takes one, for every cell.
	narrow := measured(minText).Width("-0.4")
	require.Equal(t, [][]string{{"0.2", "0.4", "-0.4", "0"}}, cellNumbers([][]float64{{0.2484, 0.4124, -0.41, -0.0033}}, narrow))
	require.Nil(t, cellNumbers([][]float64{{1234, 5}}, measured(minText).Width("123")), "a number is never cut")

	// What a figure draws in its cells (7 points).
	fig := must(HeadHeatmap([][]float64{{0.057, 0.063}, {0.052, 0.041}, {0.187, 0.197}}, "K-composition"))
	require.ElementsMatch(t, []string{"0.06", "0.06", "0.05", "0.04", "0.19", "0.20"}, drawnStrings(fig, minText))
}

// A colour bar is ticked at round numbers with a tick at (or within a
// twentieth of) each end, and named: notebook 02's K-composition bar ran
// to 0.197 with its top tick at 0.18, nothing at the top and no name.
func TestColourBarsTickTheirEnds(t *testing.T) {
	ticks := func(sc scale) (labels []string) {
		for _, tk := range (roundTicks{fewest: 3, step: sc.step}).Ticks(sc.lo, sc.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		return labels
	}
	seq := resultScale([][]float64{{0.024, 0.197}})
	require.Equal(t, [2]float64{0, 0.2}, [2]float64{seq.lo, seq.hi}, "the scale runs to the round number past the data")
	require.Equal(t, []string{"0", "0.1", "0.2"}, ticks(seq))
	div := resultScale([][]float64{{-0.039, 0.4124}})
	require.Equal(t, [2]float64{-0.4124, 0.4124}, [2]float64{div.lo, div.hi}, "0.4 is close enough to the end: the colours keep their depth")
	require.Equal(t, []string{"-0.4", "-0.2", "0", "0.2", "0.4"}, ticks(div), "centred on 0")
	abl := resultScale([][]float64{{-6.68, 1.6}})
	require.Equal(t, [2]float64{-7.5, 7.5}, [2]float64{abl.lo, abl.hi})
	require.Equal(t, []string{"-7.5", "-5.0", "-2.5", "0", "2.5", "5.0", "7.5"}, ticks(abl))
	require.Equal(t, []string{"0", "0.5", "1.0"}, ticks(sequential(0, 1)), "probabilities keep 0 to 1")
	norms := sequential(10.3, 72)
	require.Equal(t, [2]float64{0, 75}, [2]float64{norms.lo, norms.hi})
	require.Equal(t, []string{"0", "25", "50", "75"}, ticks(norms))

	fig := must(HeadHeatmap([][]float64{{0.057, 0.063}, {0.052, 0.041}, {0.187, 0.197}}, "K-composition"))
	require.Subset(t, drawnStrings(fig, tickText), []string{"0", "0.1", "0.2"}, "the bar's ticks")
	require.Contains(t, drawnStrings(fig, axisText), "value", "the bar is named")
	fig = must(HeadHeatmap([][]float64{{0.1, 0.2}}, "K-composition", "composition score"))
	require.Contains(t, drawnStrings(fig, axisText), "composition score")
	_, err := HeadHeatmap([][]float64{{0.1, 0.2}}, "x", "a", "b")
	require.ErrorContains(t, err, "2 colour bar labels; at most one")
}

// Where a line crosses zero its y axis labels 0, which the dashed line
// marks: notebook 05's steering figure labelled -9, -3 and 3.
func TestLinesLabelZeroWhereTheyCrossIt(t *testing.T) {
	steer := []float64{-9.008, -6.725, -3.890, -1.454, 0.511, 2.269, 3.445}
	fig := must(XY([]float64{1, 2, 3, 4, 5, 6, 7}, steer, "steering toward counting down", "step", "logit(--) − logit(++)"))
	labels := drawnStrings(fig, tickText) // x: 1 to 7; y: the rest
	require.Subset(t, labels, []string{"-8", "-6", "-4", "-2", "0", "2"})
	require.NotContains(t, labels, "-9")
	require.NotContains(t, labels, "-3")
}

// A legend stands clear of the y axis and of the lines: in notebook 01's
// AttnMLPNorms it sat on the axis's line at the top left.
func TestLegendsStandClearOfAxesAndLines(t *testing.T) {
	where := func(fig *Figure, name string) (legend, axisLeft vg.Length) {
		var rec recorder.Canvas
		fig.paint(&rec)
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok {
				switch s.String {
				case name:
					legend = s.Point.X
				case "0": // the first x tick, centred on the plotting area's left edge (padded 5 points)
					if axisLeft == 0 {
						axisLeft = s.Point.X + measured(tickText).Width("0")/2 - 5
					}
				}
			}
		}
		return legend, axisLeft
	}
	x := []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	rising, falling := make([]float64, len(x)), make([]float64, len(x))
	for i := range x {
		rising[i], falling[i] = x[i], 10-x[i]
	}
	thumb := plot.New().Legend.ThumbnailWidth + measured(tickText).Width(" ")
	fig := must(Lines(x, []Series{{"up", rising}}, "rising", "layer", "v"))
	legend, axis := where(fig, "up")
	require.GreaterOrEqual(t, float64(legend-thumb-axis), 8.0, "the legend's swatch stands clear of the y axis")
	require.Less(t, float64(legend), float64(fig.Width/2), "top left is free")
	fig = must(Lines(x, []Series{{"down", falling}}, "falling", "layer", "v"))
	legend, _ = where(fig, "down")
	require.Greater(t, float64(legend), float64(fig.Width/2), "the line runs through the top left: the legend moves right")
}

// Ranges at float64's ends get ticks (gonum's where round steps cannot be
// counted) and colour bars, never a loop that does not end: a step that
// underflowed to 0 or a count past 2^53 had looped forever.
func TestTicksAtTheEndsOfFloat64(t *testing.T) {
	for _, r := range [][2]float64{{0, 1e-320}, {1e22, 1e22 + 1e7}, {-1e307, 1e307}, {5, 5 + 1e-12}, {-3, 7}} {
		done := make(chan []plot.Tick)
		go func() { done <- roundTicks{fewest: 4}.Ticks(r[0], r[1]) }()
		select {
		case ticks := <-done:
			require.NotEmpty(t, ticks, "%v", r)
		case <-time.After(5 * time.Second):
			t.Fatalf("ticks of %v did not end", r)
		}
		lo, hi, _ := barEnds(r[0], r[1], 2, 5)
		require.LessOrEqual(t, lo, r[0], "%v", r)
		require.GreaterOrEqual(t, hi, r[1], "%v", r)
	}
	// Figures of values equal but for rounding, or at float64's ends.
	for name, draw := range map[string]func() (*Figure, error){
		"XY 0.1+0.2":    func() (*Figure, error) { return XY([]float64{0, 1}, []float64{0.1 + 0.2, 0.3}, "", "x", "y") },
		"XY 2.5":        func() (*Figure, error) { return XY([]float64{0, 1}, []float64{2.5, 2.5000000000000004}, "", "x", "y") },
		"Heatmap":       func() (*Figure, error) { return Heatmap([][]float64{{0.1 + 0.2, 0.3}}, nil, nil, "") },
		"XY 1e-322":     func() (*Figure, error) { return XY([]float64{0, 1}, []float64{0, 1e-322}, "", "x", "y") },
		"HeadHeatmap 0": func() (*Figure, error) { return HeadHeatmap([][]float64{{0, 5e-324}}, "") },
		"HeadHeatmap 1e308": func() (*Figure, error) {
			return HeadHeatmap([][]float64{{0, 1e308}}, "")
		},
	} {
		done := make(chan error)
		go func() {
			f, err := draw()
			if err == nil {
				err = f.Save(filepath.Join(t.TempDir(), "f.png"))
			}
			done <- err
		}()
		select {
		case err := <-done:
			require.NoError(t, err, name)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not end", name)
		}
	}
}
