package viz

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

func TestTokenValuesColoursBySign(t *testing.T) {
	h, err := TokenValues([]string{"a", " b", "\n", "c"}, []float64{0, 2, math.NaN(), 1}, "loss")
	require.NoError(t, err)
	body := h.HTML()
	require.Contains(t, body, "loss: 0 to 2")
	require.Contains(t, body, `background:rgb(178,24,43)`, "the largest value is full red")
	require.Contains(t, body, `background:rgb(255,255,255)`, "zero is white")
	require.Contains(t, body, `background:transparent`, "NaN is plain")
	require.Contains(t, body, "·b", "spaces are shown")
	require.Contains(t, body, "↵</span><br>", "newlines break the line")
	require.Contains(t, body, `0</span><span class="strata-scale"`, "the scale starts at 0")
	require.Contains(t, body, `linear-gradient(to right, rgb(255,255,255), rgb(178,24,43))"></span>2</div>`, "white to full red at 2")

	h, err = TokenValues([]string{"x", "y"}, []float64{-3, 1.5}, "attribution")
	require.NoError(t, err)
	require.Contains(t, h.HTML(), `background:rgb(33,102,172)`, "the most negative is full blue")
	require.Contains(t, h.HTML(), `background:rgb(217,140,149)`, "half of red's distance from white")
	require.Contains(t, h.HTML(), `-3</span><span class="strata-scale"`, "a signed scale runs from -3")
	require.Contains(t, h.HTML(), `linear-gradient(to right, rgb(33,102,172), rgb(255,255,255), rgb(178,24,43))"></span>3</div>`, "blue, white, red")

	_, err = TokenValues([]string{"x"}, nil, "")
	require.ErrorContains(t, err, "0 values for 1 tokens")

	// Pieces come escaped for display (tokenizer.Piece): the hover text
	// shows them as they are, not escaped again.
	h, err = TokenValues([]string{`{\n`}, []float64{0.5}, "loss")
	require.NoError(t, err)
	require.Contains(t, h.HTML(), `title="0 &#34;{\n&#34;: 0.5"`)
	h, err = TokenValues([]string{`"`}, []float64{0.5}, "loss")
	require.NoError(t, err)
	require.Contains(t, h.HTML(), `title="0 &#34;\&#34;&#34;: 0.5"`, "a quote piece is escaped")
}

func TestTokenLossNeedsAllLogits(t *testing.T) {
	m := synthModel(t)
	tr := prefill(t, m, synthTokens[:6], engine.CaptureOf("blocks.0.hook_resid_post"))
	h, err := TokenLoss(tr)
	require.NoError(t, err)
	loss, err := tr.TokenLoss()
	require.NoError(t, err)
	require.Equal(t, len(tr.Tokens), strings.Count(h.HTML(), "<span data-i="))
	require.Contains(t, h.HTML(), `data-v="NaN"`, "the first token has no loss")
	require.Contains(t, h.HTML(), "data-v=\""+strconv.FormatFloat(loss[0], 'g', -1, 64)+"\"", "token 1 carries loss[0]")

	l := tr.Tensor("logits")
	tr.Put("logits", &trace.Tensor{Shape: []int{1, l.Shape[1]}, Data: l.Data[:l.Shape[1]]})
	_, err = TokenLoss(tr)
	require.ErrorContains(t, err, "nb.AllLogits()")
}

func TestAttentionViewMissingPattern(t *testing.T) {
	_, err := AttentionView(trace.New())
	require.ErrorContains(t, err, `capture "blocks.*.attn.hook_pattern"`)
	// A layer past the model's was reported as not captured.
	_, err = AttentionView(handTrace([]float32{1, 0, 0, 1, 0, 0, 1, 0, 0}), 0, 9)
	require.EqualError(t, err, "viz: AttentionView: layer 9 is out of range: the model has 1 layers (0-0)")
}

