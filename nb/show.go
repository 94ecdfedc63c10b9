package nb

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/janpfeifer/gonb/gonbui"
	"gonum.org/v1/plot"

	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

// figure is what viz returns: something that encodes to an image format.
type figure interface {
	Encode(w io.Writer, format string) error
}

// view is an HTML view such as viz.HTML; one that can Save is written to
// a file outside GoNB.
type view interface {
	HTML() string
}

// Table is a table Show draws as HTML (as aligned text outside GoNB).
type Table struct {
	Header []string
	Rows   [][]string
}

// ShowDir is where Show writes figures when not running under GoNB.
var ShowDir = filepath.Join(os.TempDir(), "strata-show")

var (
	showMu sync.Mutex // Show is called from several goroutines
	shown  int
)

// Show displays each item in the notebook and never panics: a problem is
// shown as an error box with its message. It takes
//   - a figure function's results directly, nb.Show(viz.AttentionGrid(tr)):
//     the figure, or the error when there is one;
//   - any viz figure, and a gonum *plot.Plot, drawn as SVG;
//   - []float64 or []float32 as a line, [][]float64 as a heatmap, and a
//     *trace.Tensor by its shape (ShowTensor labels a capture's tokens);
//   - per-head scores (trace.Scores: HeadScores, AblateHeads, HeadDLA,
//     CopyingScores) as a layer x head heatmap, and a ranking of heads or
//     neurons (.Top(k)) as a table;
//   - DLA's []Contribution as bars, one per component;
//   - an HTML view (viz.HTML) as itself;
//   - a *trace.Trace as a table of what was captured;
//   - a Table, or [][]string whose first row is the header, as a table;
//   - a string as Markdown, and an error as an error box.
//
// Outside GoNB it writes figures as PNG files and views as HTML files
// under ShowDir and prints their paths, and prints everything else.
//
// A Caption captions the item after it, nb.Show(nb.Caption("DLA"),
// parts): written above a figure or view, in larger type than its title,
// and kept in the PNG or HTML file written outside GoNB; shown as a
// heading above anything else. A Caption with nothing after it is shown
// alone. For a figure call's (figure, error), which Go passes on only as a
// call's whole arguments, Caption's Show method takes it:
// nb.Caption("ablated").Show(viz.TokenLoss(tr)).
func Show(items ...any) {
	var caption Caption
	for i, it := range items {
		if c, ok := it.(Caption); ok {
			if caption != "" { // two in a row: the first captions nothing
				showOne(caption, "")
			}
			caption = c
			continue
		}
		// (nil, err) from a figure function: the error says it all.
		if isNil(it) && i+1 < len(items) {
			if err, ok := items[i+1].(error); ok && err != nil {
				continue
			}
		}
		showOne(it, caption)
		caption = ""
	}
	if caption != "" {
		showOne(caption, "")
	}
}

// Caption is a caption for the item after it in Show: what this figure
// or view shows, beside others like it.
type Caption string

// Show shows items with the caption on the first:
// nb.Caption("L3H0 ablated").Show(viz.TokenLoss(tr)).
func (c Caption) Show(items ...any) { Show(append([]any{c}, items...)...) }

// ShowTensor shows the tensor tr captured under name, positions labelled
// by token (viz.Captured): a layer's attention pattern or scores as a tile
// per head, queries down and keys across.
func ShowTensor(tr *trace.Trace, name string) {
	if tr == nil {
		Show(errors.New("nb.ShowTensor: a nil trace"))
		return
	}
	Show(viz.Captured(tr, name))
}

func showOne(it any, caption Caption) {
	defer func() {
		if r := recover(); r != nil {
			showError(fmt.Errorf("nb.Show: showing a %T failed: %v", it, r))
		}
	}()
	if err := show(it, caption); err != nil {
		showError(err)
	}
}

// isNil is true for nil and for a nil pointer, slice, map or function in
// an interface, which a type switch does not catch.
func isNil(it any) bool {
	if it == nil {
		return true
	}
	switch v := reflect.ValueOf(it); v.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Func, reflect.Interface, reflect.Chan:
		return v.IsNil()
	}
	return false
}

