package shaders_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
)

type spvInst struct {
	op uint32
	a  []uint32
}

func instructions(t *testing.T, words []uint32) []spvInst {
	t.Helper()
	var out []spvInst
	for i := 5; i < len(words); {
		n := int(words[i] >> 16)
		require.True(t, n > 0 && i+n <= len(words), "malformed instruction at word %d", i)
		out = append(out, spvInst{words[i] & 0xffff, words[i+1 : i+n]})
		i += n
	}
	return out
}

// Each variant of matmul_coop2.comp, as glslang 12 writes it, becomes a KHR
// module: the weights' matrices are A, x's B, the sum the accumulator; W
// (and its remainders) are loaded row-major, x (and its remainders) and the
// result column-major, as the source's flags say.
func TestKHRCoopGivesEachMatrixItsUse(t *testing.T) {
	for _, v := range shaders.Variants {
		if v.Source == "matmul_coop2.comp" {
			t.Run(v.Name, func(t *testing.T) { testKHRCoop(t, v.Name) })
		}
	}
}

func testKHRCoop(t *testing.T, name string) {
	code, err := shaders.SPIRV(name)
	require.NoError(t, err)
	out, err := shaders.KHRCoop(code)
	require.NoError(t, err)
	require.Equal(t, code[3]+3, out[3], "three constants more in the bound")
	uints := map[uint32]uint32{}
	var uintType uint32
	floatBits := map[uint32]uint32{}
	specs := map[uint32]string{}
	names := map[uint32]string{}
	type matrix struct{ bits, rows, cols, use uint32 }
	matrices := map[uint32]matrix{}
	var loads, stores []uint32 // their layouts
	for _, in := range instructions(t, out) {
		switch in.op {
		case 5357, 5358, 5359, 5360, 5361, 5362:
			t.Fatalf("NV cooperative-matrix opcode %d left", in.op)
		case 17:
			require.NotEqual(t, uint32(shaders.CapCoopMatrixNV), in.a[0])
		case 5: // OpName
			names[in.a[0]] = stringOf(in.a[1:])
		case 21:
			if in.a[1] == 32 && in.a[2] == 0 {
				uintType = in.a[0]
			}
		case 22:
			floatBits[in.a[0]] = in.a[1]
		case 43:
			if in.a[0] == uintType {
				uints[in.a[1]] = in.a[2]
			}
		case 50:
			specs[in.a[1]] = names[in.a[1]]
		case 4456:
			matrices[in.a[0]] = matrix{floatBits[in.a[1]], in.a[3], in.a[4], uints[in.a[5]]}
			require.Equal(t, uint32(2), uints[in.a[2]], "workgroup scope")
		case 4457:
			loads = append(loads, uints[in.a[3]])
		case 4458:
			stores = append(stores, uints[in.a[2]])
		}
	}
	got := map[string]uint32{}
	for _, m := range matrices {
		got[specs[m.rows]+"x"+specs[m.cols]+"/"+map[uint32]string{16: "f16", 32: "f32"}[m.bits]] = m.use
	}
	require.Equal(t, map[string]uint32{"BNxBK/f16": 0, "BKxBM/f16": 1, "BNxBM/f32": 2}, got)
	require.Equal(t, []uint32{0, 1, 1, 0}, loads, "W, x, x's remainders, W's")
	require.Equal(t, []uint32{1}, stores)
	require.Contains(t, shaders.Capabilities(out), uint32(shaders.CapCoopMatrixKHR))
	var exts []string
	for _, in := range instructions(t, out) {
		if in.op == 10 {
			exts = append(exts, stringOf(in.a))
		}
	}
	require.Contains(t, exts, "SPV_KHR_cooperative_matrix")
	require.NotContains(t, exts, "SPV_NV_cooperative_matrix")
}

func TestKHRCoopRefusesWhatItCannotTranslate(t *testing.T) {
	_, err := shaders.KHRCoop([]uint32{1, 2, 3})
	require.ErrorContains(t, err, "not a SPIR-V module")
	code, err := shaders.SPIRV("add")
	require.NoError(t, err)
	_, err = shaders.KHRCoop(code)
	require.ErrorContains(t, err, "declares no NV cooperative matrix")
	code, err = shaders.SPIRV("matmul_coop2_f16")
	require.NoError(t, err)
	bad := slices.Clone(code)
	bad[5] = 0xffff<<16 | bad[5]&0xffff
	_, err = shaders.KHRCoop(bad)
	require.ErrorContains(t, err, "malformed instruction at word 5")
}

func stringOf(a []uint32) string {
	var b []byte
	for _, w := range a {
		for i := range 4 {
			if c := byte(w >> (8 * i)); c != 0 {
				b = append(b, c)
			} else {
				return string(b)
			}
		}
	}
	return string(b)
}
