package trace

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/mat"
)

// Matrix is a 2-D slice of a trace, copied out so it may be changed freely.
// For per-position points row i is position i of the prefill (Tokens[i]);
// for caches and the key axis of patterns it is absolute position i.
type Matrix struct {
	Name       string // what it was read from, e.g. "blocks.2.attn.hook_z head 1"
	Rows, Cols int
	Data       []float32 // row-major
}

// Row returns row i, aliasing Data; it panics, naming the range, when i is
// out of it (or m is nil).
func (m *Matrix) Row(i int) []float32 {
	if m == nil {
		panic(fmt.Sprintf("trace: Row(%d) of a nil *Matrix", i))
	}
	if i < 0 || i >= m.Rows {
		panic(fmt.Sprintf("trace: %s: row %d is out of range: the matrix has %d rows", m.Name, i, m.Rows))
	}
	return m.Data[i*m.Cols : (i+1)*m.Cols]
}

// At returns element (i, j); it panics, naming the range, when either is out
// of it (a column past the end would otherwise read the next row), or m
// is nil.
func (m *Matrix) At(i, j int) float32 {
	if m == nil {
		panic(fmt.Sprintf("trace: At(%d, %d) of a nil *Matrix", i, j))
	}
	if i < 0 || i >= m.Rows || j < 0 || j >= m.Cols {
		panic(fmt.Sprintf("trace: %s: At(%d, %d) is out of range: the matrix is %d x %d", m.Name, i, j, m.Rows, m.Cols))
	}
	return m.Data[i*m.Cols+j]
}

// Slices returns the rows as [][]float32, aliasing Data; nil for a nil
// matrix.
func (m *Matrix) Slices() [][]float32 {
	if m == nil {
		return nil
	}
	out := make([][]float32, m.Rows)
	for i := range out {
		out[i] = m.Row(i)
	}
	return out
}

// Dense returns a float64 copy as a gonum matrix; nil for a matrix with no
// elements (gonum has no empty matrix), or a nil one.
func (m *Matrix) Dense() *mat.Dense {
	if m == nil || m.Rows == 0 || m.Cols == 0 {
		return nil
	}
	d := make([]float64, len(m.Data))
	for i, v := range m.Data {
		d[i] = float64(v)
	}
	return mat.NewDense(m.Rows, m.Cols, d)
}

// missing wraps the error of a capture that was not made with the capture
// that would have provided name.
func missing(err error, name string) error {
	if !errors.Is(err, ErrNotCaptured) {
		return err // captured, or not a point: capturing it would not help
	}
	glob := name
	if _, local, ok := splitLayer(name); ok {
		glob = "blocks.*." + local
	}
	return fmt.Errorf("%w; capture it with nb.Capture(%q) or engine.CaptureOf(%q)", err, glob, glob)
}

// splitLayer is SplitPoint that keeps a negative layer number, which no
// point has, to say so; ok is false for a name that is not a layer's point.
func splitLayer(name string) (layer int, local string, ok bool) {
	rest, ok := strings.CutPrefix(name, "blocks.")
	if !ok {
		return 0, name, false
	}
	num, local, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, name, false
	}
	l, err := strconv.Atoi(num)
	if err != nil {
		return 0, name, false
	}
	return l, local, true
}

var errLayerRange = errors.New("layer out of range")

// layerRange says when name is a point of a layer the model does not have:
// TransformerLens counts -1 as the last layer, a name here does not.
func (m Model) layerRange(name string) error {
	l, _, ok := splitLayer(name)
	if !ok || m.Layers <= 0 || l >= 0 && l < m.Layers {
		return nil
	}
	last := ""
	if l < 0 {
		last = fmt.Sprintf("; the last is %d, not -1", m.Layers-1)
	}
	return fmt.Errorf("trace: %s: %w: the model has %d layers, 0 to %d%s", name, errLayerRange, m.Layers, m.Layers-1, last)
}

