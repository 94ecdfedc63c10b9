package cpu_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/model"
)

// YaRN as ggml defines it: pairs below the ramp extrapolate (plain RoPE),
// pairs above it interpolate (positions divided by the factor), and both
// are scaled by 1 + 0.1 ln(factor).
func TestYarnAngles(t *testing.T) {
	r := model.Rope{Mode: model.RopeNeoX, Dim: 64, Theta: 10000,
		Scaling: model.RopeScaling{Type: "yarn", Factor: 4, OrigContext: 128, BetaFast: 32, BetaSlow: 1, ExtFactor: 1, AttnFactor: 1}}
	cos, sin := make([]float32, 32), make([]float32, 32)
	const pos = 37
	(&r).Angles(pos, cos, sin)
	mscale := 1 + 0.1*math.Log(4)
	// ggml's ramp bounds: floor/ceil of 64*ln(128/(2*pi*beta))/(2 ln 10000).
	low := math.Floor(64 * math.Log(128/(32*2*math.Pi)) / (2 * math.Log(10000)))
	high := math.Ceil(64 * math.Log(128/(1*2*math.Pi)) / (2 * math.Log(10000)))
	for i := range cos {
		freq := math.Pow(10000, -float64(2*i)/64)
		var theta float64
		switch {
		case float64(i) <= low:
			theta = pos * freq
		case float64(i) > high:
			theta = pos * freq / 4
		default:
			continue
		}
		require.InDelta(t, math.Cos(theta)*mscale, cos[i], 1e-6, "pair %d", i)
		require.InDelta(t, math.Sin(theta)*mscale, sin[i], 1e-6, "pair %d", i)
	}
	lin := model.Rope{Dim: 64, Theta: 10000, Scaling: model.RopeScaling{Type: "linear", Factor: 2, AttnFactor: 1}}
	plain := model.Rope{Dim: 64, Theta: 10000, Scaling: model.RopeScaling{Type: "none", Factor: 1, AttnFactor: 1}}
	c1, s1, c2, s2 := make([]float32, 32), make([]float32, 32), make([]float32, 32), make([]float32, 32)
	(&lin).Angles(20, c1, s1)
	(&plain).Angles(10, c2, s2)
	require.Equal(t, c2, c1, "linear scaling divides positions by the factor")
	require.Equal(t, s2, s1)
}

// A stream keeps each rope's angles by position. Whatever it kept, RoPE
// must turn rows as the angles of that moment say: positions past those
// kept (decoding a token at a time), and a rope changed between calls.
func TestRopeKeepsItsAnglesAndFollowsTheRope(t *testing.T) {
	const heads, hd = 2, 16
	r := &model.Rope{Mode: model.RopeNeoX, Dim: hd, Theta: 10000}
	st := cpu.New(1).NewStream()
	x, err := st.Alloc("x", heads*hd)
	require.NoError(t, err)
	ones := make([]float32, heads*hd)
	for i := range ones {
		ones[i] = 1
	}
	turned := func(pos int) []float32 {
		st.Write(x, 0, ones)
		st.Rope(x, x, 1, heads, hd, pos, r)
		out := make([]float32, heads*hd)
		require.NoError(t, st.Read(x, 0, out))
		return out
	}
	want := func(pos int) []float32 {
		cos, sin := make([]float32, hd/2), make([]float32, hd/2)
		r.Angles(pos, cos, sin)
		out := make([]float32, heads*hd)
		for h := range heads {
			for i := range hd / 2 {
				out[h*hd+i] = cos[i] - sin[i]
				out[h*hd+i+hd/2] = sin[i] + cos[i]
			}
		}
		return out
	}
	for _, pos := range []int{0, 5, 6, 40, 3} {
		require.Equal(t, want(pos), turned(pos), "position %d", pos)
	}
	r.Theta = 500
	require.Equal(t, want(5), turned(5), "after the rope changed")
}
