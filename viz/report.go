package viz

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"os"
	"path/filepath"

	"github.com/stratalab/strata/trace"
)

//go:embed report.html
var reportHTML string

var reportTemplate = template.Must(template.New("report").Parse(reportHTML))

// minRepeat is the shortest repeat Report draws induction scores for: text
// often ends with a short repeat by chance ("the the", "}\n}\n").
const minRepeat = 4

// Report writes the report of a trace into the folder dir: index.html, a
// self-contained page of model facts, the tokens, every figure the trace
// allows (inline, and beside it as NAME.png and NAME.svg) and the list of
// captures with their shapes and any NaN or Inf they hold. Figures that
// cannot be drawn (most often for want of a capture) are listed with the
// reason, e.g. which capture would draw them; only failing to write files
// is an error. The folder is replaced as a whole (trace.ReplaceFolder):
// files of another trace never stay beside the report, while trace.npz and
// manifest.json of this same trace (from Trace.Save) are kept.
func Report(tr *trace.Trace, dir string) error {
	if tr == nil {
		return nilTrace("Report")
	}
	return tr.ReplaceFolder(dir, func(tmp string) error { return writeReport(context.Background(), tr, tmp) })
}

// Export writes the whole trace folder that `strata trace` makes, in one
// replacement: trace.npz and manifest.json (Trace.Save) and the report.
func Export(tr *trace.Trace, dir string) error { return ExportContext(context.Background(), tr, dir) }

// ExportContext is Export that ctx can stop before the folder is replaced:
// then the folder holds what it held.
func ExportContext(ctx context.Context, tr *trace.Trace, dir string) error {
	if tr == nil {
		return nilTrace("Export")
	}
	return tr.ReplaceFolder(dir, func(tmp string) error {
		if err := tr.WriteFiles(tmp); err != nil {
			return err
		}
		if err := writeReport(ctx, tr, tmp); err != nil {
			return err
		}
		return ctx.Err()
	})
}