// Point returns a captured point as a matrix with one row per entry of its
// first dimension and the remaining dimensions flattened: [T, d_model] stays
// as it is, hook_z [T, heads, head_dim] becomes [T, heads*head_dim].
func (t *Trace) Point(name string) (*Matrix, error) {
	var m *Matrix
	err := t.with(name, func(err error) error { return missing(err, name) }, func(x *Tensor) error {
		if len(x.Shape) < 1 || x.Shape[0] == 0 {
			return fmt.Errorf("trace: %s has shape %v, nothing to read by row", name, x.Shape)
		}
		rows := x.Shape[0]
		m = &Matrix{Name: name, Rows: rows, Cols: len(x.Data) / rows, Data: append([]float32(nil), x.Data...)}
		return nil
	})
	return m, err
}

// Resid returns the residual stream entering layer (TransformerLens's
// resid_pre, the convention of accumulated_resid): Resid(0) is the
// embedding and Resid(Layers) the final resid_post, before the final norm.
// It reads blocks.L.hook_resid_pre or, equal to it, the previous layer's
// hook_resid_post (hook_embed for layer 0), whichever was captured.
func (t *Trace) Resid(layer int) (*Matrix, error) {
	if t == nil {
		return nil, errNilTrace
	}
	n := t.Model.Layers
	if layer < 0 || layer > n {
		return nil, fmt.Errorf("trace: Resid(%d): layers are 0..%d (%d is the final resid_post)", layer, n, n)
	}
	var names []string
	if layer < n {
		names = append(names, LayerPoint(layer, ResidPre))
	}
	if layer > 0 {
		names = append(names, LayerPoint(layer-1, ResidPost))
	} else {
		names = append(names, string(Embed))
	}
	for _, name := range names {
		if t.Has(name) {
			return t.Point(name)
		}
	}
	glob := `"blocks.*.hook_resid_pre"`
	if layer == n {
		glob = `"blocks.*.hook_resid_post"`
	}
	return nil, fmt.Errorf("trace: Resid(%d) needs %s, %w; capture with nb.Capture(%s)", layer, strings.Join(names, " or "), ErrNotCaptured, glob)
}

// perHead are the layer-local points Head slices.
var perHead = []Point{AttnZ, AttnQ, AttnK, AttnV, AttnRotQ, AttnRotK, AttnPattern, AttnScores, AttnCacheK, AttnCacheV}

// headName turns TransformerLens's short names ("z", "pattern") and
// layer-local ones ("hook_z", "attn.hook_z") into the layer-local point.
func headName(name string) Point {
	switch {
	case strings.HasPrefix(name, "attn."):
		return Point(name)
	case strings.HasPrefix(name, "hook_"), strings.HasPrefix(name, "cache_"):
		return Point("attn." + name)
	case name == "k_cache" || name == "v_cache":
		return Point("attn.cache_" + name[:1])
	}
	return Point("attn.hook_" + name)
}

