package viz

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gpu"
)

var reportFigureNames = []string{"attention_grid", "attention_head", "prev_token_scores", "induction_scores",
	"resid_norms", "attn_mlp_norms", "logit_lens", "kv_cache", "pca"}

func TestReportRendersInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the report's rendering check needs it")
	}
	m := synthModel(t)
	tr := withLens(t, m, prefill(t, m, synthTokens, gpu.CaptureAll()))
	dir := t.TempDir()
	require.NoError(t, Report(tr, dir))

	var want []string
	for _, n := range reportFigureNames {
		want = append(want, n+".png", n+".svg")
	}
	want = append(want, "index.html")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	require.ElementsMatch(t, want, got, "every figure as PNG and SVG, the page, and no temporary files")

	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	html := string(page)
	require.Equal(t, len(reportFigureNames), strings.Count(html, `src="data:image/png;base64,`), "figures are inline")
	require.False(t, strings.Contains(html, "Not drawn"), "every figure is drawn")
	require.True(t, strings.Contains(html, `title="position 2, token 300">&lt;|unused_300|&gt;</span>`), "the token strip shows the pieces")
	require.True(t, strings.Contains(html, "<code>blocks.1.attn.hook_pattern</code></td><td>[8 13 13]</td>"), "the capture list gives shapes")

	// The check can fail: a page whose image does not decode says so.
	broken := regexp.MustCompile(`data:image/png;base64,[^"]{40}`).ReplaceAllString(html, "data:image/png;base64,AAAA")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.html"), []byte(broken), 0o644))

	// Both pages load at once: a browser's start-up is most of the time.
	shot := filepath.Join(t.TempDir(), "shot.png")
	brokenDOM := make(chan string, 1)
	brokenErr := make(chan error, 1)
	go func() {
		dom, err := runChromium(t, browser, filepath.Join(dir, "broken.html"), "")
		brokenDOM <- dom
		brokenErr <- err
	}()
	dom, err := runChromium(t, browser, filepath.Join(dir, "index.html"), shot)
	require.NoError(t, err, "chromium")
	require.Contains(t, dom, `data-images="loaded 9"`, "every image decoded")
	require.NoError(t, <-brokenErr, "chromium")
	require.Contains(t, <-brokenDOM, `data-images="broken: `)

	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Greater(t, distinctColors(img), 500, "the screenshot shows figures, not a blank page")
	require.Greater(t, nonWhiteShare(img), 0.05)
}

// runChromium loads page headless and returns its DOM after load; shot,
// when set, receives a screenshot.
func runChromium(t *testing.T, browser, page, shot string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=10000", "--window-size=1280,2400", "--dump-dom"}
	if shot != "" {
		args = append(args, "--screenshot="+shot)
	}
	out, err := exec.CommandContext(ctx, browser, append(args, "file://"+page)...).Output()
	return string(out), err
}

func nonWhiteShare(img image.Image) float64 {
	r := img.Bounds()
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if cr, cg, cb, _ := img.At(x, y).RGBA(); cr < 0xf000 || cg < 0xf000 || cb < 0xf000 {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy())
}

func TestReportSaysWhatWasNotCaptured(t *testing.T) {
	m := synthModel(t)
	dir := t.TempDir()
	require.NoError(t, Report(prefill(t, m, synthTokens[:7], gpu.CaptureOf("blocks.*.hook_resid_post")), dir))
	require.FileExists(t, filepath.Join(dir, "resid_norms.png"))
	tr := prefill(t, m, synthTokens[:7], gpu.CaptureOf("blocks.*.attn.hook_pattern"))
	require.NoError(t, Report(tr, dir))
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	html := string(page)
	require.True(t, strings.Contains(html, "Not drawn"))
	for _, skipped := range []string{
		`<b>resid_norms</b>: viz: ResidNorms needs blocks.*.hook_resid_post, which this trace lacks: capture &#34;blocks.*.hook_resid_post&#34;`,
		`<b>attn_mlp_norms</b>`,
		`<b>logit_lens</b>: viz: LogitLens needs the logit lens`,
		`<b>kv_cache</b>: viz: KVCache needs blocks.0.attn.cache_k, which this trace lacks: capture &#34;blocks.*.attn.cache_k&#34;`,
		`<b>pca</b>`,
	} {
		require.Truef(t, strings.Contains(html, skipped), "the page says %s", skipped)
	}
	require.False(t, strings.Contains(html, "induction_scores"), "no repeat in the prompt, so no induction figure")
	for _, n := range []string{"attention_grid", "attention_head", "prev_token_scores"} {
		require.FileExists(t, filepath.Join(dir, n+".png"))
		require.FileExists(t, filepath.Join(dir, n+".svg"))
	}
	require.NoFileExists(t, filepath.Join(dir, "resid_norms.png"), "the first report's figure is gone with its capture")

	file := filepath.Join(dir, "index.html")
	require.Error(t, Report(tr, filepath.Join(file, "sub")), "a directory under a file cannot be made")
}

func TestReportOfOneTokenSaysWhatCannotBeDrawn(t *testing.T) {
	tr := prefill(t, synthModel(t), synthTokens[:1], gpu.CaptureOf("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post"))
	dir := t.TempDir()
	require.NoError(t, Report(tr, dir))
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(page), "<b>prev_token_scores</b>: viz: PrevTokenScores: layer 0: trace: previous-token scores need a query at position 1 or later"))
	require.FileExists(t, filepath.Join(dir, "attention_head.png"), "the one-cell pattern is still drawn")
	require.FileExists(t, filepath.Join(dir, "resid_norms.png"))
}
