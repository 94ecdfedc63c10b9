package shaders_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
)

// Each TENSOR variant of matmul_coop2.comp loads every matrix from its
// buffer by a tensor load that reads the elements the load it replaces
// read: the address of each (row, column), computed as
// SPV_NV_cooperative_matrix2 defines it from the emitted layout (and view),
// equals the NV load's (pointer + row * stride + column in its pointee's
// units, rows and columns swapped when column-major), at the spec
// constants' defaults.
func TestTensorLoadsReadWhatTheLoadsRead(t *testing.T) {
	for _, v := range shaders.Variants {
		if v.Source == "matmul_coop2.comp" && slices.Contains(v.Defines, "TENSOR") {
			t.Run(v.Name, func(t *testing.T) { testTensorLoads(t, v.Name) })
		}
	}
}

func testTensorLoads(t *testing.T, name string) {
	code, err := shaders.SPIRV(name)
	require.NoError(t, err)
	khr, err := shaders.KHRCoop(code)
	require.NoError(t, err)
	out, err := shaders.TensorLoads(khr)
	require.NoError(t, err)
	require.Equal(t, uint32(0x00010600), out[1], "SPIR-V 1.6")

	// What the NV loads were: matrix rows x columns, column-major or not.
	type load struct{ rows, cols, colMajor uint32 }
	values := map[uint32]uint32{} // constants and spec constants' defaults
	var want []load
	for _, in := range instructions(t, code) {
		switch in.op {
		case 43, 50: // OpConstant, OpSpecConstant
			values[in.a[1]] = in.a[2]
		case 41: // OpConstantTrue
			values[in.a[1]] = 1
		case 42: // OpConstantFalse
			values[in.a[1]] = 0
		}
	}
	matrices := map[uint32][2]uint32{}
	for _, in := range instructions(t, code) {
		switch in.op {
		case 5358:
			matrices[in.a[0]] = [2]uint32{values[in.a[3]], values[in.a[4]]}
		case 5359: // type, result, pointer, stride, column-major
			want = append(want, load{matrices[in.a[0]][0], matrices[in.a[0]][1], values[in.a[4]]})
		}
	}
	require.Len(t, want, 4, "W, x, x's lo halves, W's lo halves")
	require.Equal(t, []uint32{0, 1, 1, 0}, []uint32{want[0].colMajor, want[1].colMajor, want[2].colMajor, want[3].colMajor})

	defined := map[uint32]bool{}
	layouts := map[uint32][4]uint32{} // dims and strides (ids)
	strides := map[uint32][2]uint32{} // OpIMul: operand ids
	var viewType uint32
	views := map[uint32]bool{}
	var got []load
	var caps []uint32
	var exts []string
	var globals, iface []uint32
	for _, in := range instructions(t, out) {
		if res := resultOf(in); res != 0 {
			require.False(t, defined[res], "%%%d defined twice", res)
			require.Less(t, res, out[3], "%%%d within the bound", res)
			defined[res] = true
		}
		switch in.op {
		case 17:
			caps = append(caps, in.a[0])
		case 10:
			exts = append(exts, stringOf(in.a))
		case 15:
			iface = in.a[2+(len(stringOf(in.a[2:]))+4)/4:]
		case 59:
			if in.a[2] != 7 {
				globals = append(globals, in.a[1])
			}
		case 43:
			values[in.a[1]] = in.a[2]
		case 5371: // OpTypeTensorViewNV: dimensions, has dimensions, permutation
			require.Equal(t, []uint32{2, 0, 1, 0}, []uint32{values[in.a[1]], values[in.a[2]], values[in.a[3]], values[in.a[4]]},
				"two dimensions, the layout's, swapped")
			viewType = in.a[0]
		case 5377:
			require.Equal(t, viewType, in.a[0])
			views[in.a[1]] = true
		case 132:
			strides[in.a[1]] = [2]uint32{in.a[2], in.a[3]}
		case 5373:
			layouts[in.a[1]] = [4]uint32{in.a[3], in.a[4]}
		case 5374:
			l := layouts[in.a[2]]
			l[2], l[3] = in.a[3], in.a[4]
			layouts[in.a[1]] = l
		case 4457: // a KHR load left: only from shared memory, of which the variant has none
			t.Fatalf("a KHR load left in %s", name)
		case 5367: // type, result, pointer, object, layout, memory access, addressing
			l, ok := layouts[in.a[4]]
			require.True(t, ok, "the load's layout is made before it")
			s, ok := strides[l[2]]
			require.True(t, ok, "the stride is the NV load's times the float16s a pointee holds")
			require.Equal(t, uint32(8), values[s[1]], "uvec4s hold 8 float16s")
			require.Equal(t, uint32(1), values[l[3]])
			addressing := in.a[len(in.a)-1]
			colMajor := uint32(0)
			if len(in.a) >= 8 && in.a[len(in.a)-2] == 1 {
				require.True(t, views[addressing], "a view from OpCreateTensorViewNV")
				colMajor = 1
			} else {
				require.Equal(t, uint32(0), addressing, "no tensor addressing operands")
			}
			dims := [2]uint32{values[l[0]], values[l[1]]}
			rows, cols := dims[0], dims[1]
			if colMajor == 1 {
				rows, cols = cols, rows
			}
			// Every element's address by the extension's definition, in
			// float16s from the pointer, against the NV load's, with a
			// stride of 40 uvec4s (K = 320).
			const stride = 40
			for r := range rows {
				for c := range cols {
					var nv uint32
					if colMajor == 1 {
						nv = c*stride*8 + r
					} else {
						nv = r*stride*8 + c
					}
					require.Equal(t, nv, tensorElement(r, c, cols, dims, [2]uint32{stride * 8, 1}, colMajor == 1),
						"element (%d, %d)", r, c)
				}
			}
			got = append(got, load{rows, cols, colMajor})
		}
	}
	require.Equal(t, want, got)
	require.Subset(t, caps, []uint32{5439, 5433}, "TensorAddressingNV, CooperativeMatrixTensorAddressingNV")
	require.Subset(t, exts, []string{"SPV_NV_cooperative_matrix2", "SPV_NV_tensor_addressing", "SPV_KHR_cooperative_matrix"})
	require.ElementsMatch(t, globals, iface, "SPIR-V 1.4 on: the entry point lists every global variable")
}

