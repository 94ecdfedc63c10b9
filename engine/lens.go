package engine

import (
	"errors"
	"fmt"
	"math"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/trace"
)

// LogitLens applies the final norm and the unembedding to every layer's
// captured hook_resid_post and stores each position's top token and its
// probability per layer in tr.Lens. The vocabulary-sized logits stay on the
// backend: per layer, T token ids and T probabilities come back.
func (e *Engine) LogitLens(tr *trace.Trace) error {
	lens := &trace.Lens{}
	err := e.lens(tr, "logit lens", -1, func(st backend.Stream, logits, scratch backend.Tensor, t int) error {
		v := e.Model.Vocab
		st.Argmax(scratch, logits, t, v)
		st.Softmax(logits, logits, t, v)
		ids := make([]float32, t)
		if err := st.ReadBatch([]backend.ReadRequest{{Src: scratch, Dst: ids}}); err != nil {
			return err
		}
		prob, tok, piece := make([]float32, t), make([]int32, t), make([]string, t)
		var reqs []backend.ReadRequest
		for p, id := range ids {
			tok[p] = int32(id)
			if id < 0 { // the row holds a NaN
				prob[p], piece[p] = float32(math.NaN()), "NaN"
				continue
			}
			reqs = append(reqs, backend.ReadRequest{Src: logits, Off: p*v + int(id), Dst: prob[p : p+1]})
			if e.Model.Tok != nil {
				piece[p] = e.Model.Tok.Piece(tok[p])
			}
		}
		if err := st.ReadBatch(reqs); err != nil {
			return err
		}
		lens.Prob, lens.Token, lens.Piece = append(lens.Prob, prob), append(lens.Token, tok), append(lens.Piece, piece)
		return nil
	})
	if err != nil {
		return err
	}
	tr.Lens = lens
	return nil
}

// TokenLens is the logit lens for one target token: its probability and rank
// at every layer's captured hook_resid_post and every position, with the
// final norm, unembedding, softmax and rank run on the backend as LogitLens
// runs them.
func (e *Engine) TokenLens(tr *trace.Trace, target int32) (*trace.TokenLens, error) {
	if e == nil || e.Model == nil {
		return nil, errNoEngine
	}
	v := e.Model.Vocab
	if target < 0 || int(target) >= v {
		return nil, fmt.Errorf("token lens: token %d is outside the vocabulary of %d", target, v)
	}
	out := &trace.TokenLens{Token: target}
	if e.Model.Tok != nil {
		out.Piece = e.Model.Tok.Piece(target)
	}
	err := e.lens(tr, "token lens", -1, func(st backend.Stream, logits, scratch backend.Tensor, t int) error {
		st.Rank(scratch, logits, t, v, int(target)) // on the logits: softmax can round distinct ones to equal
		st.Softmax(logits, logits, t, v)
		ranks, probs := make([]float32, t), make([]float32, t)
		reqs := []backend.ReadRequest{{Src: scratch, Dst: ranks}}
		for p := range t {
			reqs = append(reqs, backend.ReadRequest{Src: logits, Off: p*v + int(target), Dst: probs[p : p+1]})
		}
		if err := st.ReadBatch(reqs); err != nil {
			return err
		}
		prob, rank := make([]float64, t), make([]int, t)
		for p := range t {
			prob[p], rank[p] = float64(probs[p]), int(ranks[p])
		}
		out.Prob, out.Rank = append(out.Prob, prob), append(out.Rank, rank)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LensLogits is the logit lens at one position (negative counts from the
// end): the logits of every token after each layer, [layer][vocab], made
// as LogitLens makes them, for that position's row alone.
func (e *Engine) LensLogits(tr *trace.Trace, pos int) ([][]float32, error) {
	if e == nil || e.Model == nil {
		return nil, errNoEngine
	}
	if tr == nil {
		return nil, errors.New("logit lens of a nil trace")
	}
	v, row := e.Model.Vocab, pos
	if shape := tr.Shape(trace.LayerPoint(0, trace.ResidPost)); pos < 0 && len(shape) > 0 { // else lens says what is missing
		row += shape[0]
		if row < 0 {
			return nil, fmt.Errorf("logit lens: position %d is out of range: the trace has %d (-1 is the last)", pos, shape[0])
		}
	}
	var out [][]float32
	err := e.lens(tr, "logit lens", max(row, 0), func(st backend.Stream, logits, _ backend.Tensor, _ int) error {
		layerLogits := make([]float32, v)
		if err := st.ReadBatch([]backend.ReadRequest{{Src: logits, Dst: layerLogits}}); err != nil {
			return err
		}
		out = append(out, layerLogits)
		return nil
	})
	return out, err
}

// lens runs the final norm and the unembedding on the backend over every
// layer's hook_resid_post (read without keeping it in the trace) and hands
// each layer's logits [T, vocab], still on the backend, to layer, with a
// scratch tensor of T elements. With only >= 0 it runs that row alone (T
// is 1): the logits of every row would be T x vocab floats.
func (e *Engine) lens(tr *trace.Trace, what string, only int, layer func(st backend.Stream, logits, scratch backend.Tensor, t int) error) error {
	if e == nil || e.Model == nil {
		return errNoEngine
	}
	release, err := e.Model.File.Hold() // the head's weights may be read where they are mapped
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer release()
	c := &e.Model.Config
	if tr == nil {
		return fmt.Errorf("%s of a nil trace", what)
	}
	if err := tr.Model.Matches(TraceModel(c)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var t int
	for l := range c.Layers {
		name := trace.LayerPoint(l, trace.ResidPost)
		if !tr.Has(name) {
			return fmt.Errorf("%s needs every layer's resid_post (capture \"blocks.*.hook_resid_post\"): %s is not in the trace", what, name)
		}
		shape := tr.Shape(name)
		if l == 0 && len(shape) > 0 {
			t = shape[0]
		}
		if len(shape) != 2 || shape[0] != t || shape[1] != c.DModel {
			return fmt.Errorf("%s: %s has shape %v, want [%d %d]", what, name, shape, t, c.DModel)
		}
	}
	from := 0
	if only >= 0 {
		if only >= t {
			return fmt.Errorf("%s: position %d is out of range: the trace has %d (-1 is the last)", what, only, t)
		}
		from, t = only, 1
	}
	st := e.tiers[e.place.Head].NewStream() // where the final norm and the head are
	defer st.Close()
	var ts []backend.Tensor
	defer func() {
		for _, x := range ts {
			st.Free(x)
		}
	}()
	for _, n := range []int{t * c.DModel, t * c.Vocab, t} {
		x, err := st.Alloc(what, n)
		if err != nil {
			return fmt.Errorf("%s of %d positions: %w", what, t, err)
		}
		ts = append(ts, x)
	}
	h, logits, scratch := ts[0], ts[1], ts[2]
	for l := range c.Layers {
		x, err := tr.Rows(trace.LayerPoint(l, trace.ResidPost), from, from+t)
		if err != nil {
			return err
		}
		st.Write(h, 0, x.Data)
		normRows(st, c, h, h, e.outNorm, e.outBias, nil, t)
		st.MatMul(h, t, backend.Proj{W: e.output, Dst: logits})
		if c.FinalSoftcap != 0 {
			st.Softcap(logits, t*c.Vocab, c.FinalSoftcap)
		}
		if err := layer(st, logits, scratch, t); err != nil {
			return fmt.Errorf("%s at layer %d: %w", what, l, err)
		}
	}
	return nil
}
