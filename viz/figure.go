// Package viz draws figures of a prefill trace with gonum/plot: attention
// patterns, residual-stream norms, the logit lens, the KV cache, head
// scores, activation patching and PCA of hidden states. Each figure exports
// to PNG, SVG and PDF; Report writes them all as a self-contained page.
//
// Colours mean the same in every figure and HTML view. Values that can
// have either sign (attributions, logit differences, patching results) sit
// on a diverging scale: blue below zero, white exactly at zero, red above,
// symmetric about zero; a figure centred elsewhere (chance, say) plots the
// difference from it and says so in its title. Values that are never
// negative (attention weights, norms, loss, probabilities) sit on the
// sequential scale, the diverging one's red half: white at the bottom of
// its colour bar, deep red at the top. Bars follow the same rule: red for
// positive, blue for negative. Grey marks a value that is missing (NaN)
// or not finite (a masked attention score, -Inf). Lines
// and points of several series use categorical colours named in a legend.
package viz

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/stratalab/strata/trace"
)

// Figure is a drawing ready to export. Width and Height are in points
// (1/72 inch); PNG is rendered at 96 dots per inch, so a PNG is
// Width*4/3 pixels wide, and an SVG is as many CSS pixels (PixelSize).
// They may be changed before exporting.
type Figure struct {
	Title         string
	Width, Height vg.Length
	draw          func(c draw.Canvas)
}

// newFigure makes a figure of at least the given size, widened to fit its
// title.
func newFigure(title string, width, height vg.Length, draw func(draw.Canvas)) *Figure {
	sty := measured(12)
	return &Figure{Title: title, Width: max(width, sty.Width(title)+barWidth+2*margin), Height: height, draw: draw}
}

// maxSide bounds a figure's width and height, in points, and maxPixels a
// PNG's pixels (4 bytes each, 1 GiB): a figure of 1e6 by 1e6 points took
// 7 TB as a PNG.
const (
	maxSide   vg.Length = 1e6
	maxPixels           = 1 << 28
)

// captionSize is a caption's type size in points: larger than a title's
// 12, as a caption tells apart figures whose titles are the same.
const captionSize = 14

// WithCaption returns a copy of f with caption (lines split at \n)
// written above its title, as nb.Show(nb.Caption(...), f) shows it: two
// views alike, a plain run and an ablated one, say which is which in the
// figure itself, so its exports keep it.
func (f *Figure) WithCaption(caption string) *Figure {
	if caption == "" {
		return f
	}
	sty := measured(captionSize)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YTop
	room := sty.Height(caption) + 4
	g := *f
	g.Width = max(f.Width, sty.Width(caption)+2*margin)
	g.Height = f.Height + room
	g.draw = func(c draw.Canvas) {
		c.FillText(sty, vg.Point{X: c.Min.X, Y: c.Max.Y}, caption)
		f.draw(draw.Crop(c, 0, 0, 0, -room))
	}
	return &g
}

// margin is the blank border around every figure, in points.
const margin = 6

// formats lists the formats Encode writes.
var formats = []string{"png", "svg", "pdf"}

// PNGDPI is the resolution of PNG output.
const PNGDPI = 96

// PixelSize is the size of the figure's PNG in pixels, which is also its
// SVG's size in CSS pixels: a browser shows both alike; 0 by 0 for a nil
// figure.
func (f *Figure) PixelSize() (w, h int) {
	if f == nil {
		return 0, 0
	}
	return int(f.Width.Dots(PNGDPI) + 0.5), int(f.Height.Dots(PNGDPI) + 0.5)
}

// Encode writes the figure in format: "png", "svg" or "pdf".
func (f *Figure) Encode(w io.Writer, format string) (err error) {
	if f == nil || f.draw == nil {
		return errors.New("viz: the figure has nothing to draw: a nil or zero Figure, or Plot of a nil plot (make figures with viz's calls)")
	}
	if !(f.Width >= 1 && f.Height >= 1 && f.Width <= maxSide && f.Height <= maxSide) {
		return fmt.Errorf("viz: %q is %g by %g points: want each side from 1 to %g points", f.Title, f.Width, f.Height, float64(maxSide))
	}
	var c vg.CanvasWriterTo
	switch strings.ToLower(format) {
	case "png":
		if pw, ph := f.PixelSize(); pw*ph > maxPixels {
			return fmt.Errorf("viz: %q as a PNG is %d by %d pixels, %d bytes of image: want at most %d pixels (make Width and Height smaller, or write SVG)", f.Title, pw, ph, 4*pw*ph, maxPixels)
		}
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(f.Width, f.Height), vgimg.UseDPI(PNGDPI))}
	case "svg":
		pw, ph := f.PixelSize()
		c = &svgCanvas{Canvas: vgsvg.New(f.Width, f.Height), pw: pw, ph: ph}
	case "pdf":
		c = vgpdf.New(f.Width, f.Height)
	default:
		return fmt.Errorf("viz: format %q: want one of %s", format, strings.Join(formats, ", "))
	}
	// gonum/plot panics on drawing problems; a figure in a notebook should
	// fail with an error instead.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("viz: drawing %q: %v", f.Title, r)
		}
	}()
	f.paint(c)
	_, err = c.WriteTo(w)
	return err
}

// paint draws the figure on c, which is Width by Height.
func (f *Figure) paint(c vg.Canvas) {
	dc := draw.NewCanvas(c, f.Width, f.Height)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	f.draw(draw.Crop(dc, margin, -margin, margin, -margin))
}

// Save writes the figure to path in the format its extension names (.png,
// .svg or .pdf), through a temporary file renamed into place.
func (f *Figure) Save(path string) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if !slices.Contains(formats, format) {
		return fmt.Errorf("viz: cannot save %s: want a name ending in .%s", path, strings.Join(formats, ", ."))
	}
	return trace.WriteAtomic(path, func(w io.Writer) error { return f.Encode(w, format) })
}