func show(it any, caption Caption) error {
	if it == nil { // a nil error: nb.Show(m.LogitLens(tr)) that went well
		return nil
	}
	if isNil(it) {
		return fmt.Errorf("nb.Show: a nil %T, nothing to show", it)
	}
	// A figure or view carries its caption; anything else has it shown
	// above as a heading.
	if f, ok, err := asFigure(it, string(caption)); ok {
		if err != nil {
			return err
		}
		return showFigure(f)
	}
	if h, ok := it.(viz.HTML); ok {
		return showView(h.WithCaption(string(caption)))
	}
	if caption != "" {
		showHeading(caption)
	}
	switch x := it.(type) {
	case Caption:
		showHeading(x)
	case error:
		return x
	case figure:
		return showFigure(x)
	case trace.HeadList:
		t := Table{Header: []string{"head", "score"}}
		for _, h := range x {
			t.Rows = append(t.Rows, []string{fmt.Sprintf("L%dH%d", h.Layer, h.Head), fmt.Sprintf("%.3f", h.Score)})
		}
		return showTable(t)
	case NeuronList:
		t := Table{Header: []string{"neuron", "score"}}
		for _, n := range x {
			t.Rows = append(t.Rows, []string{fmt.Sprintf("L%dN%d", n.Layer, n.Neuron), fmt.Sprintf("%+.3f", n.Score)})
		}
		return showTable(t)
	case view:
		return showView(x)
	case *trace.Trace:
		display(captureTable(x), captureText(x))
	case Table:
		return showTable(x)
	case [][]string:
		t := Table{}
		if len(x) > 0 {
			t = Table{Header: x[0], Rows: x[1:]}
		}
		return showTable(t)
	case string:
		if gonbui.IsNotebook {
			gonbui.DisplayMarkdown(x)
			gonbui.Sync()
		} else {
			fmt.Println(x)
		}
	default:
		return fmt.Errorf("nb.Show: cannot show a %T: it shows figures, *plot.Plot, []float64, [][]float64, trace.Scores, trace.HeadList, nb.NeuronList, *trace.Tensor, *trace.Trace, HTML views, nb.Table, [][]string, strings and errors", it)
	}
	return nil
}

// asFigure draws the items Show draws as viz figures, captioned; ok is
// false for any other item. A figure Show draws itself takes the caption
// as its title: its default title under the caption said the same twice
// ("direct logit attribution of each component" under "direct logit
// attribution to logit(' err') − logit(' nil')").
func asFigure(it any, caption string) (f *viz.Figure, ok bool, err error) {
	title := func(def string) string {
		if caption != "" {
			return caption
		}
		return def
	}
	switch x := it.(type) {
	case *viz.Figure:
		return x.WithCaption(caption), true, nil
	case *plot.Plot:
		return viz.Plot(x, 0, 0).WithCaption(caption), true, nil
	case []float64:
		f, err = viz.Line(x, title(""))
	case []float32:
		f, err = viz.Tensor(&trace.Tensor{Shape: []int{len(x)}, Data: x}, title(""))
	case [][]float64:
		f, err = viz.Heatmap(x, nil, nil, title(""))
	case trace.Scores:
		f, err = viz.HeadHeatmap(x, title("score of each head"), "score")
	case []Contribution:
		labels, values := make([]string, len(x)), make([]float64, len(x))
		for i, c := range x {
			labels[i], values[i] = c.Label, c.Logit
		}
		f, err = viz.Bars(labels, values, title("direct logit attribution of each component"), "contribution to the logit (difference)")
	case *trace.Tensor:
		f, err = viz.Tensor(x, title(""))
	default:
		return nil, false, nil
	}
	return f, true, err
}

// showFile writes a file named kind-NNN.ext under ShowDir and prints its
// path. NNN is the next number no file has: another run's figures in the
// same folder stay.
func showFile(kind, ext string, write func(path string) error) error {
	showMu.Lock()
	defer showMu.Unlock()
	if err := os.MkdirAll(ShowDir, 0o755); err != nil {
		return err
	}
	var path string
	for {
		shown++
		path = filepath.Join(ShowDir, fmt.Sprintf("%s-%03d.%s", kind, shown, ext))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		f.Close() // the number is taken; write replaces the empty file
		break
	}
	written := false
	defer func() {
		if !written { // an error, or a panic Show recovers from
			os.Remove(path)
		}
	}()
	if err := write(path); err != nil {
		return err
	}
	written = true
	fmt.Println(path)
	return nil
}

func showView(v view) error {
	if gonbui.IsNotebook {
		displayHTML(v.HTML())
		return nil
	}
	if s, ok := v.(interface{ Save(string) error }); ok {
		return showFile("view", "html", s.Save)
	}
	fmt.Println(v.HTML())
	return nil
}

func showFigure(f figure) error {
	if !gonbui.IsNotebook {
		return showFile("figure", "png", func(path string) error {
			return trace.WriteAtomic(path, func(w io.Writer) error { return f.Encode(w, "png") })
		})
	}
	h, err := figureHTML(f)
	if err != nil {
		return err
	}
	displayHTML(h)
	return nil
}

// figureHTML is f as inline SVG at its own size: a notebook's style sheet
// shrinks SVG to the output's width (max-width: 100%), which would draw it
// smaller than its PNG; a figure wider than the output scrolls instead.
func figureHTML(f figure) (string, error) {
	var buf bytes.Buffer
	if err := f.Encode(&buf, "svg"); err != nil {
		return "", err
	}
	svg := buf.String()
	i := strings.Index(svg, "<svg ")
	if i < 0 {
		return "", fmt.Errorf("nb.Show: the figure's SVG has no <svg> element")
	}
	if err := exportPNG(f); err != nil {
		return "", err
	}
	return `<div class="strata-figure" style="overflow-x:auto"><svg style="max-width:none;height:auto" ` + svg[i+len("<svg "):] + `</div>`, nil
}