// The view in a real browser: hover a token, then read back the weights
// the page painted on both rows and compare them with the pattern.
func TestAttentionViewReactsToHover(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the hover check needs it")
	}
	m := synthModel(t)
	tr := prefill(t, m, synthTokens[:6], engine.CaptureOf("blocks.*.attn.hook_pattern"))
	view, err := AttentionView(tr, 1)
	require.NoError(t, err)
	require.NotContains(t, view.Page(), "http", "self-contained: nothing to fetch")
	require.Contains(t, view.Body, `shade: attention weight, 0 <span`, "the shading is explained, as a colour bar would")
	again, err := AttentionView(tr, 1)
	require.NoError(t, err)
	require.Equal(t, view, again, "a saved view is the same bytes each time")
	const focus, head = 3, 1
	// The same view twice on a page, as a notebook may show it: pick head 1
	// in the second, then hover its token 3 of the top row, as a user would.
	drive := `<script>
const v=document.querySelectorAll('.strata-attn')[1];
v.querySelector('.head[data-h="1"]').click();
v.querySelector('.row.to span[data-i="3"]').dispatchEvent(new MouseEvent('mouseover',{bubbles:true}));
</script>`
	page := filepath.Join(t.TempDir(), "view.html")
	require.NoError(t, os.WriteFile(page, []byte(strings.Replace(view.Page(), "</body>", view.Body+drive+"</body>", 1)), 0o644))
	dom, err := runChromium(t, browser, page, "")
	require.NoError(t, err, "chromium")

	p := tr.Tensor("blocks.1.attn.hook_pattern")
	weights := func(row string) []float64 {
		require.Equal(t, 2, strings.Count(dom, `class="row `+row+`"`), "each view has its %s row", row)
		i := strings.LastIndex(dom, `class="row `+row+`"`) // the second view's
		seg := dom[i:]
		seg = seg[:strings.Index(seg, "</div>")]
		var out []float64
		for _, m := range regexp.MustCompile(`data-w="([^"]*)"`).FindAllStringSubmatch(seg, -1) {
			w := math.NaN()
			if m[1] != "" {
				w, err = strconv.ParseFloat(m[1], 64)
				require.NoError(t, err)
			}
			out = append(out, w)
		}
		return out
	}
	to, from := weights("to"), weights("from")
	require.Len(t, to, 6)
	require.Len(t, from, 6)
	for k := range 6 {
		// The page carries weights rounded to 4 decimals.
		require.InDelta(t, float64(p.At(head, focus, k)), to[k], 5e-5, "token 3 attends to %d", k)
		require.InDelta(t, float64(p.At(head, k, focus)), from[k], 5e-5, "%d attends to token 3", k)
	}
	require.Contains(t, dom, "layer 1 head 1, token 3")
	// The hovered token shows its attention to itself, outlined: a fill of
	// its own hid it.
	i := strings.LastIndex(dom, `class="row to"`)
	span := dom[i:]
	span = span[strings.Index(span, `data-i="3"`):]
	span = span[:strings.Index(span, ">")]
	require.Contains(t, span, fmt.Sprintf("background: rgba(178, 24, 43, %.3g)", to[focus]), "its weight %v, as the browser rounds alpha", to[focus])
	require.Contains(t, span, "outline: rgb(224, 138, 0) solid 2px")
	first := dom[strings.Index(dom, `class="row to"`):]
	require.Equal(t, 6, strings.Count(first[:strings.Index(first, "</div>")], "<span"), "the first view drew its own tokens")
}

func TestHTMLSaveWritesThePage(t *testing.T) {
	h, err := TokenValues([]string{"a"}, []float64{1}, "x<y")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "v.html")
	require.NoError(t, h.Save(path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, h.Page(), string(got))
	require.Contains(t, h.Page(), "<title>x&lt;y</title>")
}

