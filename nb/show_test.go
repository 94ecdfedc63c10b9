package nb_test

import (
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"

	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

// stdout runs f and returns what it printed.
func stdout(t *testing.T, f func()) string {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = saved }()
	f()
	require.NoError(t, w.Close())
	os.Stdout = saved
	return <-done
}

// showFiles shows items outside a notebook and returns what Show printed
// and the files it wrote.
func showFiles(t *testing.T, items ...any) (string, []string) {
	nb.ShowDir = t.TempDir()
	out := stdout(t, func() { nb.Show(items...) })
	entries, err := os.ReadDir(nb.ShowDir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, filepath.Join(nb.ShowDir, e.Name()))
	}
	return out, files
}

func TestShowTurnsFigureErrorsIntoMessages(t *testing.T) {
	m := nb.Open("")
	tr := m.Prefill("func main() {", nb.Capture("blocks.*.attn.hook_pattern"))
	var out string
	var files []string
	require.NotPanics(t, func() { out, files = showFiles(t, both(viz.AttentionHead(tr, 3, 9))...) })
	require.Contains(t, out, "error: viz: AttentionHead: head 9 is out of range: the model has 8 heads (0-7)")
	require.Empty(t, files)

	out, files = showFiles(t, both(viz.KVCache(tr, 0, 0))...)
	require.Contains(t, out, `capture "blocks.*.attn.cache_k"`)
	require.Empty(t, files)
	out, _ = showFiles(t, both(viz.Captured(tr, "blocks.1.hook_nope"))...)
	require.Contains(t, out, `no model has a point named "blocks.1.hook_nope" (strata info --points lists a model's points)`)

	out, _ = showFiles(t, (*viz.Figure)(nil))
	require.Contains(t, out, "a nil *viz.Figure, nothing to show", "a figure whose error was dropped")
	out, _ = showFiles(t, 42)
	require.Contains(t, out, "cannot show a int")
	require.NotPanics(t, func() { out, files = showFiles(t, panicking{}, "after") })
	require.Contains(t, out, "error: nb.Show: showing a nb_test.panicking failed: drawing went wrong")
	require.Contains(t, out, "after", "items after a panic are still shown")
	require.Empty(t, files)
}

// both passes a figure function's results on, as nb.Show(viz.X(...)) does.
func both(f *viz.Figure, err error) []any { return []any{f, err} }

type panicking struct{}

func (panicking) Encode(io.Writer, string) error { panic("drawing went wrong") }

func TestShowDrawsWhatUsersHave(t *testing.T) {
	m := nb.Open("")
	tr := m.Prefill("func main() {", nb.Capture("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post", "blocks.0.attn.hook_q"))
	p := plot.New()
	p.Title.Text = "mine"
	items := append(both(viz.AttentionGrid(tr)),
		p,
		[]float64{1, 3, 2},
		[]float32{1, 3, 2},
		[][]float64{{1, -1}, {0, 2}},
		tr.Tensor("blocks.0.hook_resid_post"),   // 2-D
		tr.Tensor("blocks.0.attn.hook_pattern"), // 3-D
		&trace.Tensor{Shape: []int{3}, Data: []float32{1, 2, 3}},
		trace.Scores{{0.5, -0.25}, {1, 0}},
	)
	out, files := showFiles(t, items...)
	require.Len(t, files, 9, "one per item, the grid's nil error skipped: %s", out)
	out, files = showFiles(t, trace.Scores{{0.5, -0.25}, {1, 0}}.Top(2))
	require.Empty(t, files)
	require.Contains(t, out, "L1H0")
	require.Contains(t, out, "0.500")
	out, _ = showFiles(t, nb.NeuronScores{{0.5, -0.25}, {1, 0}}.Bottom(1))
	require.Contains(t, out, "L0N1")
	require.Contains(t, out, "-0.250")
	out, files = showFiles(t, nil)
	require.Empty(t, out, "a nil error shows nothing")
	require.Empty(t, files)
	for _, f := range files {
		r, err := os.Open(f)
		require.NoError(t, err)
		c, err := png.DecodeConfig(r)
		r.Close()
		require.NoError(t, err, f)
		require.Greater(t, c.Width, 100, f)
		require.Contains(t, out, f, "the path is printed")
	}

	nb.ShowDir = t.TempDir()
	out = stdout(t, func() { nb.ShowTensor(tr, "blocks.0.attn.hook_q") })
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), ".png"), out)
	out = stdout(t, func() { nb.ShowTensor(tr, "blocks.0.mlp.hook_post") })
	require.Contains(t, out, `capture "blocks.*.mlp.hook_post"`)
}

