package viz

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/stratalab/strata/trace"
)

// ColorScale fixes the values a token view's colours run over, so that
// views of several prompts or runs compare (as CircuitsVis's min_value and
// max_value do). Lo 0 is for values that are all >= 0: white at 0 to red at
// Hi. A negative Lo makes the scale signed: blue at -L, white at 0, red at
// L, for L the larger of -Lo and |Hi|. Values past the ends keep the
// deepest colours.
type ColorScale struct{ Lo, Hi float64 }

// TokenValues colours each token by a value, as CircuitsVis's
// colored_tokens does: white to red for values that are all >= 0 (loss),
// blue through white to red, around 0, when some are negative
// (attribution). values[i] belongs to pieces[i]; NaN leaves a token plain.
// Hovering a token shows its value. The colours run over the values' own
// range unless a scale is given.
func TokenValues(pieces []string, values []float64, label string, scale ...ColorScale) (HTML, error) {
	if len(values) != len(pieces) {
		return HTML{}, fmt.Errorf("viz: TokenValues got %d values for %d tokens", len(values), len(pieces))
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if lo > hi {
		lo, hi = 0, 0
	}
	s, err := colorScale(lo, hi, scale)
	if err != nil {
		return HTML{}, fmt.Errorf("viz: TokenValues: %w", err)
	}
	signed := s.Lo < 0
	lim := math.Max(math.Abs(s.Lo), math.Abs(s.Hi))
	var b strings.Builder
	fmt.Fprintf(&b, `<div class="strata-tokens" style="font-family:monospace;line-height:1.9;white-space:pre-wrap">`)
	// The scale: its colours from end to end, and what they stand for.
	from, mid := 0.0, ""
	if signed {
		from, mid = -lim, valueColor(0, lim, true)+", "
	}
	fmt.Fprintf(&b, `<div style="font:12px sans-serif;color:#555">%s: %.3g to %.3g <span style="margin-left:8px">%.3g</span>`+
		`<span class="strata-scale" style="display:inline-block;width:90px;height:10px;margin:0 4px;vertical-align:middle;border:1px solid #ccc;background:linear-gradient(to right, %s, %s%s)"></span>%.3g</div>`,
		html.EscapeString(label), lo, hi, from, valueColor(from, lim, signed), mid, valueColor(lim, lim, signed), lim)
	for i, p := range pieces {
		v := values[i]
		bg, fg := "transparent", "#000"
		// Pieces come escaped for display (\n, \t, \\): %q would escape
		// them again; only a quote needs it.
		title := fmt.Sprintf(`%d "%s"`, i, strings.ReplaceAll(p, `"`, `\"`))
		if !math.IsNaN(v) {
			bg = valueColor(v, lim, signed)
			title += fmt.Sprintf(": %.4g", v)
			if math.Abs(v) > 0.6*lim && (v > 0 || signed) { // black on the darkest reds and blues is hard to read
				fg = "#fff"
			}
		}
		fmt.Fprintf(&b, `<span data-i="%d" data-v="%g" title="%s" style="background:%s;color:%s;border:1px solid #ddd;margin:0 1px;padding:0 2px">%s</span>`,
			i, v, html.EscapeString(title), bg, fg, html.EscapeString(showPiece(p)))
		if strings.HasSuffix(p, "\n") {
			b.WriteString("<br>")
		} else {
			b.WriteString("&#8203;") // a place to wrap: the spans have no space between them
		}
	}
	b.WriteString("</div>")
	return HTML{Title: label, Body: b.String()}, nil
}

// colorScale is the scale given (at most one, finite, Lo <= Hi, Lo <= 0,
// not both 0) or, without one, the values' own range lo to hi.
func colorScale(lo, hi float64, given []ColorScale) (ColorScale, error) {
	switch {
	case len(given) > 1:
		return ColorScale{}, fmt.Errorf("%d colour scales given; at most one", len(given))
	case len(given) == 0:
		if lo == 0 && hi == 0 {
			hi = 1
		}
		return ColorScale{lo, hi}, nil
	}
	s := given[0]
	if math.IsNaN(s.Lo) || math.IsNaN(s.Hi) || math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) || s.Lo > s.Hi || s.Lo > 0 || s.Lo == 0 && s.Hi == 0 {
		return ColorScale{}, fmt.Errorf("colour scale %g to %g: want finite Lo <= Hi, Lo at most 0 (the colours start from white at 0), not both 0", s.Lo, s.Hi)
	}
	return s, nil
}

// valueColor is white at 0 fading to red (positive) or blue (negative,
// on a signed scale; white on another) at |v| = lim: shade's colours.
func valueColor(v, lim float64, signed bool) string {
	if !signed {
		v = math.Max(v, 0)
	}
	c := shade(v / lim)
	return fmt.Sprintf("rgb(%d,%d,%d)", c.R, c.G, c.B)
}

// TokenLoss colours each token of a trace by the loss of predicting it
// (the first token, which nothing predicts, stays plain); the trace needs
// every position's logits (nb.AllLogits()). Give two runs the same scale
// (ColorScale{0, 10}, say) to compare them.
func TokenLoss(tr *trace.Trace, scale ...ColorScale) (HTML, error) {
	if tr == nil {
		return HTML{}, nilTrace("TokenLoss")
	}
	loss, err := tr.TokenLoss()
	if err != nil {
		return HTML{}, fmt.Errorf("viz: TokenLoss: %w", err)
	}
	return TokenValues(tr.Pieces, append([]float64{math.NaN()}, loss...), "loss of predicting each token (nats)", scale...)
}
