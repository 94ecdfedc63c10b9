//go:build !amd64

package quant

var hasDecodeAVX512 = false

func halvesAVX512(dst *float32, src *byte, n int) {
	panic("quant: halvesAVX512 has no kernel on this architecture")
}

func q8BlocksAVX512(dst *float32, src *byte, blocks int) {
	panic("quant: q8BlocksAVX512 has no kernel on this architecture")
}

func q4kBlockAVX512(out *float32, qs *byte, scale, offset *[8]float32) {
	panic("quant: q4kBlockAVX512 has no kernel on this architecture")
}

func q1BlocksAVX512(dst *float32, src *byte, blocks int) {
	panic("quant: q1BlocksAVX512 has no kernel on this architecture")
}

func tq2BlocksAVX512(dst *float32, src *byte, blocks int) {
	panic("quant: tq2BlocksAVX512 has no kernel on this architecture")
}

func q4BlocksAVX512(dst *float32, src *byte, blocks int) {
	panic("quant: q4BlocksAVX512 has no kernel on this architecture")
}

func q6kBlockAVX512(out *float32, blk *byte, scales *[16]float32) {
	panic("quant: q6kBlockAVX512 has no kernel on this architecture")
}

var hasVBMI = false

func q1CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int) {
	panic("quant: q1CodesAVX512 has no kernel on this architecture")
}

func tq2CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int) {
	panic("quant: tq2CodesAVX512 has no kernel on this architecture")
}

func q8CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int) {
	panic("quant: q8CodesAVX512 has no kernel on this architecture")
}

func q4CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int) {
	panic("quant: q4CodesAVX512 has no kernel on this architecture")
}

func nibblesAVX512(codes *byte, qs *byte, runs int) {
	panic("quant: nibblesAVX512 has no kernel on this architecture")
}

func q6kCodesAVX512(codes *byte, blk *byte) {
	panic("quant: q6kCodesAVX512 has no kernel on this architecture")
}

func q5kCodesAVX512(codes *byte, qh, qs *byte) {
	panic("quant: q5kCodesAVX512 has no kernel on this architecture")
}

func codesBlockAVX512(out *float32, codes *byte, scale, offset *[8]float32) {
	panic("quant: codesBlockAVX512 has no kernel on this architecture")
}
