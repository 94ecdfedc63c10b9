package viz

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

var reportFigureNames = []string{"attention_grid", "attention_head", "prev_token_scores", "induction_scores",
	"resid_norms", "attn_mlp_norms", "logit_lens", "kv_cache", "pca"}

func TestReportRendersInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the report's rendering check needs it")
	}
	m := synthModel(t)
	tr := withLens(t, m, prefill(t, m, synthTokens, engine.CaptureAll()))
	dir := t.TempDir()
	require.NoError(t, Report(tr, dir))

	var want []string
	for _, n := range reportFigureNames {
		want = append(want, n+".png", n+".svg")
	}
	want = append(want, "attention_view.html", "token_loss.html", "index.html", ".strata-trace.json")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	require.ElementsMatch(t, want, got, "every figure as PNG and SVG, the page, the folder's index, and no temporary files")

	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	html := string(page)
	require.Equal(t, len(reportFigureNames), strings.Count(html, `src="data:image/png;base64,`), "figures are inline")
	require.False(t, strings.Contains(html, "Not drawn"), "every figure is drawn")
	require.Contains(t, html, `<a href="attention_view.html">Attention, interactive</a>`, "the views are linked")
	require.Contains(t, html, `<a href="token_loss.html">Loss per token</a>`)
	view, err := os.ReadFile(filepath.Join(dir, "attention_view.html"))
	require.NoError(t, err)
	require.NotContains(t, string(view), "<script src=", "a view is self-contained")
	require.True(t, strings.Contains(html, `title="position 2, token 300">&lt;|unused_300|&gt;</span>`), "the token strip shows the pieces")
	spaced := trace.New()
	spaced.Model, spaced.Tokens, spaced.Pieces = tr.Model, []int32{1, 2}, []string{" x", "  "}
	spacedDir := t.TempDir()
	require.NoError(t, Report(spaced, spacedDir))
	page, err = os.ReadFile(filepath.Join(spacedDir, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(page), `token 1">·x</span>`, "a leading space is a dot, as in the views")
	require.Contains(t, string(page), `token 2">··</span>`, "a space-only token is not an empty box")
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
	require.NoError(t, Report(prefill(t, m, synthTokens[:7], engine.CaptureOf("blocks.*.hook_resid_post")), dir))
	require.FileExists(t, filepath.Join(dir, "resid_norms.png"))
	tr := prefill(t, m, synthTokens[:7], engine.CaptureOf("blocks.*.attn.hook_pattern"))
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
	require.NotContains(t, html, "None: what the figures read was not captured")

	// Nothing to draw: the heading says so instead of standing empty.
	require.NoError(t, Report(prefill(t, m, synthTokens[:7], engine.CaptureOf("blocks.1.attn.hook_q")), dir))
	page, err = os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(page), "<h2>Figures</h2>\n<p>None: what the figures read was not captured")

	file := filepath.Join(dir, "index.html")
	require.Error(t, Report(tr, filepath.Join(file, "sub")), "a directory under a file cannot be made")
}

func TestReportOfOneTokenSaysWhatCannotBeDrawn(t *testing.T) {
	tr := prefill(t, synthModel(t), synthTokens[:1], engine.CaptureOf("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post"))
	dir := t.TempDir()
	require.NoError(t, Report(tr, dir))
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(page), "<b>prev_token_scores</b>: viz: PrevTokenScores: layer 0: trace: previous-token scores need a query at position 1 or later"))
	require.FileExists(t, filepath.Join(dir, "attention_head.png"), "the one-cell pattern is still drawn")
	require.Contains(t, string(page), "Layer 0 head 0: with no query past the first position, no head is scored for attending to the previous token.")
	require.NotContains(t, string(page), "the head that attends most to the previous token", "no head was scored")
	require.FileExists(t, filepath.Join(dir, "resid_norms.png"))
}

// nanModel is synthModel with layer 1's ffn_norm gain set to NaN: the
// trace first goes non-finite at blocks.1.ln2.hook_normalized.
func nanModel(t testing.TB) *model.Model {
	t.Helper()
	w, err := synth.Generate(synth.Shapes["tiny-qwen3"], gguf.F32, 5)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), "nan-qwen3")
	require.NoError(t, err)
	ti, ok := f.Tensor("blk.1.ffn_norm.weight")
	require.True(t, ok)
	data := f.Data(ti) // aliases buf: the model reads it from there
	for i := 0; i < len(data); i += 4 {
		binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(math.NaN())))
	}
	m, err := model.Load(f)
	require.NoError(t, err)
	return m
}

