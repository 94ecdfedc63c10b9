package vulkan

import "unsafe"

// The push-constant blocks of the shaders, one struct each, field for field
// in the order of the GLSL block and under its names: every member is a
// 4-byte uint or float, so that the struct's memory is the block's.
// TestPushBlocksMatchSPIRV checks each against its compiled shader's member
// names, offsets and types.

// pushWords is a push-constant block as the words dispatch records.
func pushWords[T any](p *T) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(p)), unsafe.Sizeof(*p)/4)
}

// matmulPush is the start of the products' blocks: y [m, n] = x [m, k] W^T
// (+ bias).
type matmulPush struct {
	m, n, k   uint32
	scaleBase uint32 // first word of the block scales
	hasBias   uint32
}

// tiledPush is matmul.comp's and matvec.comp's block.
type tiledPush struct {
	matmulPush
	basesBase uint32 // MatMulExperts: where the weight's experts' words start in the groups table
}

// coopPush is matmul_coop.comp's block.
type coopPush struct {
	matmulPush
	loBase, bigBase           uint32 // tohalf.comp's remainders and range flags
	whBase, wLoBase, wBigBase uint32 // weights16.comp's halves, remainders and range flags
	kChunk, yBase             uint32 // split K: each part's columns of K and its output
	basesBase                 uint32 // as tiledPush's
}

// coop2Push is matmul_coop2.comp's block.
type coop2Push struct {
	M, N, K                   uint32
	scaleBase                 uint32
	mBase, yBase              uint32 // x's first row; where its outputs start in y
	loBase, bigBase           uint32 // tohalf.comp's remainders and range flags
	whBase, wLoBase, wBigBase uint32 // the weights' halves, remainders and range flags
	kChunk, partStride        uint32 // split along K: each part's columns of K, elements from part to part
}

// weights16Push is weights16.comp's block.
type weights16Push struct {
	rows, k, scaleBase    uint32
	base, loBase, bigBase uint32
	split                 uint32
}

// toHalfPush is tohalf.comp's block.
type toHalfPush struct{ rows, k, loBase, bigBase, exact uint32 }

// splitKPush is splitk.comp's block.
type splitKPush struct{ n, cols, parts, base, hasBias, stride uint32 }

// embedPush is embed.comp's block.
type embedPush struct{ t, k, scaleBase uint32 } // t ids of rows of k

// normPush is rmsnorm.comp's and layernorm.comp's block.
type normPush struct {
	rows, dim  uint32
	eps        float32
	writeScale uint32
}

// normApplyPush is normapply.comp's block.
type normApplyPush struct{ rows, dim uint32 }

// ropePush is rope.comp's block.
type ropePush struct{ rows, heads, headDim, half, neox uint32 }

// mixPush is mix.comp's block, the start of the attention kernels'.
type mixPush struct{ t, keys, heads, kvHeads, hd, pos0 uint32 }

// scoresPush is scores.comp's block.
type scoresPush struct {
	mixPush
	scale   float32
	window  uint32
	softcap float32
}

// flashPush is flash.comp's block: hpw heads of a GQA group per workgroup.
type flashPush struct {
	scoresPush
	hpw uint32
}

// flashCoopPush is flash_coop.comp's block.
type flashCoopPush struct {
	flashPush
	tailsHeld           uint32 // the scores hold the -inf of keys no block takes
	kvLoBase, kvBigBase uint32 // tohalf.comp's remainders and range flags of K and V
}

// softmaxPush is softmax.comp's block; t = 0 for whole rows, else the
// causal mask's queries from pos0 (window 0: none) and whether the masked
// zeros are held.
type softmaxPush struct{ rows, n, t, pos0, window, held uint32 }

// elemPush is the block of the elementwise kernels: add, swiglu, gelu,
// geglu.
type elemPush struct{ n uint32 }

// softcapPush is softcap.comp's block.
type softcapPush struct {
	n   uint32
	cap float32
}

// copyPush is copy.comp's block.
type copyPush struct{ n, dstOff, srcOff, vec4s uint32 }

// editPush is edit.comp's block.
type editPush struct {
	op, off, rows, cols, stride uint32
	scalar                      float32
	srcOff, srcStride           uint32
}

// editMeanPush is edit_mean.comp's block.
type editMeanPush struct{ off, rows, cols, stride uint32 }

// rowsPush is argmax.comp's block.
type rowsPush struct{ rows, n uint32 }

// gatherPush is rows.comp's block (gather and scatter): n rows of cols;
// with ROUTED at most n, a slot's token slot / k, the routing's experts.
type gatherPush struct{ n, cols, k, experts uint32 }

// sortExpertsPush is sortexperts.comp's block.
type sortExpertsPush struct{ slots, experts uint32 }

// expertTilesPush is experttiles.comp's block: tiles entries of bm rows
// from word at of the groups table.
type expertTilesPush struct{ experts, bm, tiles, at uint32 }

// rankPush is rank.comp's block.
type rankPush struct{ rows, n, col uint32 }

// rowNormPush is rownorm.comp's block.
type rowNormPush struct{ rows, n, off uint32 }

// routePush is route.comp's block.
type routePush struct{ rows, experts, k uint32 }

// weightedSumPush is weighted_sum.comp's block.
type weightedSumPush struct{ rows, k, cols uint32 }