// tensorElement is SPV_NV_cooperative_matrix2's matrixCoordToTensorElement
// (WithView, for a view with the layout's dimensions swapped) for a
// two-dimensional layout of dims with strides, no offset, a span of its
// dimensions and blocks of one element.
func tensorElement(row, col, n uint32, dims, stride [2]uint32, swapped bool) uint32 {
	index := row*n + col
	span := dims
	if swapped {
		var view [2]uint32
		perm := [2]int{1, 0}
		for dim := 1; dim >= 0; dim-- {
			i := perm[dim]
			view[i] = index % span[i]
			index /= span[i]
		}
		index = view[0]*span[1] + view[1]
	}
	coord := [2]uint32{index / span[1] % span[0], index % span[1]}
	return coord[0]*stride[0] + coord[1]*stride[1]
}

// resultOf is an instruction's result id where its opcode has one.
func resultOf(in spvInst) uint32 {
	switch in.op {
	case 19, 20, 21, 22, 23, 28, 29, 30, 32, 33, 5370, 5371, 4456: // types: the result first
		return in.a[0]
	case 1, 41, 42, 43, 44, 50, 52, 59, 65, 132, 4457, 5367, 5372, 5373, 5374, 5377:
		return in.a[1]
	}
	return 0
}

func TestTensorLoadsRefusesWhatItCannotRewrite(t *testing.T) {
	_, err := shaders.TensorLoads([]uint32{1, 2, 3})
	require.ErrorContains(t, err, "not a SPIR-V module")
	nv, err := shaders.SPIRV("matmul_coop2t_f16")
	require.NoError(t, err)
	_, err = shaders.TensorLoads(nv)
	require.ErrorContains(t, err, "takes KHR cooperative matrices")
	staged, err := shaders.SPIRV("matmul_coop2_f16")
	require.NoError(t, err)
	khr, err := shaders.KHRCoop(staged)
	require.NoError(t, err)
	_, err = shaders.TensorLoads(khr)
	require.ErrorContains(t, err, "loads no cooperative matrix from a storage buffer")
}
