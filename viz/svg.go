package viz

import (
	"bytes"
	"fmt"
	"io"
	"regexp"

	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// svgCanvas is gonum/plot's SVG canvas with what a browser needs to draw
// the figure as the PNG canvas does; gonum/plot v0.17 writes SVG that a
// browser draws differently (see fixSVG).
type svgCanvas struct {
	*vgsvg.Canvas
	pw, ph int         // the PNG's size in pixels
	widths []vg.Length // each FillString's text width, in order
}

func (c *svgCanvas) FillString(f font.Face, pt vg.Point, s string) {
	c.widths = append(c.widths, f.Width(s))
	c.Canvas.FillString(f, pt, s)
}

func (c *svgCanvas) WriteTo(w io.Writer) (int64, error) {
	var buf bytes.Buffer
	if _, err := c.Canvas.WriteTo(&buf); err != nil {
		return 0, err
	}
	n, err := w.Write(fixSVG(buf.Bytes(), c.pw, c.ph, c.widths))
	return int64(n), err
}

var (
	svgRoot   = regexp.MustCompile(`<svg width="[^"]*" height="[^"]*"`)
	svgFamily = []byte("font-family:Liberation Sans;")
)

// fixSVG makes vgsvg's output draw in a browser as the PNG does:
//   - rasters fill their rectangle (vgsvg omits preserveAspectRatio="none",
//     so a browser fits a heatmap into a centred square);
//   - the size is the PNG's in CSS pixels, not points, so that nothing is
//     scaled by a fraction of a pixel;
//   - text keeps the width gonum/plot measured (textLength), so labels stay
//     where they were placed when the browser lacks Liberation Sans and
//     falls back to a metric-compatible font (Arial) or another one;
//   - spaces in labels are kept, as the PNG keeps them: xml:space for SVG
//     viewers, white-space:pre for browsers, which ignore xml:space and
//     collapsed the space of " s", then stretched "s" to its width;
//   - raster data are labelled as the PNGs they are.
func fixSVG(svg []byte, pw, ph int, widths []vg.Length) []byte {
	svg = svgRoot.ReplaceAll(svg, fmt.Appendf(nil, `<svg width="%dpx" height="%dpx" xml:space="preserve"`, pw, ph))
	svg = bytes.ReplaceAll(svg, []byte("<image "), []byte(`<image preserveAspectRatio="none" `))
	svg = bytes.ReplaceAll(svg, []byte("data:image/jpg;"), []byte("data:image/png;"))
	svg = bytes.ReplaceAll(svg, svgFamily, []byte("white-space:pre;font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;"))
	// Text is escaped, so "<text " only starts an element: one per
	// FillString. Should that ever not hold, lengths are left out.
	parts := bytes.Split(svg, []byte("<text "))
	if len(parts)-1 != len(widths) {
		return svg
	}
	var out bytes.Buffer
	out.Write(parts[0])
	for i, p := range parts[1:] {
		out.WriteString("<text ")
		if w := widths[i]; w > 0 {
			fmt.Fprintf(&out, `textLength="%.4g" lengthAdjust="spacingAndGlyphs" `, w.Points())
		}
		out.Write(p)
	}
	return out.Bytes()
}
