package model

import "math"

// Angles fills the cosines and sines of position pos for each rotated
// pair, with the model's frequency factors and ggml's linear and YaRN scaling.
func (r *Rope) Angles(pos int, cos, sin []float32) {
	sc := &r.Scaling
	freqScale := 1.0
	if sc.Type == "linear" || sc.Type == "yarn" {
		freqScale = 1 / sc.Factor
	}
	var lowDim, highDim float64
	if sc.Type == "yarn" {
		lowDim, highDim = yarnCorrDims(r.Dim, sc.OrigContext, r.Theta, sc.BetaFast, sc.BetaSlow)
	}
	for i := range cos {
		extrap := float64(pos) * math.Pow(r.Theta, -float64(2*i)/float64(r.Dim))
		if r.FreqFactors != nil {
			extrap /= float64(r.FreqFactors[i])
		}
		theta := freqScale * extrap
		mscale := sc.AttnFactor
		if mscale == 0 {
			mscale = 1
		}
		if sc.Type == "yarn" && sc.ExtFactor != 0 {
			y := (float64(i) - lowDim) / math.Max(0.001, highDim-lowDim)
			mix := (1 - math.Min(1, math.Max(0, y))) * sc.ExtFactor
			theta = theta*(1-mix) + extrap*mix
			mscale *= 1 + 0.1*math.Log(1/freqScale)
		}
		cos[i] = float32(math.Cos(theta) * mscale)
		sin[i] = float32(math.Sin(theta) * mscale)
	}
}

// yarnCorrDims is ggml_rope_yarn_corr_dims: the pair indices between which
// YaRN ramps from interpolation to extrapolation.
func yarnCorrDims(dims, origCtx int, base, betaFast, betaSlow float64) (float64, float64) {
	corr := func(rot float64) float64 {
		return float64(dims) * math.Log(float64(origCtx)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	lo := math.Max(0, math.Floor(corr(betaFast)))
	hi := math.Min(float64(dims-1), math.Ceil(corr(betaSlow)))
	return lo, hi
}
