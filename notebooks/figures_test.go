package notebooks

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	xdraw "golang.org/x/image/draw"
)

// maxFigureDiff is the largest mean difference allowed between a figure as
// Chromium draws it in the notebook and its PNG export, per colour channel
// on a 0-1 scale, after both are averaged over 4x4 pixel blocks. The
// blocks absorb what legitimately differs: the browser draws text with its
// own fonts and anti-aliasing. Measured: identical-layout figures differ by
// at most about 0.02; a heatmap squeezed into a centred square (the defect
// of issue 11) differs by 0.1 and more.
const maxFigureDiff = 0.04

// maxAspectError is the largest relative difference of width/height between
// the drawn figure and its export: a figure may be scaled to fit the page,
// never stretched.
const maxAspectError = 0.01

func newBrowser(t *testing.T) context.Context {
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: scripts/setup.sh should have installed it")
		}
		t.Skip("chromium is not installed (scripts/setup.sh installs it)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1400, 1000), // a laptop's browser window
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

// compareFigures opens an HTML notebook in the browser, screenshots every
// figure nb.Show displayed (in order), and compares each with the PNG
// export nb.Show wrote beside it (STRATA_SHOW_EXPORT).
func compareFigures(t *testing.T, browser context.Context, html, exports, shots string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, 3*time.Minute)
	defer cancel()
	ctx, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("file://"+html)))
	// MathJax, which the page loads for Markdown, cannot reach its CDN here
	// and says so in a box over the page's corner; a reader's Jupyter
	// serves it locally.
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`(() => { const s = document.createElement("style"); s.textContent = "#MathJax_Message{display:none!important}"; document.head.append(s); const f = document.querySelectorAll(".strata-figure > svg"); f.forEach((e, i) => e.setAttribute("data-shot", i)); return f.length })()`))
	require.NoError(t, err)
	want, err := filepath.Glob(filepath.Join(exports, "*.png"))
	require.NoError(t, err)
	require.Equal(t, len(want), n, "figures in the page and PNG exports")
	require.NoError(t, os.MkdirAll(shots, 0o755))
	for i, exportPath := range want {
		shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(fmt.Sprintf(`[data-shot="%d"]`, i))))
		require.NoError(t, err)
		shotPath := filepath.Join(shots, filepath.Base(exportPath))
		require.NoError(t, os.WriteFile(shotPath, shot, 0o644))
		got, err := png.Decode(bytes.NewReader(shot))
		require.NoError(t, err)
		raw, err := os.ReadFile(exportPath)
		require.NoError(t, err)
		exported, err := png.Decode(bytes.NewReader(raw))
		require.NoError(t, err)
		aspect, diff := figureDiff(got, exported)
		t.Logf("%s: page %v, export %v, aspect error %.4f, mean difference %.4f",
			filepath.Base(exportPath), got.Bounds().Size(), exported.Bounds().Size(), aspect, diff)
		require.Less(t, aspect, maxAspectError, "%s is stretched in the page (screenshot %s)", exportPath, shotPath)
		require.Less(t, diff, maxFigureDiff, "%s is drawn differently in the page (screenshot %s)", exportPath, shotPath)
	}
}

// figureDiff returns the relative aspect-ratio error of a against b, and
// their mean per-channel difference (0-1) once a is scaled to b's size and
// both are averaged over 4x4 blocks.
func figureDiff(a, b image.Image) (aspect, diff float64) {
	as, bs := a.Bounds().Size(), b.Bounds().Size()
	ra, rb := float64(as.X)/float64(as.Y), float64(bs.X)/float64(bs.Y)
	aspect = math.Abs(ra-rb) / rb
	scaled := image.NewRGBA(image.Rectangle{Max: bs})
	xdraw.BiLinear.Scale(scaled, scaled.Bounds(), a, a.Bounds(), xdraw.Src, nil)
	const block = 4
	var sum float64
	var n int
	for y := 0; y+block <= bs.Y; y += block {
		for x := 0; x+block <= bs.X; x += block {
			ma, mb := blockMean(scaled, x, y, block), blockMean(b, b.Bounds().Min.X+x, b.Bounds().Min.Y+y, block)
			for c := range ma {
				sum += math.Abs(ma[c] - mb[c])
				n++
			}
		}
	}
	return aspect, sum / float64(max(n, 1))
}

func blockMean(img image.Image, x0, y0, size int) [3]float64 {
	var m [3]float64
	for y := y0; y < y0+size; y++ {
		for x := x0; x < x0+size; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			m[0] += float64(r) / 0xffff
			m[1] += float64(g) / 0xffff
			m[2] += float64(b) / 0xffff
		}
	}
	for c := range m {
		m[c] /= float64(size * size)
	}
	return m
}
