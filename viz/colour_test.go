package viz

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
)

// The colour convention of the package doc, read off the drawn pixels: a
// heatmap's zero cell is white between a blue -1 and a red +1, and a
// positive bar is red right of a negative blue one. Checked on the PNGs and,
// where Chromium is installed, on a screenshot of a page showing them, as a
// class would see them.
func TestColourConvention(t *testing.T) {
	heat, err := Heatmap([][]float64{{-1, 0, 1}}, []string{"row"}, []string{"neg", "zero", "pos"}, "convention")
	require.NoError(t, err)
	bars, err := Bars([]string{"up", "down"}, []float64{1, -1}, "convention", "value")
	require.NoError(t, err)
	var heatPNG, barsPNG bytes.Buffer
	require.NoError(t, heat.Encode(&heatPNG, "png"))
	require.NoError(t, bars.Encode(&barsPNG, "png"))
	heatImg, err := png.Decode(bytes.NewReader(heatPNG.Bytes()))
	require.NoError(t, err)
	barsImg, err := png.Decode(bytes.NewReader(barsPNG.Bytes()))
	require.NoError(t, err)
	checkHeatmapConvention(t, heatImg, heatImg.Bounds())
	checkBarsConvention(t, barsImg, barsImg.Bounds())

	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the screenshot check needs it")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "heat.png"), heatPNG.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bars.png"), barsPNG.Bytes(), 0o644))
	hb, bb := heatImg.Bounds(), barsImg.Bounds()
	page := filepath.Join(dir, "index.html")
	// Each image at its natural size at a known place, so a screenshot
	// pixel is a PNG pixel.
	require.NoError(t, os.WriteFile(page, fmt.Appendf(nil, `<!doctype html><body style="margin:0;background:#fff">`+
		`<img src="heat.png" style="position:absolute;left:0;top:0;width:%dpx;height:%dpx">`+
		`<img src="bars.png" style="position:absolute;left:0;top:%dpx;width:%dpx;height:%dpx">`,
		hb.Dx(), hb.Dy(), hb.Dy(), bb.Dx(), bb.Dy()), 0o644))
	shot := filepath.Join(dir, "shot.png")
	_, err = runChromium(t, browser, page, shot)
	require.NoError(t, err, "chromium")
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	checkHeatmapConvention(t, img, image.Rect(0, 0, hb.Dx(), hb.Dy()))
	checkBarsConvention(t, img, image.Rect(0, hb.Dy(), bb.Dx(), hb.Dy()+bb.Dy()))
}

// near says whether a pixel is within 2 of c on each channel: the
// browser's colour management may move a channel by one.
func near(img image.Image, x, y int, c color.RGBA) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(a uint32, b uint8) bool { return max(int(a>>8), int(b))-min(int(a>>8), int(b)) <= 2 }
	return d(r, c.R) && d(g, c.G) && d(b, c.B)
}

// checkHeatmapConvention finds, in some row of the heatmap, the leftmost
// run of deep blue (the -1 cell; the colour bar lies to the right) and the
// next run of deep red (the +1 cell), and reads the zero cell between them.
func checkHeatmapConvention(t *testing.T, img image.Image, in image.Rectangle) {
	t.Helper()
	white := color.RGBA{255, 255, 255, 255}
	for y := in.Min.Y; y < in.Max.Y; y++ {
		blueEnd, redStart := -1, -1
		for x := in.Min.X; x < in.Max.X; x++ {
			switch {
			case blueEnd < 0 && near(img, x, y, deepBlue):
				for blueEnd = x; blueEnd+1 < in.Max.X && near(img, blueEnd+1, y, deepBlue); blueEnd++ {
				}
				x = blueEnd
			case blueEnd >= 0 && near(img, x, y, deepRed):
				redStart = x
			}
			if redStart >= 0 {
				break
			}
		}
		if blueEnd < 0 || redStart < 0 || redStart-blueEnd < 10 {
			continue
		}
		mid := (blueEnd + redStart) / 2
		require.True(t, near(img, mid, y, white), "the zero cell at (%d, %d) is %v, not white", mid, y, img.At(mid, y))
		return
	}
	require.Fail(t, "no row holds a deep blue cell left of a deep red one")
}

// checkBarsConvention finds the deep red and deep blue bars: the positive
// bar (first, at the top) red and right of the negative blue one.
func checkBarsConvention(t *testing.T, img image.Image, in image.Rectangle) {
	t.Helper()
	type extent struct{ minX, maxX, minY, n int }
	find := func(c color.RGBA) extent {
		e := extent{minX: 1 << 30, minY: 1 << 30}
		for y := in.Min.Y; y < in.Max.Y; y++ {
			for x := in.Min.X; x < in.Max.X; x++ {
				if near(img, x, y, c) {
					e.minX, e.maxX, e.minY, e.n = min(e.minX, x), max(e.maxX, x), min(e.minY, y), e.n+1
				}
			}
		}
		return e
	}
	red, blue := find(deepRed), find(deepBlue)
	require.Greater(t, red.n, 100, "the positive bar is red")
	require.Greater(t, blue.n, 100, "the negative bar is blue")
	require.Less(t, blue.maxX, red.minX+2, "blue left of zero, red right of it")
	require.Less(t, red.minY, blue.minY, "the positive bar, first, above the negative one")
}

// Values all below zero are blue, as the package doc says: log-probabilities
// took the white-to-red scale, the least negative the deepest red.
func TestNegativeValuesAreBlue(t *testing.T) {
	heat, err := Heatmap([][]float64{{-4, -1}}, []string{"row"}, []string{"a", "b"}, "all negative")
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, heat.Encode(&b, "png"))
	img, err := png.Decode(&b)
	require.NoError(t, err)
	in := img.Bounds()
	for y := in.Min.Y; y < in.Max.Y; y++ {
		for x := in.Min.X; x < in.Max.X; x++ {
			if !near(img, x, y, deepBlue) {
				continue
			}
			for x+1 < in.Max.X && near(img, x+1, y, deepBlue) {
				x++
			}
			r, _, bl, _ := img.At(x+3, y).RGBA()
			require.Greater(t, bl, r, "the -1 cell beside the deep blue -4 one is blue too, paler: %v", img.At(x+3, y))
			return
		}
	}
	require.Fail(t, "no deep blue cell: -4, the most negative value, is not drawn blue")
}

// A causal mask's scores (-Inf) are grey, as missing values are, and the
// title says so: they took the colour bar's deepest blue, a very negative
// score's colour.
func TestMaskedScoresAreGrey(t *testing.T) {
	tr := prefill(t, synthModel(t), synthTokens, engine.CaptureOf("blocks.0.attn.hook_attn_scores"))
	f, err := Captured(tr, "blocks.0.attn.hook_attn_scores")
	require.NoError(t, err)
	require.Contains(t, f.Title, "grey: masked (−∞)")
	var b bytes.Buffer
	require.NoError(t, f.Encode(&b, "png"))
	img, err := png.Decode(&b)
	require.NoError(t, err)
	grey := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if near(img, x, y, nanColor) {
				grey++
			}
		}
	}
	// A tile's upper triangle: nearly half of each head's square.
	require.Greater(t, grey, 2000, "grey pixels")
}
