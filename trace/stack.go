package trace

import (
	"errors"
	"fmt"
	"math"
)

// Stack is a residual stack as TransformerLens builds one: component c,
// labelled Labels[c], is the [T, d_model] matrix X[c].
type Stack struct {
	Labels []string
	X      []*Matrix
}

func (s *Stack) add(label string, m *Matrix) {
	s.Labels = append(s.Labels, label)
	s.X = append(s.X, m)
}

// AccumulatedResid is TransformerLens's accumulated_resid(): the residual
// stream before each layer and after the last, labelled "0_pre" ..
// "{L-1}_pre", "final_post" (see Resid for what it reads).
func (t *Trace) AccumulatedResid() (*Stack, error) {
	if t == nil {
		return nil, errNilTrace
	}
	s := &Stack{}
	for l := 0; l <= t.Model.Layers; l++ {
		m, err := t.Resid(l)
		if err != nil {
			return nil, err
		}
		label := fmt.Sprintf("%d_pre", l)
		if l == t.Model.Layers {
			label = "final_post"
		}
		s.add(label, m)
	}
	return s, nil
}

// DecomposeResid is TransformerLens's decompose_resid(): the terms that sum
// to the final resid_post, labelled "embed", "pos_embed" (a model with
// learned positions only), "0_attn_out", "0_mlp_out", ... Capture
// "hook_embed" (and "hook_pos_embed"), "blocks.*.hook_attn_out" and
// "blocks.*.hook_mlp_out".
func (t *Trace) DecomposeResid() (*Stack, error) {
	if t == nil {
		return nil, errNilTrace
	}
	s := &Stack{}
	embeds := []string{"embed"}
	if t.Model.LearnedPos {
		embeds = append(embeds, "pos_embed")
	}
	for _, e := range embeds {
		m, err := t.Point("hook_" + e)
		if err != nil {
			return nil, err
		}
		s.add(e, m)
	}
	for l := range t.Model.Layers {
		for _, part := range []string{"attn_out", "mlp_out"} {
			m, err := t.Point(LayerPoint(l, Point("hook_"+part)))
			if err != nil {
				return nil, err
			}
			s.add(fmt.Sprintf("%d_%s", l, part), m)
		}
	}
	return s, nil
}

// StackHeadResults is TransformerLens's stack_head_results(): every head's
// output (see HeadResults), labelled "L0H0", "L0H1", ...; wO[l] is layer
// l's output projection as HeadResults takes it.
func (t *Trace) StackHeadResults(wO [][]float32) (*Stack, error) {
	if t == nil {
		return nil, errNilTrace
	}
	if len(wO) != t.Model.Layers {
		return nil, fmt.Errorf("trace: StackHeadResults got W_O for %d layers, the model has %d", len(wO), t.Model.Layers)
	}
	s := &Stack{}
	for l := range wO {
		r, err := t.HeadResults(l, wO[l])
		if err != nil {
			return nil, err
		}
		T, heads, d := r.Shape[0], r.Shape[1], r.Shape[2]
		for h := range heads {
			m := &Matrix{Name: fmt.Sprintf("L%dH%d", l, h), Rows: T, Cols: d, Data: make([]float32, T*d)}
			for p := range T {
				copy(m.Row(p), r.Data[(p*heads+h)*d:(p*heads+h+1)*d])
			}
			s.add(m.Name, m)
		}
	}
	return s, nil
}

// ApplyFinalNorm is TransformerLens's apply_ln_to_stack for an RMSNorm:
// every component at position p is divided by the RMS of final (the final
// resid_post) at p, so that the components still sum to what the final norm
// sees, and then multiplied by the norm's gain. TransformerLens folds the
// gain into W_U instead; applying it here means a component dotted with an
// unembedding row is directly its share of that logit. The result is a new
// stack; the receiver is unchanged.
func (s *Stack) ApplyFinalNorm(final *Matrix, gain []float32, eps float32) (*Stack, error) {
	return s.applyNorm(final, gain, eps, false)
}

// ApplyFinalLayerNorm is ApplyFinalNorm for a LayerNorm (GPT-2's): each
// component is first centred (its mean over d_model taken away), so that
// the components sum to final minus its mean, then divided by final's
// standard deviation and multiplied by the gain. The norm's bias is no
// component's: the normalised components sum to the norm's output minus it.
func (s *Stack) ApplyFinalLayerNorm(final *Matrix, gain []float32, eps float32) (*Stack, error) {
	return s.applyNorm(final, gain, eps, true)
}

func (s *Stack) applyNorm(final *Matrix, gain []float32, eps float32, center bool) (*Stack, error) {
	if s == nil || final == nil {
		return nil, fmt.Errorf("trace: final norm of a nil stack or residual stream (stack %v, final %v)", s != nil, final != nil)
	}
	if len(gain) != final.Cols {
		return nil, fmt.Errorf("trace: final norm gain has %d values, the residual stream %d", len(gain), final.Cols)
	}
	inv := make([]float64, final.Rows)
	for p := range inv {
		mean := 0.0
		if center {
			mean = rowMean(final.Row(p))
		}
		var ss float64
		for _, v := range final.Row(p) {
			ss += (float64(v) - mean) * (float64(v) - mean)
		}
		inv[p] = 1 / math.Sqrt(ss/float64(final.Cols)+float64(eps))
	}
	out := &Stack{Labels: append([]string(nil), s.Labels...)}
	for _, m := range s.X {
		if m.Rows != final.Rows || m.Cols != final.Cols {
			return nil, fmt.Errorf("trace: %s is %dx%d, the final resid_post %dx%d", m.Name, m.Rows, m.Cols, final.Rows, final.Cols)
		}
		n := &Matrix{Name: m.Name, Rows: m.Rows, Cols: m.Cols, Data: make([]float32, len(m.Data))}
		for p := range m.Rows {
			src, dst := m.Row(p), n.Row(p)
			mean := 0.0
			if center {
				mean = rowMean(src)
			}
			for i, v := range src {
				dst[i] = float32((float64(v) - mean) * inv[p] * float64(gain[i]))
			}
		}
		out.X = append(out.X, n)
	}
	return out, nil
}

// Dot returns each component's dot product with dir at position pos
// (negative counts from the end): with dir an unembedding row (or the
// difference of two) after ApplyFinalNorm, the direct logit attribution.
func (s *Stack) Dot(dir []float32, pos int) ([]float64, error) {
	if s == nil {
		return nil, errors.New("trace: Dot of a nil *Stack")
	}
	out := make([]float64, len(s.X))
	for c, m := range s.X {
		p := pos
		if p < 0 {
			p += m.Rows
		}
		if p < 0 || p >= m.Rows {
			return nil, fmt.Errorf("trace: position %d is outside %s's %d rows", pos, m.Name, m.Rows)
		}
		if len(dir) != m.Cols {
			return nil, fmt.Errorf("trace: direction of %d values does not fit %s's %d columns", len(dir), m.Name, m.Cols)
		}
		var sum float64
		for i, v := range m.Row(p) {
			sum += float64(v) * float64(dir[i])
		}
		out[c] = sum
	}
	return out, nil
}

func rowMean(row []float32) float64 {
	var sum float64
	for _, v := range row {
		sum += float64(v)
	}
	return sum / float64(len(row))
}