// ExportEnv names a folder where Show, in a notebook, also writes each
// figure it displays as a PNG (figure-001.png, ...: numbered across the
// notebook's cells, which run as separate processes), so that a test can
// compare what the browser draws with the PNG export.
const ExportEnv = "STRATA_SHOW_EXPORT"

func exportPNG(f figure) error {
	dir := os.Getenv(ExportEnv)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("nb.Show: %s: %w", ExportEnv, err)
	}
	done, err := filepath.Glob(filepath.Join(dir, "figure-*.png"))
	if err != nil {
		return err
	}
	path := filepath.Join(dir, fmt.Sprintf("figure-%03d.png", len(done)+1))
	return trace.WriteAtomic(path, func(w io.Writer) error { return f.Encode(w, "png") })
}

// showHeading shows a caption on its own, as a figure's caption looks.
func showHeading(c Caption) {
	display(viz.HTML{}.WithCaption(string(c)).HTML(), string(c)+"\n")
}

func showError(err error) {
	if !gonbui.IsNotebook {
		fmt.Println("error:", err)
		return
	}
	displayHTML(errorHTML(err))
}

func errorHTML(err error) string {
	return `<div style="border:1px solid #e0b4b4;background:#fff6f6;color:#9f3a38;padding:6px 10px;margin:4px 0;` +
		`font-family:monospace;white-space:pre-wrap">` + html.EscapeString(err.Error()) + `</div>`
}

func display(htmlText, text string) {
	if !gonbui.IsNotebook {
		fmt.Print(text)
		return
	}
	displayHTML(htmlText)
}

// showTable shows a table whose rows are as wide as its header (or, with
// no header, as one another): a cell more or less would shift the rest.
func showTable(t Table) error {
	width, widthOf := len(t.Header), "the header"
	if t.Header == nil && len(t.Rows) > 0 {
		width, widthOf = len(t.Rows[0]), "row 0"
	}
	for i, r := range t.Rows {
		if len(r) != width {
			return fmt.Errorf("nb.Show: table row %d has %d cells, and %s %d", i, len(r), widthOf, width)
		}
	}
	display(tableHTML(t), tableText(t))
	return nil
}

func tableHTML(t Table) string {
	var b strings.Builder
	b.WriteString(`<table>`)
	row := func(cells []string, tag string) {
		b.WriteString("<tr>")
		for _, c := range cells {
			fmt.Fprintf(&b, "<%s>%s</%s>", tag, html.EscapeString(c), tag)
		}
		b.WriteString("</tr>")
	}
	if t.Header != nil {
		row(t.Header, "th")
	}
	for _, r := range t.Rows {
		row(r, "td")
	}
	b.WriteString("</table>")
	return b.String()
}

func tableText(t Table) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if t.Header != nil {
		fmt.Fprintln(w, strings.Join(t.Header, "\t"))
	}
	for _, r := range t.Rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
	return b.String()
}

// captureTable is a trace's tokens and captured tensors as HTML.
func captureTable(tr *trace.Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<p><b>%s</b> (%s, %d layers) on %s, %d tokens from position %d</p>",
		html.EscapeString(tr.Model.Name), tr.Model.Arch, tr.Model.Layers, html.EscapeString(tr.Backend), len(tr.Tokens), tr.Pos0)
	b.WriteString(`<p style="font-family:monospace">`)
	for i, p := range tr.Pieces {
		// Spaces as ·, as the token views show them: a space in a box read
		// as a gap between tokens.
		fmt.Fprintf(&b, `<span title="id %d" style="background:#eef;margin:1px;padding:0 2px;white-space:pre">%s</span>`, tr.Tokens[i], html.EscapeString(strings.ReplaceAll(p, " ", "·")))
	}
	// Jupyter right-aligns table cells, for numbers; names read left-aligned.
	b.WriteString(`</p><table><tr><th style="text-align:left">capture point</th><th style="text-align:left">shape</th></tr>`)
	for _, n := range tr.Names {
		fmt.Fprintf(&b, `<tr><td style="text-align:left"><code>%s</code></td><td style="text-align:left">%v</td></tr>`, n, tr.Shape(n))
	}
	b.WriteString("</table>")
	return b.String()
}

// captureText lists a trace's tokens (as the tokenizer escapes them, not
// escaped again) and captured tensors.
func captureText(tr *trace.Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: %d tokens [", tr.Model.Name, tr.Backend, len(tr.Tokens))
	for i, p := range tr.Pieces {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "\"%s\"", p)
	}
	b.WriteString("]\n")
	for _, n := range tr.Names {
		fmt.Fprintf(&b, "  %-40s %v\n", n, tr.Shape(n))
	}
	return b.String()
}

// displayHTML shows HTML as the cell's output and waits until GoNB has it:
// a cell is a process, and a display still in the pipe when it exits is
// lost (a test saw a notebook's last figure go missing under load).
func displayHTML(h string) {
	gonbui.DisplayHTML(h)
	gonbui.Sync()
}
