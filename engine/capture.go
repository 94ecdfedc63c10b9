package engine

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Capture selects capture points by glob (path.Match syntax over the full
// names, e.g. "blocks.*.attn.hook_pattern") and, for per-layer points, a
// layer range [FirstLayer, LastLayer]; LastLayer -1 means the last layer.
type Capture struct {
	Globs      []string
	FirstLayer int
	LastLayer  int
}

// CaptureAll selects every point of every layer.
func CaptureAll() Capture { return Capture{Globs: []string{"*"}, LastLayer: -1} }

// CaptureOf selects the points matching globs in every layer.
func CaptureOf(globs ...string) Capture { return Capture{Globs: globs, LastLayer: -1} }

// Validate checks the globs' syntax, that each matches some point of the
// model inside the layer range, and that the layer range lies within the
// model's layers and selects at least one (with no globs too) and, when it
// is not the whole model, some point the globs match: a range asked for
// and ignored would look like one obeyed.
func (c Capture) Validate(m *model.Config) error {
	if m == nil {
		return errors.New("engine: capture: no model config (nil)")
	}
	if err := c.validateLayers(m.Layers); err != nil {
		return err
	}
	all := trace.Points(m)
	layerKept := false // some point in a layer is kept
	for _, g := range c.Globs {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("capture: bad pattern %q: %w", g, err)
		}
		outside, kept := "", false
		for _, n := range all {
			if ok, _ := path.Match(g, n); !ok {
				continue
			}
			l, _ := trace.SplitPoint(n)
			switch {
			case !c.inRange(l):
				outside = cmp.Or(outside, n)
			case l >= 0:
				kept, layerKept = true, true
			default:
				kept = true
			}
		}
		switch {
		case !kept && outside != "":
			return fmt.Errorf("capture: pattern %q matches only points outside %s (%s, ...)", g, c.rangeText(m.Layers), outside)
		case !kept:
			return fmt.Errorf("capture: pattern %q matches no capture point of this %s model%s (strata info --points lists them)", g, m.Arch, trace.PointHint(m, g))
		}
	}
	if len(c.Globs) > 0 && !layerKept && (c.FirstLayer != 0 || c.LastLayer != -1) {
		return fmt.Errorf("capture: %s keeps none of the points asked for: %s match no point in a layer", c.rangeText(m.Layers), strings.Join(c.Globs, ", "))
	}
	return nil
}

// inRange reports whether layer l (-1: a point in no layer) is kept.
func (c Capture) inRange(l int) bool {
	return l < 0 || (l >= c.FirstLayer && (c.LastLayer < 0 || l <= c.LastLayer))
}

// rangeText names the layer range for errors.
func (c Capture) rangeText(layers int) string {
	return fmt.Sprintf("the layer range %d..%d", c.FirstLayer, c.last(layers))
}

// last is the range's last layer of a model of layers (LastLayer -1: the
// model's last).
func (c Capture) last(layers int) int {
	if c.LastLayer == -1 {
		return layers - 1
	}
	return c.LastLayer
}

func (c Capture) validateLayers(layers int) error {
	last := c.last(layers)
	rng := fmt.Sprintf("capture: layer range %d..%d", c.FirstLayer, c.LastLayer)
	if c.LastLayer == -1 {
		rng = fmt.Sprintf("capture: layer range %d..last", c.FirstLayer)
	}
	switch {
	case c.FirstLayer < 0:
		return fmt.Errorf("%s: the first layer %d is negative (layers are 0..%d)", rng, c.FirstLayer, layers-1)
	case c.LastLayer < -1:
		return fmt.Errorf("%s: the last layer %d is negative (layers are 0..%d; -1 means the last)", rng, c.LastLayer, layers-1)
	case c.FirstLayer >= layers:
		return fmt.Errorf("%s selects no layer: the model has %d layers, 0..%d", rng, layers, layers-1)
	case last >= layers:
		return fmt.Errorf("%s: layer %d is past the model's last layer %d", rng, last, layers-1)
	case last < c.FirstLayer:
		return fmt.Errorf("%s selects no layer: the last layer %d is before the first %d", rng, last, c.FirstLayer)
	}
	return nil
}

// Selects reports whether the capture keeps the named point.
func (c Capture) Selects(name string) bool {
	if l, _ := trace.SplitPoint(name); !c.inRange(l) {
		return false
	}
	for _, g := range c.Globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
