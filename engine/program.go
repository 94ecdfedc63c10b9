package engine

import (
	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// program is the layer program: one prefill, written once for every
// backend, in the order of the architecture diagram. Each at() is a named
// point where the run may capture, intervene or pause; it returns false
// when the run must stop. The points it reaches are the table's, in its
// order (trace.Table; a test dry-runs the program to check). A batch's
// prompts are its rows, packed: only RoPE, attention and the rows the LM
// head takes are per prompt (batch.go).
func (r *Run) program(yield func(string) bool) {
	c, e, st := &r.s.e.Model.Config, r.s.e, r.st
	t, d := r.l.t, c.DModel
	outside := points{r, -1, yield}
	// x is where the residual stream is: a captured point's place in the
	// trace where it has one, so that sums write there and nothing is copied.
	x := outside.into(trace.Embed, r.x)
	st.Embed(x, e.embed, r.tokens)
	if c.EmbedScale != 0 {
		st.Edit(x, backend.Edit{Op: backend.EditScale, Rows: 1, Cols: t * d, Scalar: c.EmbedScale})
	}
	if !outside.at(trace.Embed, x) {
		return
	}
	if c.Pos == model.PosLearned {
		pe := outside.into(trace.PosEmbed, r.attnOut)
		st.Embed(pe, e.posEmbed, r.l.positions())
		if !outside.at(trace.PosEmbed, pe) {
			return
		}
		st.Add(r.x, x, pe, t*d)
		x = r.x
	}
	for layer := range c.Layers {
		// A run that can be cancelled hands the device each layer as it is
		// recorded, so that a cancel stops it within about a layer instead
		// of after the whole prefill.
		if r.ctx.Done() != nil {
			st.Flush()
		}
		if err := r.ctx.Err(); err != nil {
			r.fail(err)
			return
		}
		var ok bool
		if x, ok = r.moveTo(e.place.Layers[layer], x); !ok {
			return
		}
		st = r.st
		w := &e.layers[layer]
		here := points{r, layer, yield}
		at, into, name := here.at, here.into, here.name
		kvd := c.KVDim()
		cacheK, cacheV := r.s.cacheK[layer], r.s.cacheV[layer]

		// Attention block.
		x = r.own(name(trace.ResidPre), x)
		if !at(trace.ResidPre, x) {
			return
		}
		h, ok := r.normAt(here, trace.LN1Scale, trace.LN1Normalized, r.h, x, w.attnNorm, w.attnNormBias, t)
		if !ok {
			return
		}
		q, k, v := into(trace.AttnQ, r.q), into(trace.AttnK, r.k), into(trace.AttnV, r.v)
		st.MatMul(h, t, proj(w.q, q, w.qBias), proj(w.k, k, w.kBias), proj(w.v, v, w.vBias))
		if c.QKNorm {
			st.RMSNorm(q, q, w.qNorm, nil, t*c.Heads, c.HeadDim, c.NormEps)
			st.RMSNorm(k, k, w.kNorm, nil, t*c.KVHeads, c.HeadDim, c.NormEps)
		}
		if !at(trace.AttnQ, q) || !at(trace.AttnK, k) || !at(trace.AttnV, v) {
			return
		}
		if c.Pos == model.PosRope {
			rq, rk := into(trace.AttnRotQ, r.q), into(trace.AttnRotK, r.k)
			r.rope(rq, q, c.Heads, layer)
			r.rope(rk, k, c.KVHeads, layer)
			q, k = rq, rk
			if !at(trace.AttnRotQ, q) || !at(trace.AttnRotK, k) {
				return
			}
		}
		st.Copy(cacheK, r.l.pos0*kvd, k, 0, t*kvd)
		st.Copy(cacheV, r.l.pos0*kvd, v, 0, t*kvd)
		if !at(trace.AttnCacheK, cacheK) || !at(trace.AttnCacheV, cacheV) {
			return
		}
		a := &backend.Attention{Q: q, K: cacheK, V: cacheV, Z: into(trace.AttnZ, r.z), T: t, Pos0: r.l.pos0,
			Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Scale: attnScale(c),
			Window: c.Window(layer), Softcap: c.AttnSoftcap}
		if r.l.materialize[layer] {
			a.Scores = into(trace.AttnScores, r.scores)
			a.Pattern = into(trace.AttnPattern, r.pattern)
			// A hook on the scores or the pattern changes what follows it,
			// so it needs them one after the other; so does a prompt the
			// fused kernel does not take.
			fc := r.offers[r.tier].capture
			fused := fc != nil && !hooked(r.o.Hooks, name(trace.AttnScores)) && !hooked(r.o.Hooks, name(trace.AttnPattern))
			var apart []*backend.Attention
			for _, p := range r.prompts(a) { // each prompt of a batch on its own rows, keys and maps
				if !fused || !fc.FlashAttentionCapture(p) {
					apart = append(apart, p)
				}
			}
			for _, p := range apart {
				st.AttnScores(p)
			}
			if !at(trace.AttnScores, a.Scores) {
				return
			}
			for _, p := range apart {
				st.Softmax(p.Pattern, p.Scores, c.Heads*p.T, p.Keys())
			}
			if !at(trace.AttnPattern, a.Pattern) {
				return
			}
			for _, p := range apart {
				st.AttnMix(p)
			}
		} else {
			r.attend(a) // each prompt of a batch on its own rows and keys
		}
		if !at(trace.AttnZ, a.Z) {
			return
		}
		attnOut := into(trace.AttnOut, r.attnOut)
		st.MatMul(a.Z, t, backend.Proj{W: w.o, Dst: attnOut, Bias: w.oBias})
		if c.PostNorms {
			r.norm(attnOut, attnOut, w.attnPostNorm, nil, t)
		}
		if !at(trace.AttnOut, attnOut) {
			return
		}
		x = r.add(name(trace.ResidMid), x, attnOut)
		if !at(trace.ResidMid, x) {
			return
		}

		// MLP block.
		if h, ok = r.normAt(here, trace.LN2Scale, trace.LN2Normalized, r.h, x, w.ffnNorm, w.ffnNormBias, t); !ok {
			return
		}
		mlpOut := into(trace.MLPOut, r.mlpOut)
		pre, post := into(trace.MLPPre, r.gate), into(trace.MLPPost, r.gate)
		switch {
		case c.MoE():
			if !r.mixture(w, h, mlpOut, here) {
				return
			}
		case c.MLP == model.MLPSwiGLU || c.MLP == model.MLPGeGLU:
			up := into(trace.MLPPreLinear, r.up)
			st.MatMul(h, t, backend.Proj{W: w.gate, Dst: pre}, backend.Proj{W: w.up, Dst: up})
			if !at(trace.MLPPre, pre) || !at(trace.MLPPreLinear, up) {
				return
			}
			if c.MLP == model.MLPSwiGLU {
				st.SwiGLU(post, pre, up, t*c.FFN)
			} else {
				st.GeGLU(post, pre, up, t*c.FFN)
			}
		case c.MLP == model.MLPGELU:
			st.MatMul(h, t, backend.Proj{W: w.up, Dst: pre, Bias: w.upBias})
			if !at(trace.MLPPre, pre) {
				return
			}
			st.GELU(post, pre, t*c.FFN)
		}
		if !c.MoE() {
			if !at(trace.MLPPost, post) {
				return
			}
			st.MatMul(post, t, backend.Proj{W: w.down, Dst: mlpOut, Bias: w.downBias})
		}
		if c.PostNorms {
			r.norm(mlpOut, mlpOut, w.ffnPostNorm, nil, t)
		}
		if !at(trace.MLPOut, mlpOut) {
			return
		}
		x = r.add(name(trace.ResidPost), x, mlpOut)
		if !at(trace.ResidPost, x) {
			return
		}
	}

	// Tail: final norm and LM head for the last positions (of each prompt).
	rows := r.l.logitRows
	if rows == 0 {
		return
	}
	x, ok := r.moveTo(e.place.Head, x)
	if !ok {
		return
	}
	st = r.st
	r.headInput(r.attnOut, x)
	h, ok := r.normAt(outside, trace.LNFinalScale, trace.LNFinalNormalized, r.h, r.attnOut, e.outNorm, e.outBias, rows)
	if !ok {
		return
	}
	logits := outside.into(trace.Logits, r.logits)
	st.MatMul(h, rows, backend.Proj{W: e.output, Dst: logits})
	if c.FinalSoftcap != 0 {
		st.Softcap(logits, rows*c.Vocab, c.FinalSoftcap)
	}
	if !outside.at(trace.Logits, logits) {
		return
	}
	if r.o.Predict {
		st.Argmax(r.argmax, logits, rows, c.Vocab)
	}
}

// normAt is the norm before attention, the MLP or the LM head as
// TransformerLens hooks it: the scale each row is divided by (the point
// scaleAt, ln1.hook_scale say), then the normalised rows (normalizedAt),
// which it returns (written to dst, or in place in the trace). A hook on
// the scale changes what the rows are divided by (freezing a norm, say);
// dst must not be src, which that reads again.
func (r *Run) normAt(p points, scaleAt, normalizedAt trace.Point, dst, src, gain, bias backend.Tensor, rows int) (backend.Tensor, bool) {
	c := &r.s.e.Model.Config
	dst, scale := p.into(normalizedAt, dst), p.into(scaleAt, r.scale)
	normRows(r.st, c, dst, src, gain, bias, scale, rows)
	if !p.at(scaleAt, scale) {
		return nil, false
	}
	if hooked(r.o.Hooks, p.name(scaleAt)) {
		r.st.NormApply(dst, src, scale, gain, bias, rows, c.DModel, c.Norm == model.NormLayer)
	}
	return dst, p.at(normalizedAt, dst)
}

// norm normalises rows of the residual stream with the model's norm: Gemma's
// norms of each block's outputs, which TransformerLens gives no scale point.
func (r *Run) norm(dst, src, gain, bias backend.Tensor, rows int) {
	normRows(r.st, &r.s.e.Model.Config, dst, src, gain, bias, nil, rows)
}

// normRows normalises rows of d_model elements, writing each row's scale to
// scale unless it is nil.
func normRows(st backend.Stream, c *model.Config, dst, src, gain, bias, scale backend.Tensor, rows int) {
	switch c.Norm {
	case model.NormRMS:
		st.RMSNorm(dst, src, gain, scale, rows, c.DModel, c.NormEps)
	case model.NormLayer:
		st.LayerNorm(dst, src, gain, bias, scale, rows, c.DModel, c.NormEps)
	}
}

// proj is one projection of a MatMul, written as the diagram reads: weight, output, bias.
func proj(w backend.Matrix, dst, bias backend.Tensor) backend.Proj {
	return backend.Proj{W: w, Dst: dst, Bias: bias}
}

// points names the program's points in one part of it: a layer's, or
// those outside the layers (layer -1).
type points struct {
	r     *Run
	layer int
	yield func(string) bool
}

// name is point p's full name.
func (ps points) name(p trace.Point) string {
	if ps.layer < 0 {
		return string(p)
	}
	return trace.LayerPoint(ps.layer, p)
}

// at is point p: see Run.at.
func (ps points) at(p trace.Point, x backend.Tensor) bool { return ps.r.at(ps.name(p), x, ps.yield) }

// into is where a kernel writes point p: see Run.into.
func (ps points) into(p trace.Point, scratch backend.Tensor) backend.Tensor {
	return ps.r.into(ps.name(p), scratch)
}
