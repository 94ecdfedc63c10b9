package gpu

import (
	"fmt"
	"math"

	"github.com/stratalab/strata/gpu/trace"
)

// LogitLens applies the final norm and the unembedding to every layer's
// captured hook_resid_post and stores each position's top token and its
// probability per layer in tr.Lens.
func (e *Engine) LogitLens(tr *trace.Trace) error {
	c := &e.Model.Config
	st := e.Backend.NewStream()
	defer st.Close()
	var t int
	for l := range c.Layers {
		x, err := tr.Get(LayerPoint(l, "hook_resid_post"))
		if err != nil {
			return fmt.Errorf("logit lens needs every layer's resid_post (capture \"blocks.*.hook_resid_post\"): %w", err)
		}
		if l == 0 {
			t = x.Shape[0]
		}
		if len(x.Shape) != 2 || x.Shape[0] != t || x.Shape[1] != c.DModel {
			return fmt.Errorf("logit lens: %s has shape %v, want [%d %d]", LayerPoint(l, "hook_resid_post"), x.Shape, t, c.DModel)
		}
	}
	h, err := st.Alloc("lens input", t*c.DModel)
	if err != nil {
		return err
	}
	defer st.Free(h)
	logits, err := st.Alloc("lens logits", t*c.Vocab)
	if err != nil {
		return err
	}
	defer st.Free(logits)
	lens := &trace.Lens{}
	row := make([]float32, t*c.Vocab)
	for l := range c.Layers {
		st.Write(h, 0, tr.Tensor(LayerPoint(l, "hook_resid_post")).Data)
		st.RMSNorm(h, h, e.outNorm, t, c.DModel, c.RMSEps)
		st.MatMul(h, t, Proj{W: e.output, Dst: logits})
		if err := st.Read(logits, 0, row); err != nil {
			return err
		}
		prob, tok, piece := make([]float32, t), make([]int32, t), make([]string, t)
		for p := range t {
			prob[p], tok[p] = topProb(row[p*c.Vocab : (p+1)*c.Vocab])
			if e.Model.Tok != nil {
				piece[p] = e.Model.Tok.Piece(tok[p])
			}
		}
		lens.Prob, lens.Token, lens.Piece = append(lens.Prob, prob), append(lens.Token, tok), append(lens.Piece, piece)
	}
	tr.Lens = lens
	return nil
}

// topProb returns softmax(logits)'s largest probability and its index.
func topProb(logits []float32) (float32, int32) {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - logits[best]))
	}
	return float32(1 / sum), int32(best)
}

// TokenLens is the logit lens for one target token: its probability and rank
// at every layer's captured hook_resid_post and every position, with the
// final norm and unembedding run on the backend as LogitLens runs them.
func (e *Engine) TokenLens(tr *trace.Trace, target int32) (*trace.TokenLens, error) {
	c := &e.Model.Config
	if target < 0 || int(target) >= c.Vocab {
		return nil, fmt.Errorf("token lens: token %d is outside the vocabulary of %d", target, c.Vocab)
	}
	var t int
	for l := range c.Layers {
		x, err := tr.Get(LayerPoint(l, "hook_resid_post"))
		if err != nil {
			return nil, fmt.Errorf("token lens needs every layer's resid_post (capture \"blocks.*.hook_resid_post\"): %w", err)
		}
		if l == 0 {
			t = x.Shape[0]
		}
		if len(x.Shape) != 2 || x.Shape[0] != t || x.Shape[1] != c.DModel {
			return nil, fmt.Errorf("token lens: %s has shape %v, want [%d %d]", LayerPoint(l, "hook_resid_post"), x.Shape, t, c.DModel)
		}
	}
	st := e.Backend.NewStream()
	defer st.Close()
	h, err := st.Alloc("lens input", t*c.DModel)
	if err != nil {
		return nil, err
	}
	defer st.Free(h)
	logits, err := st.Alloc("lens logits", t*c.Vocab)
	if err != nil {
		return nil, err
	}
	defer st.Free(logits)
	out := &trace.TokenLens{Token: target}
	if e.Model.Tok != nil {
		out.Piece = e.Model.Tok.Piece(target)
	}
	row := make([]float32, t*c.Vocab)
	for l := range c.Layers {
		st.Write(h, 0, tr.Tensor(LayerPoint(l, "hook_resid_post")).Data)
		st.RMSNorm(h, h, e.outNorm, t, c.DModel, c.RMSEps)
		st.MatMul(h, t, Proj{W: e.output, Dst: logits})
		if err := st.Read(logits, 0, row); err != nil {
			return nil, err
		}
		prob, rank := make([]float64, t), make([]int, t)
		for p := range t {
			prob[p], rank[p] = trace.ProbRank(row[p*c.Vocab:(p+1)*c.Vocab], int(target))
		}
		out.Prob, out.Rank = append(out.Prob, prob), append(out.Rank, rank)
	}
	return out, nil
}