// A model that goes NaN is traced all the same: the folder is written, the
// manifest reads back, and the page says where the values first went
// non-finite and marks every capture that holds them.
func TestReportOfANaNModelSaysWhereItWentNonFinite(t *testing.T) {
	m := nanModel(t)
	tr := prefill(t, m, synthTokens[:7], engine.CaptureAll())
	e, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	require.NoError(t, e.LogitLens(tr)) // NaN probabilities: what json.Marshal refused before
	dir := t.TempDir()
	require.NoError(t, Export(tr, dir))

	got, err := trace.Load(dir)
	require.NoError(t, err)
	require.Equal(t, tr.Names, got.Names)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var man trace.Manifest
	require.NoError(t, json.Unmarshal(raw, &man))
	require.NotNil(t, man.FirstNonFinite)
	require.Equal(t, "blocks.1.ln2.hook_normalized", man.FirstNonFinite.Capture)
	require.Equal(t, 1, man.FirstNonFinite.Layer)
	require.Equal(t, 7*256, man.FirstNonFinite.NaN)
	for _, te := range man.Tensors {
		if trace.LayerOf(te.Name) == 0 || te.Name == "hook_embed" || strings.HasPrefix(te.Name, "blocks.1.") && slices.Index(tr.Names, te.Name) < slices.Index(tr.Names, "blocks.1.ln2.hook_normalized") {
			require.Falsef(t, te.Any(), "%s is before the NaN", te.Name)
		}
	}
	require.True(t, man.Tensors[len(man.Tensors)-1].Any(), "the logits are NaN")
	require.Contains(t, string(raw), `"NaN"`, "the lens's NaN probabilities are strings")

	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	html := string(page)
	require.Contains(t, html, `The model first went non-finite at <code>blocks.1.ln2.hook_normalized</code> (layer 1): 1792 NaN.`)
	require.Contains(t, html, `<td><code>blocks.1.ln2.hook_normalized</code></td><td>[7 256]</td><td class="nonfinite">1792 NaN</td>`)
	require.Contains(t, html, `<td><code>blocks.0.attn.hook_attn_scores</code></td><td>[8 7 7]</td><td></td>`, "the mask's -Inf is not a fault")
}

// Python's json module reads the manifest of a NaN trace.
func TestPythonReadsANaNManifest(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	tr := trace.New()
	tr.Put("x", &trace.Tensor{Shape: []int{3}, Data: []float32{1, float32(math.NaN()), float32(math.Inf(-1))}})
	tr.Lens = &trace.Lens{Prob: [][]float32{{float32(math.NaN()), 0.5}}, Token: [][]int32{{1, 2}}, Piece: [][]string{{"a", "b"}}}
	dir := t.TempDir()
	require.NoError(t, tr.Save(dir))
	out, err := exec.Command(py, "-c", `
import json, sys
m = json.load(open(sys.argv[1]))
print(m["first_non_finite"], m["tensors"][0]["nan"], [float(p) for p in m["logit_lens"]["prob"][0]])
`, filepath.Join(dir, "manifest.json")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "{'capture': 'x', 'layer': -1, 'nan': 1, 'neg_inf': 1} 1 [nan, 0.5]\n", string(out))
	got, err := trace.Load(dir)
	require.NoError(t, err)
	require.True(t, math.IsNaN(float64(got.Lens.Prob[0][0])))
}

// Save then Report, or Report then Save, of one trace leaves the whole
// folder; a report of another trace replaces both.
func TestSaveAndReportKeepEachOthersFiles(t *testing.T) {
	m := synthModel(t)
	tr := prefill(t, m, synthTokens[:5], engine.CaptureOf("blocks.*.attn.hook_pattern"))
	for _, order := range [][2]string{{"save", "report"}, {"report", "save"}} {
		dir := filepath.Join(t.TempDir(), "out")
		for _, step := range order {
			if step == "save" {
				require.NoError(t, tr.Save(dir))
			} else {
				require.NoError(t, Report(tr, dir))
			}
		}
		require.FileExists(t, filepath.Join(dir, "trace.npz"), "%v", order)
		require.FileExists(t, filepath.Join(dir, "index.html"), "%v", order)
		require.FileExists(t, filepath.Join(dir, "attention_grid.png"), "%v", order)

		other := prefill(t, m, synthTokens[:4], engine.CaptureOf("blocks.*.attn.hook_pattern"))
		require.NoError(t, Report(other, dir))
		require.NoFileExists(t, filepath.Join(dir, "trace.npz"), "another trace's data does not stay beside this report")
	}
}

// A folder holding files Strata did not write is refused, whole.
func TestReportRefusesAFolderWithOtherFiles(t *testing.T) {
	tr := prefill(t, synthModel(t), synthTokens[:3], engine.CaptureOf("blocks.*.attn.hook_pattern"))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	err := Report(tr, dir)
	require.ErrorContains(t, err, "holds notes.txt, which Strata did not write")
	require.ErrorContains(t, err, dir)
	b, err := os.ReadFile(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(b))
	require.NoFileExists(t, filepath.Join(dir, "index.html"))
}
