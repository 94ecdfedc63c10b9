package engine

import (
	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
)

// program is the layer program: one prefill, written once for every
// backend, in the order of the architecture diagram. Each at() is a named
// point where the run may capture, intervene or pause; it returns false
// when the run must stop.
func (r *Run) program(yield func(string) bool) {
	c, e, st := &r.s.e.Model.Config, r.s.e, r.st
	t, d := r.l.t, c.DModel
	// x is where the residual stream is: a captured point's place in the
	// trace where it has one, so that sums write there and nothing is copied.
	x := r.into("hook_embed", r.x)
	st.Embed(x, e.embed, r.tokens)
	if c.EmbedScale != 0 {
		st.Edit(x, backend.Edit{Op: backend.EditScale, Rows: 1, Cols: t * d, Scalar: c.EmbedScale})
	}
	if !r.at("hook_embed", x, 0, yield) {
		return
	}
	if c.Pos == model.PosLearned {
		pe := r.into("hook_pos_embed", r.attnOut)
		st.Embed(pe, e.posEmbed, r.l.positions())
		if !r.at("hook_pos_embed", pe, 0, yield) {
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
		at := func(p string, x backend.Tensor, off int) bool { return r.at(LayerPoint(layer, p), x, off, yield) }
		into := func(p string, scratch backend.Tensor) backend.Tensor { return r.into(LayerPoint(layer, p), scratch) }
		kvd := c.KVDim()
		cacheK, cacheV := r.s.cacheK[layer], r.s.cacheV[layer]

		// Attention block.
		x = r.own(LayerPoint(layer, "hook_resid_pre"), x)
		if !at("hook_resid_pre", x, 0) {
			return
		}
		h, ok := r.normAt(layer, "ln1", r.h, x, w.attnNorm, w.attnNormBias, t, at)
		if !ok {
			return
		}
		q, k, v := into("attn.hook_q", r.q), into("attn.hook_k", r.k), into("attn.hook_v", r.v)
		st.MatMul(h, t, proj(w.q, q, w.qBias), proj(w.k, k, w.kBias), proj(w.v, v, w.vBias))
		if c.QKNorm {
			st.RMSNorm(q, q, w.qNorm, nil, t*c.Heads, c.HeadDim, c.NormEps)
			st.RMSNorm(k, k, w.kNorm, nil, t*c.KVHeads, c.HeadDim, c.NormEps)
		}
		if !at("attn.hook_q", q, 0) || !at("attn.hook_k", k, 0) || !at("attn.hook_v", v, 0) {
			return
		}
		if c.Pos == model.PosRope {
			rq, rk := into("attn.hook_rot_q", r.q), into("attn.hook_rot_k", r.k)
			st.Rope(rq, q, t, c.Heads, c.HeadDim, r.l.pos0, r.s.ropeAt(layer))
			st.Rope(rk, k, t, c.KVHeads, c.HeadDim, r.l.pos0, r.s.ropeAt(layer))
			q, k = rq, rk
			if !at("attn.hook_rot_q", q, 0) || !at("attn.hook_rot_k", k, 0) {
				return
			}
		}
		st.Copy(cacheK, r.l.pos0*kvd, k, 0, t*kvd)
		st.Copy(cacheV, r.l.pos0*kvd, v, 0, t*kvd)
		if !at("attn.cache_k", cacheK, 0) || !at("attn.cache_v", cacheV, 0) {
			return
		}
		a := &backend.Attention{Q: q, K: cacheK, V: cacheV, Z: into("attn.hook_z", r.z), T: t, Pos0: r.l.pos0,
			Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Scale: attnScale(c),
			Window: c.Window(layer), Softcap: c.AttnSoftcap}
		if r.l.materialize[layer] {
			a.Scores = into("attn.hook_attn_scores", r.scores)
			a.Pattern = into("attn.hook_pattern", r.pattern)
			// A hook on the scores or the pattern changes what follows it,
			// so it needs them one after the other.
			fc := r.offers[r.tier].capture
			if fc != nil && !hooked(r.o.Hooks, LayerPoint(layer, "attn.hook_attn_scores")) && !hooked(r.o.Hooks, LayerPoint(layer, "attn.hook_pattern")) &&
				fc.FlashAttentionCapture(a) {
				if !at("attn.hook_attn_scores", a.Scores, 0) || !at("attn.hook_pattern", a.Pattern, 0) {
					return
				}
			} else {
				st.AttnScores(a)
				if !at("attn.hook_attn_scores", a.Scores, 0) {
					return
				}
				st.Softmax(a.Pattern, a.Scores, c.Heads*t, a.Keys())
				if !at("attn.hook_pattern", a.Pattern, 0) {
					return
				}
				st.AttnMix(a)
			}
		} else {
			st.FlashAttention(a)
		}
		if !at("attn.hook_z", a.Z, 0) {
			return
		}
		attnOut := into("hook_attn_out", r.attnOut)
		st.MatMul(a.Z, t, backend.Proj{W: w.o, Dst: attnOut, Bias: w.oBias})
		if c.PostNorms {
			r.norm(attnOut, attnOut, w.attnPostNorm, nil, t)
		}
		if !at("hook_attn_out", attnOut, 0) {
			return
		}
		x = r.add(LayerPoint(layer, "hook_resid_mid"), x, attnOut)
		if !at("hook_resid_mid", x, 0) {
			return
		}

		// MLP block.
		if h, ok = r.normAt(layer, "ln2", r.h, x, w.ffnNorm, w.ffnNormBias, t, at); !ok {
			return
		}
		mlpOut := into("hook_mlp_out", r.mlpOut)
		pre, post := into("mlp.hook_pre", r.gate), into("mlp.hook_post", r.gate)
		switch {
		case c.MoE():
			if !r.mixture(w, h, mlpOut, at) {
				return
			}
		case c.MLP == model.MLPSwiGLU || c.MLP == model.MLPGeGLU:
			up := into("mlp.hook_pre_linear", r.up)
			st.MatMul(h, t, backend.Proj{W: w.gate, Dst: pre}, backend.Proj{W: w.up, Dst: up})
			if !at("mlp.hook_pre", pre, 0) || !at("mlp.hook_pre_linear", up, 0) {
				return
			}
			if c.MLP == model.MLPSwiGLU {
				st.SwiGLU(post, pre, up, t*c.FFN)
			} else {
				st.GeGLU(post, pre, up, t*c.FFN)
			}
		case c.MLP == model.MLPGELU:
			st.MatMul(h, t, backend.Proj{W: w.up, Dst: pre, Bias: w.upBias})
			if !at("mlp.hook_pre", pre, 0) {
				return
			}
			st.GELU(post, pre, t*c.FFN)
		}
		if !c.MoE() {
			if !at("mlp.hook_post", post, 0) {
				return
			}
			st.MatMul(post, t, backend.Proj{W: w.down, Dst: mlpOut, Bias: w.downBias})
		}
		if c.PostNorms {
			r.norm(mlpOut, mlpOut, w.ffnPostNorm, nil, t)
		}
		if !at("hook_mlp_out", mlpOut, 0) {
			return
		}
		x = r.add(LayerPoint(layer, "hook_resid_post"), x, mlpOut)
		if !at("hook_resid_post", x, 0) {
			return
		}
	}

	// Tail: final norm and LM head for the last logitRows positions.
	rows := r.l.logitRows
	if rows == 0 {
		return
	}
	x, ok := r.moveTo(e.place.Head, x)
	if !ok {
		return
	}
	st = r.st
	st.Copy(r.attnOut, 0, x, (t-rows)*d, rows*d)
	tail := func(p string, x backend.Tensor, off int) bool { return r.at(p, x, off, yield) }
	h, ok := r.normAt(-1, "ln_final", r.h, r.attnOut, e.outNorm, e.outBias, rows, tail)
	if !ok {
		return
	}
	logits := r.into("logits", r.logits)
	st.MatMul(h, rows, backend.Proj{W: e.output, Dst: logits})
	if c.FinalSoftcap != 0 {
		st.Softcap(logits, rows*c.Vocab, c.FinalSoftcap)
	}
	if !r.at("logits", logits, 0, yield) {
		return
	}
	if r.o.Predict {
		st.Argmax(r.argmax, logits, rows, c.Vocab)
	}
}

// normAt is the norm before attention, the MLP or the LM head (ln is
// "ln1", "ln2" or "ln_final") as TransformerLens hooks it: the scale each
// row is divided by (hook_scale), then the normalised rows, which it
// returns (written to dst, or in place in the trace). A hook on the scale
// changes what the rows are divided by (freezing a norm, say); dst must
// not be src, which that reads again.
func (r *Run) normAt(layer int, ln string, dst, src, gain, bias backend.Tensor, rows int, at func(string, backend.Tensor, int) bool) (backend.Tensor, bool) {
	c := &r.s.e.Model.Config
	full := func(p string) string {
		if layer >= 0 {
			return LayerPoint(layer, p)
		}
		return p
	}
	dst, scale := r.into(full(ln+".hook_normalized"), dst), r.into(full(ln+".hook_scale"), r.scale)
	normRows(r.st, c, dst, src, gain, bias, scale, rows)
	if !at(ln+".hook_scale", scale, 0) {
		return nil, false
	}
	if hooked(r.o.Hooks, full(ln+".hook_scale")) {
		r.st.NormApply(dst, src, scale, gain, bias, rows, c.DModel, c.Norm == model.NormLayer)
	}
	return dst, at(ln+".hook_normalized", dst, 0)
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