// A long prompt's tokens wrap inside the view's width, in both views: the
// spans have no spaces between them, so without a break opportunity the
// browser draws one line past the right edge of the notebook.
func TestTokenViewsWrapInTheirWidth(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the wrap check needs it")
	}
	m := synthModel(t)
	var tokens []int32
	for len(tokens) < 120 {
		tokens = append(tokens, synthTokens...)
	}
	tr := prefill(t, m, tokens[:120], engine.CaptureOf("blocks.*.attn.hook_pattern"))
	attn, err := AttentionView(tr, 1)
	require.NoError(t, err)
	values := make([]float64, len(tr.Pieces))
	for i := range values {
		values[i] = float64(i)
	}
	tok, err := TokenValues(tr.Pieces, values, "position")
	require.NoError(t, err)
	measure := `<script>
const wide=[...document.querySelectorAll('.row, .strata-tokens')].filter(e=>e.scrollWidth>e.clientWidth+1).length;
const tall=[...document.querySelectorAll('.row, .strata-tokens')].map(e=>e.getBoundingClientRect().height);
document.body.dataset.wide=wide; document.body.dataset.tall=Math.min(...tall);
</script>`
	page := filepath.Join(t.TempDir(), "views.html")
	require.NoError(t, os.WriteFile(page, []byte(`<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="width:500px">`+
		attn.Body+tok.Body+measure+`</body></html>`), 0o644))
	dom, err := runChromium(t, browser, page, "")
	require.NoError(t, err, "chromium")
	require.Contains(t, dom, `data-wide="0"`, "no token row is wider than the 500 px it is given")
	tall := regexp.MustCompile(`data-tall="([0-9.]+)"`).FindStringSubmatch(dom)
	require.NotNil(t, tall)
	h, err := strconv.ParseFloat(tall[1], 64)
	require.NoError(t, err)
	require.Greater(t, h, 60.0, "120 tokens take several lines in 500 px")
}

// Two runs given one scale colour equal values alike, whatever else each
// holds; values past the scale keep its deepest colour, and a negative
// value on a scale from 0 is white, not red.
func TestTokenValuesOnAGivenScale(t *testing.T) {
	color := func(h HTML, i int) string {
		m := regexp.MustCompile(`data-i="` + strconv.Itoa(i) + `" [^>]*background:(rgb\([0-9,]+\))`).FindStringSubmatch(h.HTML())
		require.NotNil(t, m, "token %d has a colour", i)
		return m[1]
	}
	scale := ColorScale{0, 8}
	clean, err := TokenValues([]string{"a", "b", "c"}, []float64{2, 4, 1}, "clean", scale)
	require.NoError(t, err)
	ablated, err := TokenValues([]string{"a", "b", "c"}, []float64{2, 8, 11}, "ablated", scale)
	require.NoError(t, err)
	require.Equal(t, color(clean, 0), color(ablated, 0), "2 is one colour on both")
	require.Equal(t, "rgb(217,140,149)", color(clean, 1), "4 is half way to red")
	require.Equal(t, "rgb(178,24,43)", color(ablated, 1), "8 is full red")
	require.Equal(t, "rgb(178,24,43)", color(ablated, 2), "11 keeps the deepest colour")
	require.Contains(t, clean.HTML(), "clean: 1 to 4", "the label still gives the values' own range")
	require.Contains(t, clean.HTML(), `linear-gradient(to right, rgb(255,255,255), rgb(178,24,43))"></span>8</div>`, "the swatch shows the scale")
	// Without the scale each run has its own: 4 is full red there.
	own, err := TokenValues([]string{"a", "b", "c"}, []float64{2, 4, 1}, "clean")
	require.NoError(t, err)
	require.Equal(t, "rgb(178,24,43)", color(own, 1))

	neg, err := TokenValues([]string{"x", "y"}, []float64{-3, 3}, "d", scale)
	require.NoError(t, err)
	require.Equal(t, "rgb(255,255,255)", color(neg, 0), "below a scale from 0: white")
	signed, err := TokenValues([]string{"x", "y"}, []float64{-3, 3}, "d", ColorScale{-6, 6})
	require.NoError(t, err)
	require.Equal(t, "rgb(144,179,214)", color(signed, 0), "half way to blue")

	for _, bad := range []ColorScale{{2, 1}, {0, 0}, {math.NaN(), 1}, {0, math.Inf(1)}, {5, 10}} {
		_, err := TokenValues([]string{"x"}, []float64{1}, "d", bad)
		require.ErrorContains(t, err, "colour scale", "%v", bad)
	}
	_, err = TokenValues([]string{"x"}, []float64{1}, "d", scale, scale)
	require.ErrorContains(t, err, "2 colour scales given")
}
