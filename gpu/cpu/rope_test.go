package cpu_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gpu/cpu"
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
	cpu.RopeAngles(&r, pos, cos, sin)
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
	cpu.RopeAngles(&lin, 20, c1, s1)
	cpu.RopeAngles(&plain, 10, c2, s2)
	require.Equal(t, c2, c1, "linear scaling divides positions by the factor")
	require.Equal(t, s2, s1)
}