// Head returns one head's slice of a per-head point of a layer. name is the
// layer-local point or its short form: "z", "q", "k", "v", "rot_q", "rot_k"
// give [T, head_dim]; "pattern" and "attn_scores" give [T, keys]; "cache_k"
// and "cache_v" give [keys, head_dim]. For k, v and the caches head is a KV
// head (grouped-query models have fewer of them). A full name of that layer's
// point ("blocks.1.attn.hook_z") is taken too.
func (t *Trace) Head(name string, layer, head int) (*Matrix, error) {
	if rest, ok := strings.CutPrefix(name, "blocks."); ok {
		n, local, _ := strings.Cut(rest, ".")
		if n != strconv.Itoa(layer) || local == "" {
			return nil, fmt.Errorf("trace: Head(%q, %d, %d): the name is of another layer's point; give the layer's point alone (\"z\", \"attn.hook_z\") with its layer", name, layer, head)
		}
		name = local
	}
	local := headName(name)
	if !slices.Contains(perHead, local) {
		return nil, fmt.Errorf("trace: Head(%q, ...): %s is not a per-head point; Head takes z, q, k, v, rot_q, rot_k, pattern, attn_scores, cache_k and cache_v (a head's output in the residual stream is HeadResults)", name, local)
	}
	full := LayerPoint(layer, local)
	shape := t.Shape(full)
	if shape == nil {
		_, err := t.Get(full)
		return nil, missing(err, full)
	}
	if len(shape) != 3 {
		return nil, fmt.Errorf("trace: %s has shape %v, not a per-head point", full, shape)
	}
	label := fmt.Sprintf("%s head %d", full, head)
	if IsAttentionMap(full) {
		h, rows, cols := shape[0], shape[1], shape[2]
		if head < 0 || head >= h {
			return nil, fmt.Errorf("trace: head %d is out of range: %s has %d heads", head, full, h)
		}
		x, err := t.Rows(full, head, head+1) // one head: a trace on a GPU reads only it
		if err != nil {
			return nil, err
		}
		return &Matrix{Name: label, Rows: rows, Cols: cols, Data: x.Data}, nil
	}
	rows, h, cols := shape[0], shape[1], shape[2]
	if head < 0 || head >= h {
		return nil, fmt.Errorf("trace: head %d is out of range: %s has %d heads", head, full, h)
	}
	m := &Matrix{Name: label, Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	err := t.with(full, nil, func(x *Tensor) error {
		for r := range rows {
			copy(m.Row(r), x.Data[(r*h+head)*cols:(r*h+head+1)*cols])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Pattern returns one head's attention pattern, [T, keys]: row i is how
// query position i of this prefill spreads its attention over the keys.
func (t *Trace) Pattern(layer, head int) (*Matrix, error) { return t.Head("pattern", layer, head) }

// HeadResults computes TransformerLens's hook_result for a layer, each
// head's output written to the residual stream, [T, heads, d_model]:
// result[t][h] = z[t][h] @ W_O[:, h*head_dim:(h+1)*head_dim]^T, from the
// captured hook_z and wO, the layer's output projection dequantized as
// stored ([d_model rows, heads*head_dim cols]). The heads sum to
// hook_attn_out (the models here have no output bias).
func (t *Trace) HeadResults(layer int, wO []float32) (*Tensor, error) {
	name := LayerPoint(layer, AttnZ)
	var out *Tensor
	err := t.with(name, func(err error) error { return missing(err, name) }, func(z *Tensor) error {
		var err error
		out, err = headResults(name, z, wO)
		return err
	})
	return out, err
}

// headResults is HeadResults of the captured hook_z, z.
func headResults(name string, z *Tensor, wO []float32) (*Tensor, error) {
	if len(z.Shape) != 3 {
		return nil, fmt.Errorf("trace: %s has shape %v, want [T, heads, head_dim]", name, z.Shape)
	}
	T, heads, hd := z.Shape[0], z.Shape[1], z.Shape[2]
	q := heads * hd
	if len(wO) == 0 || len(wO)%q != 0 {
		return nil, fmt.Errorf("trace: W_O of %d values is not [d_model, %d]", len(wO), q)
	}
	d := len(wO) / q
	out := &Tensor{Shape: []int{T, heads, d}, Data: make([]float32, T*heads*d)}
	for p := range T {
		for h := range heads {
			zh := z.Data[(p*heads+h)*hd : (p*heads+h+1)*hd]
			dst := out.Data[(p*heads+h)*d : (p*heads+h+1)*d]
			for i := range d {
				w := wO[i*q+h*hd : i*q+(h+1)*hd]
				var s float32
				for k, v := range zh {
					s += v * w[k]
				}
				dst[i] = s
			}
		}
	}
	return out, nil
}

// ExpertUsage counts, for each expert of a mixture, the tokens routed to it
// in layer (empty slots, id -1, count for none), from the captured
// blocks.L.mlp.hook_expert_ids.
func (t *Trace) ExpertUsage(layer int) ([]int, error) {
	if t == nil {
		return nil, errNilTrace
	}
	if t.Model.Experts == 0 {
		return nil, fmt.Errorf("trace: ExpertUsage: %s has no experts", t.Model.Name)
	}
	name := LayerPoint(layer, MLPExpertIDs)
	counts := make([]int, t.Model.Experts)
	err := t.with(name, func(err error) error { return missing(err, name) }, func(ids *Tensor) error {
		for i, v := range ids.Data {
			e := int(v)
			switch {
			case v == -1:
			case float32(e) != v || e < 0 || e >= len(counts):
				return fmt.Errorf("trace: ExpertUsage: slot %d of layer %d holds %g, not an expert of %d", i, layer, v, len(counts))
			default:
				counts[e]++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}