func TestShowPrintsTablesAndTraces(t *testing.T) {
	out, files := showFiles(t,
		nb.Table{Header: []string{"head", "score"}, Rows: [][]string{{"L3H0", "0.61"}, {"L3H1", "0.48"}}},
		[][]string{{"token", "loss"}, {"func", "2.5"}})
	require.Empty(t, files)
	require.Contains(t, out, "head  score\nL3H0  0.61\nL3H1  0.48\n")
	require.Contains(t, out, "token  loss\nfunc   2.5\n")
	out, _ = showFiles(t, nb.Table{Header: []string{"a", "b"}, Rows: [][]string{{"1", "2"}, {"1", "2", "3"}}},
		[][]string{{"a", "b"}, {"1"}}, nb.Table{Rows: [][]string{{"1"}, {"1", "2"}}})
	require.Contains(t, out, "nb.Show: table row 1 has 3 cells, and the header 2")
	require.Contains(t, out, "nb.Show: table row 0 has 1 cells, and the header 2")
	require.Contains(t, out, "nb.Show: table row 1 has 2 cells, and row 0 1")

	m := nb.Open("")
	tr := m.Prefill("\tx", nb.Capture("blocks.0.hook_resid_post"))
	out, _ = showFiles(t, tr)
	require.Contains(t, out, "blocks.0.hook_resid_post")
	require.Contains(t, out, `"\t`, "a tab piece is escaped once")
	require.NotContains(t, out, `\\t`)
}

func TestShowWritesHTMLViewsToFiles(t *testing.T) {
	out, files := showFiles(t, viz.HTML{Title: "v", Body: "<p>hi</p>"}, errors.New("and an error"))
	require.Len(t, files, 1)
	require.True(t, strings.HasSuffix(files[0], ".html"))
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.Contains(t, string(b), "<p>hi</p>")
	require.Contains(t, out, "error: and an error")
}

// Figures shown from several goroutines, and by another run into the same
// folder, each get a file of their own.
func TestShownFiguresNeverOverwriteEachOther(t *testing.T) {
	nb.ShowDir = t.TempDir()
	earlier := filepath.Join(nb.ShowDir, "figure-001.png")
	require.NoError(t, os.WriteFile(earlier, []byte("another run's"), 0o644))
	stdout(t, func() {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nb.Show([]float64{1, float64(i)})
			}()
		}
		wg.Wait()
	})
	entries, err := os.ReadDir(nb.ShowDir)
	require.NoError(t, err)
	require.Len(t, entries, 9)
	b, err := os.ReadFile(earlier)
	require.NoError(t, err)
	require.Equal(t, "another run's", string(b))
}

// A caption goes with the item after it: into a figure's PNG (taller by
// the caption), a view's HTML file, or as a line above anything else.
func TestShowCaptionsTheNextItem(t *testing.T) {
	fig, err := viz.Bars([]string{"a", "b"}, []float64{1, -1}, "dla", "logit")
	require.NoError(t, err)
	height := func(path string) int {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		img, err := png.Decode(f)
		require.NoError(t, err)
		return img.Bounds().Dy()
	}
	_, plain := showFiles(t, fig)
	_, captioned := showFiles(t, nb.Caption("L3H0 ablated"), fig)
	require.Len(t, captioned, 1)
	require.Greater(t, height(captioned[0]), height(plain[0]))

	nb.ShowDir = t.TempDir()
	stdout(t, func() { nb.Caption("plain run").Show(viz.TokenValues([]string{"a", "b"}, []float64{1, 2}, "loss")) })
	stdout(t, func() { nb.Show(viz.TokenValues([]string{"a", "b"}, []float64{1, 2}, "loss")) })
	entries, err := os.ReadDir(nb.ShowDir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, filepath.Join(nb.ShowDir, e.Name()))
	}
	require.Len(t, files, 2)
	pages := []string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		pages = append(pages, string(b))
	}
	require.Contains(t, pages[0], `plain run</div>`)
	require.NotContains(t, pages[1], "plain run", "the caption goes with the next item only")

	// A figure Show draws from data takes the caption as its title: no
	// heading beside it, no default title under it.
	out, made := showFiles(t, nb.Caption("dla"), []nb.Contribution{{Label: "embed", Logit: 1}, {Label: "0_attn_out", Logit: -1}})
	require.Len(t, made, 1)
	require.Equal(t, made[0]+"\n", out, "no heading besides the caption in the figure")
	_, plainMade := showFiles(t, []nb.Contribution{{Label: "embed", Logit: 1}, {Label: "0_attn_out", Logit: -1}})
	require.Equal(t, height(plainMade[0]), height(made[0]), "the caption replaces the default title rather than adding a line")

	out, _ = showFiles(t, nb.Caption("heads"), nb.Table{Header: []string{"head"}, Rows: [][]string{{"L0H0"}}}, nb.Caption("alone"))
	require.Equal(t, "heads\nhead\nL0H0\nalone\n", out)
}

func TestReprQuotesAsPython(t *testing.T) {
	require.Equal(t, `' err'`, nb.Repr(" err"))
	require.Equal(t, `"'s"`, nb.Repr("'s"))
	require.Equal(t, `'say "it\'s"'`, nb.Repr(`say "it's"`))
	require.Equal(t, `' {\n'`, nb.Repr(` {\n`), "a piece's escapes stay as written")
	m := nb.Open("")
	require.Equal(t, "logit(' err') − logit(' nil')", m.LogitDiffName(" err", " nil"))
}
