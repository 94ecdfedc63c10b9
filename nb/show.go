package nb

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/janpfeifer/gonb/gonbui"

	"github.com/stratalab/strata/gpu/trace"
)

// figure is what viz returns: something that encodes to an image format.
type figure interface {
	Encode(w io.Writer, format string) error
}

// ShowDir is where Show writes figures when not running under GoNB.
var ShowDir = filepath.Join(os.TempDir(), "strata-show")

var shown int

// Show displays each item in the notebook: figures (as SVG), traces (as a
// table of what was captured), strings (as Markdown) and errors. It takes a
// figure function's results directly: nb.Show(viz.AttentionGrid(tr)).
// Outside GoNB it writes figures as PNG files under ShowDir and prints
// their paths, and prints everything else.
func Show(items ...any) {
	for _, it := range items {
		if err := show(it); err != nil {
			display("", fmt.Sprintf("<pre style=\"color:#b00\">%s</pre>", html.EscapeString(err.Error())), err.Error())
		}
	}
}

func show(it any) error {
	switch x := it.(type) {
	case nil:
		return nil
	case error:
		return x
	case figure:
		if !gonbui.IsNotebook {
			shown++
			path := filepath.Join(ShowDir, fmt.Sprintf("figure-%03d.png", shown))
			if err := os.MkdirAll(ShowDir, 0o755); err != nil {
				return err
			}
			if err := trace.WriteAtomic(path, func(w io.Writer) error { return x.Encode(w, "png") }); err != nil {
				return err
			}
			fmt.Println(path)
			return nil
		}
		var buf bytes.Buffer
		if err := x.Encode(&buf, "svg"); err != nil {
			return err
		}
		gonbui.DisplaySVG(buf.String())
	case *trace.Trace:
		display(captureTable(x), "", captureText(x))
	case string:
		if gonbui.IsNotebook {
			gonbui.DisplayMarkdown(x)
		} else {
			fmt.Println(x)
		}
	default:
		return fmt.Errorf("nb.Show: cannot show a %T", it)
	}
	return nil
}

func display(htmlText, errHTML, text string) {
	if !gonbui.IsNotebook {
		fmt.Println(text)
		return
	}
	if errHTML != "" {
		htmlText = errHTML
	}
	gonbui.DisplayHTML(htmlText)
}

// captureTable is a trace's tokens and captured tensors as HTML.
func captureTable(tr *trace.Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<p><b>%s</b> (%s, %d layers) on %s, %d tokens from position %d</p>",
		html.EscapeString(tr.Model.Name), tr.Model.Arch, tr.Model.Layers, html.EscapeString(tr.Backend), len(tr.Tokens), tr.Pos0)
	b.WriteString(`<p style="font-family:monospace">`)
	for i, p := range tr.Pieces {
		fmt.Fprintf(&b, `<span title="id %d" style="background:#eef;margin:1px;padding:0 2px">%s</span>`, tr.Tokens[i], html.EscapeString(p))
	}
	b.WriteString("</p><table><tr><th>capture point</th><th>shape</th></tr>")
	for _, n := range tr.Names {
		fmt.Fprintf(&b, "<tr><td><code>%s</code></td><td>%v</td></tr>", n, tr.Tensors[n].Shape)
	}
	b.WriteString("</table>")
	return b.String()
}

func captureText(tr *trace.Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: %d tokens %q\n", tr.Model.Name, tr.Backend, len(tr.Tokens), tr.Pieces)
	for _, n := range tr.Names {
		fmt.Fprintf(&b, "  %-40s %v\n", n, tr.Tensors[n].Shape)
	}
	return b.String()
}
