package shaders_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
)

// Shared memory by hand from the sources: tile.glsl's two 32 x 16 vec4
// tiles; a reduction's float (argmax: and a uint) per invocation, its
// workgroup size being specialization constant 0.
func TestWorkgroupBytesOfSources(t *testing.T) {
	for _, c := range []struct {
		name string
		spec []uint32
		want int
	}{
		{"matmul_codes4", nil, 2 * 32 * 16 * 16},
		{"layernorm", []uint32{256}, 256 * 4},
		{"layernorm", []uint32{64}, 64 * 4},
		{"argmax", []uint32{128}, 128*4*2 + 4},
		{"matvec_q8_0", nil, 8 * 128 * 4},
		{"add", nil, 0},
	} {
		code, err := shaders.SPIRV(c.name)
		require.NoError(t, err)
		got, err := shaders.WorkgroupBytes(code, c.spec)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%s %v", c.name, c.spec)
	}
}

func TestWorkgroupBytesRefusesBadModules(t *testing.T) {
	_, err := shaders.WorkgroupBytes([]uint32{1, 2, 3}, nil)
	require.ErrorContains(t, err, "not a SPIR-V module")
	code, err := shaders.SPIRV("flash")
	require.NoError(t, err)
	for _, count := range []uint32{0, 0xffff} { // an instruction of no words, one past the end
		bad := slices.Clone(code)
		bad[5] = count<<16 | bad[5]&0xffff
		_, err = shaders.WorkgroupBytes(bad, nil)
		require.ErrorContains(t, err, "malformed instruction at word 5")
	}
}

// Issue 47.14: Apple GPUs have no float64, and the backend enables it on
// no device: no module may declare it.
func TestNoModuleNeedsFloat64(t *testing.T) {
	for _, v := range shaders.Variants {
		code, err := shaders.SPIRV(v.Name)
		require.NoError(t, err)
		require.NotContains(t, shaders.Capabilities(code), uint32(shaders.CapFloat64), v.Name)
	}
}