// writeReport writes the report's files into dir, a new folder, unless ctx
// ends first.
func writeReport(ctx context.Context, tr *trace.Trace, dir string) error {
	page := reportPage{Model: tr.Model, Backend: tr.Backend, Pos0: tr.Pos0}
	for i, id := range tr.Tokens {
		page.Tokens = append(page.Tokens, reportToken{Pos: tr.Pos0 + i, ID: id, Text: showPiece(pieceAt(tr, i))})
	}
	for _, n := range tr.Names {
		c := reportCapture{Name: n, Shape: fmt.Sprint(tr.Shape(n))}
		if nf := tr.NonFiniteIn(n); nf.Any() {
			c.NonFinite = nf.String()
			page.NonFiniteCaptures++
			if page.FirstNonFinite == nil {
				page.FirstNonFinite = &reportNonFinite{Capture: n, Layer: trace.LayerOf(n), Counts: nf.String()}
			}
		}
		page.Captures = append(page.Captures, c)
	}
	for _, e := range reportFigures(tr) {
		if err := ctx.Err(); err != nil {
			return err
		}
		fig, png, svg, err := e.draw()
		if err != nil {
			page.Skipped = append(page.Skipped, reportSkip{Name: e.name, Why: err.Error()})
			continue
		}
		for ext, b := range map[string][]byte{".png": png, ".svg": svg} {
			if err := os.WriteFile(filepath.Join(dir, e.name+ext), b, 0o644); err != nil {
				return err
			}
		}
		page.Figures = append(page.Figures, reportFigure{
			Name: e.name, Title: fig.Title, Note: e.note, Width: int(fig.Width.Dots(PNGDPI) + 0.5),
			PNG: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png)),
		})
	}
	for _, v := range reportViews(tr) {
		h, err := v.make()
		if err != nil {
			page.Skipped = append(page.Skipped, reportSkip{Name: v.name, Why: err.Error()})
			continue
		}
		if err := h.Save(filepath.Join(dir, v.name+".html")); err != nil {
			return err
		}
		page.Views = append(page.Views, reportView{Name: v.name, Title: v.title, Note: v.note})
	}
	var html bytes.Buffer
	if err := reportTemplate.Execute(&html, page); err != nil {
		return fmt.Errorf("viz: report page: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "index.html"), html.Bytes(), 0o644)
}

type reportEntry struct {
	name, note string
	make       func() (*Figure, error)
}

// draw makes the figure and renders it as PNG and SVG.
func (e reportEntry) draw() (*Figure, []byte, []byte, error) {
	fig, err := e.make()
	if err != nil {
		return nil, nil, nil, err
	}
	var png, svg bytes.Buffer
	if err := fig.Encode(&png, "png"); err != nil {
		return nil, nil, nil, err
	}
	if err := fig.Encode(&svg, "svg"); err != nil {
		return nil, nil, nil, err
	}
	return fig, png.Bytes(), svg.Bytes(), nil
}

// reportFigures lists the report's figures in page order. The single
// attention head shown is the strongest previous-token head, the KV cache
// that of the last layer captured.
func reportFigures(tr *trace.Trace) []reportEntry {
	layer, head, scored := strongestPrevTokenHead(tr)
	headCaption := fmt.Sprintf("Layer %d head %d, the head that attends most to the previous token.", layer, head)
	if !scored {
		headCaption = fmt.Sprintf("Layer %d head %d: with no query past the first position, no head is scored for attending to the previous token.", layer, head)
	}
	kvLayer := tr.Model.Layers - 1
	for kvLayer > 0 && !tr.Has(trace.LayerPoint(kvLayer, "attn.cache_k")) {
		kvLayer--
	}
	entries := []reportEntry{
		{"attention_grid", "Every head's attention pattern; rows are queries, columns keys.",
			func() (*Figure, error) { return AttentionGrid(tr) }},
		{"attention_head", headCaption,
			func() (*Figure, error) { return AttentionHead(tr, layer, head) }},
		{"prev_token_scores", "Mean attention from each position to the one before it.",
			func() (*Figure, error) { return PrevTokenScores(tr) }},
	}
	if p := trace.RepeatPeriod(tr.Tokens); p >= minRepeat {
		entries = append(entries, reportEntry{"induction_scores",
			fmt.Sprintf("The prompt ends with a %d-token sequence repeated; the score is the attention from the second copy to the token after the first copy's match.", p),
			func() (*Figure, error) { return InductionScores(tr, p) }})
	}
	if tr.Model.Experts > 0 {
		entries = append(entries, reportEntry{"expert_usage", "Which experts each layer's router chose: the share of the prompt's tokens each expert takes.",
			func() (*Figure, error) { return ExpertUsage(tr) }})
	}
	return append(entries,
		reportEntry{"resid_norms", "L2 norm of the residual stream after each layer.",
			func() (*Figure, error) { return ResidNorms(tr) }},
		reportEntry{"attn_mlp_norms", "How much attention and the MLP write into the residual stream, by layer.",
			func() (*Figure, error) { return AttnMLPNorms(tr) }},
		reportEntry{"logit_lens", "Final norm and unembedding applied to each layer's output: the top next token and its probability (manifest.json's logit_lens lists every cell's token).",
			func() (*Figure, error) { return LogitLens(tr) }},
		reportEntry{"kv_cache", fmt.Sprintf("Layer %d, KV head 0: what later tokens will attend to.", kvLayer),
			func() (*Figure, error) { return KVCache(tr, kvLayer, 0) }},
		reportEntry{"pca", "Each position's hidden state after each layer on that layer's first two principal components; a position whose norm is over twice its layer's median (an attention sink) is left out, as the figure's title then says.",
			func() (*Figure, error) { return PCA(tr) }},
	)
}

// maxViewTokens bounds the prompts whose attention view the report saves:
// the page holds every pattern, layers x heads x T x T numbers.
const maxViewTokens = 256

type reportViewEntry struct {
	name, title, note string
	make              func() (HTML, error)
}

// reportViews lists the interactive views the report saves beside itself.
func reportViews(tr *trace.Trace) []reportViewEntry {
	return []reportViewEntry{
		{"attention_view", "Attention, interactive", "Hover a token to see what it attends to and what attends to it; pick a layer and head.",
			func() (HTML, error) {
				if len(tr.Tokens) > maxViewTokens {
					return HTML{}, fmt.Errorf("viz: the prompt has %d tokens; the report saves the attention view up to %d (viz.AttentionView(tr, layers...) draws chosen layers)", len(tr.Tokens), maxViewTokens)
				}
				return AttentionView(tr)
			}},
		{"token_loss", "Loss per token", "Each token coloured by the loss of predicting it from the tokens before.",
			func() (HTML, error) { return TokenLoss(tr) }},
	}
}

// strongestPrevTokenHead is the head with the highest previous-token
// score, or head 0 of the first layer with a pattern, not scored, when
// there are no scores (a one-token prompt).
func strongestPrevTokenHead(tr *trace.Trace) (layer, head int, scored bool) {
	layer, best := -1, -1.0
	for l := range tr.Model.Layers {
		p, err := copyOf(tr, trace.LayerPoint(l, "attn.hook_pattern"))
		if err != nil {
			continue
		}
		if layer < 0 {
			layer = l
		}
		scores, err := trace.PrevTokenScores(p)
		if err != nil {
			continue
		}
		for h, s := range scores {
			if s > best {
				best, layer, head, scored = s, l, h, true
			}
		}
	}
	return max(layer, 0), head, scored
}

type reportPage struct {
	Model    trace.Model
	Backend  string
	Pos0     int
	Tokens   []reportToken
	Figures  []reportFigure
	Skipped  []reportSkip
	Views    []reportView
	Captures []reportCapture
	// FirstNonFinite is where the trace first holds NaN or Inf, if it does.
	FirstNonFinite    *reportNonFinite
	NonFiniteCaptures int
}

type reportNonFinite struct {
	Capture string
	Layer   int // -1: not a layer's capture
	Counts  string
}

type reportToken struct {
	Pos  int
	ID   int32
	Text string
}

type reportFigure struct {
	Name, Title, Note string
	Width             int
	PNG               template.URL
}

type reportSkip struct{ Name, Why string }

type reportView struct{ Name, Title, Note string }

type reportCapture struct{ Name, Shape, NonFinite string }
