package cpu

import (
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
)

// The int8 GEMM, for fast precision on processors with AVX-512 VNNI: the
// weights multiply as their format's own integer codes (quant.Format.Codes:
// exact), x as int8, rounded per row and code block to max|x|/127 steps, as
// llama.cpp's q8 products do. Each block's integer sum is scaled into a
// float32 accumulator in k order, so an output does not depend on the other
// rows it is multiplied with. Products of 8 rows or fewer, and fused ones
// mixing float weights, take float32: an incremental fast prefill gives
// the one-pass logits bit for bit only when every chunk is longer than 8.
const (
	i8Rows  = 32 // weight rows per kernel call
	i8XRows = 6  // rows of x per kernel call
)

// int8X is x quantized for one code block length.
type int8X struct {
	block   int
	rowsPad int       // rows rounded up to i8XRows; the extra rows are zero
	q       []int8    // [rowsPad][cols]
	sc      []float32 // [blocks][rowsPad][2]: scale, scale*sum(q)
}

// int8Scratch is a thread's decoded weights and kernel tile.
type int8Scratch struct {
	codes         []byte    // [i8Rows][cols], as decoded
	scale, offset []float32 // [i8Rows][blocks]
	w             []byte    // [cols/4][i8Rows][4]: the kernel's interleave
	wsc           []float32 // [blocks][2][i8Rows]: scales, then offsets
	tile          [i8XRows * i8Rows]float32
	_             cacheLine
}

// int8Weights says whether every projection's format has integer codes in
// blocks the kernels take.
func int8Weights(outs []backend.Proj) bool {
	for _, p := range outs {
		f := p.W.(*matrix).w.Format
		if f.Codes == nil || f.CodeBlock%16 != 0 { // quantizeRow takes 16 at a time
			return false
		}
	}
	return true
}

// quantizeX fills q for x's rows (rows x cols) in blocks of q.block.
func (s *stream) quantizeX(q *int8X, x []float32, rows, cols int) {
	q.rowsPad = (rows + i8XRows - 1) / i8XRows * i8XRows
	nb := cols / q.block
	q.q = growBytes(q.q, q.rowsPad*cols)
	q.sc = grow(q.sc, nb*q.rowsPad*2)
	clear(q.q[rows*cols:])
	for b := range nb {
		clear(q.sc[(b*q.rowsPad+rows)*2 : (b+1)*q.rowsPad*2])
	}
	s.parallel(rows, cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			if !hasInterleave16 {
				quantizeRowGo(x[r*cols:(r+1)*cols], q.q[r*cols:(r+1)*cols], q.sc[r*2:], q.rowsPad*2, q.block)
				continue
			}
			quantizeRow(&x[r*cols], &q.q[r*cols], &q.sc[r*2], q.rowsPad*8, nb, q.block)
		}
	})
}

// quantizeRowGo is quantizeRow without AVX-512, the same numbers: x*(127/amax)
// rounded to nearest even as VCVTPS2DQ rounds, its low byte kept, a NaN
// in a block making its step NaN; the step and step*sum(q) at sc, the next
// block's scStride floats on.
func quantizeRowGo(x []float32, q []int8, sc []float32, scStride, block int) {
	for b := range len(x) / block {
		xb, qb := x[b*block:(b+1)*block], q[b*block:(b+1)*block]
		var amax float32
		nan := false
		for _, v := range xb {
			a := float32(math.Abs(float64(v)))
			nan = nan || a != a
			amax = max(amax, a)
		}
		step, inv := amax/127, float32(0)
		if nan {
			step = float32(math.NaN())
		}
		if amax != 0 {
			inv = 127 / amax
		}
		var sum int32
		for i, v := range xb {
			c := int32(math.MinInt32) // VCVTPS2DQ's answer for NaN and out of range
			if f := v * inv; f >= math.MinInt32 && f < math.MaxInt32 {
				c = int32(math.RoundToEven(float64(f)))
			}
			qb[i] = int8(c)
			sum += c
		}
		sc[b*scStride], sc[b*scStride+1] = step, float32(sum)*step
	}
}

func growBytes[T int8 | byte](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// matMulInt8 is MatMul through the int8 kernel.
func (s *stream) matMulInt8(xs []float32, rows, cols int, outs []backend.Proj) {
	// x once per code block length among the projections (one or two).
	var lengths [4]int
	quantized := lengths[:0]
	for _, p := range outs {
		block := p.W.(*matrix).w.Format.CodeBlock
		if slices.Contains(quantized, block) {
			continue
		}
		q := s.int8x[block]
		if q == nil {
			q = &int8X{block: block}
			if s.int8x == nil {
				s.int8x = map[int]*int8X{}
			}
			s.int8x[block] = q
		}
		s.quantizeX(q, xs, rows, cols)
		quantized = append(quantized, block)
	}
	if len(s.int8) < s.b.threads {
		s.int8 = make([]int8Scratch, s.b.threads)
	}
	for _, p := range outs {
		s.packInt8(p.W.(*matrix))
	}
	groups := s.gemmGroups(outs, i8Rows, i8Rows, rows, i8XRows)
	s.workers(len(groups), grain, func(worker, lo, hi int) {
		sc := &s.int8[worker]
		for _, g := range groups[lo:hi] {
			m := g.p.W.(*matrix)
			x := s.int8x[m.w.Format.CodeBlock]
			nb := cols / x.block
			if pk := m.int8; pk != nil {
				gi, size := g.c0/i8Rows, pk.groupBytes(cols)
				sc.run(pk.w[gi*size:(gi+1)*size], pk.wsc[gi*nb*2*i8Rows:(gi+1)*nb*2*i8Rows], pk.nibbles, g, x, cols)
				continue
			}
			sc.w, sc.wsc = growBytes(sc.w, i8Rows*cols), grow(sc.wsc, nb*2*i8Rows)
			sc.packWeights(m, g.c0, g.c1, nb, sc.w, sc.wsc)
			sc.run(sc.w, sc.wsc, false, g, x, cols)
		}
	})
	clear(groups) // holds no tensor past the product
}

// int8Packed is a weight as the int8 kernel reads it, made on its first
// fast product and kept: decoding and interleaving it again on every
// product took more time than the kernel itself (a tiny-qwen3 Q8_0 prefill
// at T=64: 22% of its time in q8Codes and the interleaving, 19% in the
// kernel). Its codes take a byte a weight, half a byte in the 4-bit
// formats, and its scales 8 bytes a code block: a Q8_0 weight 1.25 bytes
// (1.06 in the file), Q4_0 and Q4_K 0.75 (0.56), Q5_K 1.25 (0.69), Q6_K
// 1.5 (0.82). Q1_0_g128 and TQ2_0_g128 are decoded on every product
// instead, their codes being 8 and 4 times their file's size.
type int8Packed struct {
	nibbles bool // codes two to a byte, for gemmI4x32x6
	// Outside the Go heap (packedBytes), unmapped when the value is
	// collected: a product holds its matrix, and so this, while it runs.
	w   []byte    // group g (rows i8Rows*g on) at g*groupBytes
	wsc []float32 // group g at g*blocks*2*i8Rows
}

// groupBytes is the size of a group's codes.
func (p *int8Packed) groupBytes(cols int) int {
	if p.nibbles {
		return i8Rows * cols / 2
	}
	return i8Rows * cols
}

// packInt8 makes m.int8 once for the formats kept packed, its groups on
// the stream's threads; another stream's product of m waits for it. A
// fault reading the weights, or no room for the packed copy, leaves m.int8
// nil (decoded per product).
func (s *stream) packInt8(m *matrix) {
	var nibbles bool
	switch m.w.Type() {
	case gguf.Q4_0, gguf.Q4_K:
		nibbles = true
	case gguf.Q8_0, gguf.Q5_K, gguf.Q6_K:
	default:
		return
	}
	m.int8Once.Do(func() {
		p := &int8Packed{nibbles: nibbles}
		cols, nb := m.w.Cols, m.w.Cols/m.w.Format.CodeBlock
		groups, size := (m.w.Rows+i8Rows-1)/i8Rows, p.groupBytes(cols)
		w, freeW := packedBytes(groups * size)
		wsc, freeWsc := packedBytes(4 * groups * nb * 2 * i8Rows)
		if w == nil || wsc == nil { // no room: decoded on every product
			freeW()
			freeWsc()
			return
		}
		runtime.AddCleanup(p, func(struct{}) { freeW(); freeWsc() }, struct{}{})
		p.w, p.wsc = w, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(wsc))), len(wsc)/4)
		var done atomic.Int64
		s.workers(groups, grain, func(worker, lo, hi int) {
			sc := &s.int8[worker]
			for g := lo; g < hi; g++ {
				w, wsc := p.w[g*size:(g+1)*size], p.wsc[g*nb*2*i8Rows:(g+1)*nb*2*i8Rows]
				if !p.nibbles {
					sc.packWeights(m, g*i8Rows, min((g+1)*i8Rows, m.w.Rows), nb, w, wsc)
					done.Add(1)
					continue
				}
				sc.w = growBytes(sc.w, i8Rows*cols)
				sc.packWeights(m, g*i8Rows, min((g+1)*i8Rows, m.w.Rows), nb, sc.w, wsc)
				// A step's 128 codes into 64 bytes: rows 0-15 low, 16-31 high.
				for st := range cols / 4 {
					lo, hi := sc.w[st*128:st*128+64], sc.w[st*128+64:st*128+128]
					for i, c := range lo {
						w[st*64+i] = c | hi[i]<<4
					}
				}
				done.Add(1)
			}
		})
		if done.Load() == int64(groups) {
			m.int8 = p
		}
	})
}

// packWeights decodes outputs c0..c1 (at most i8Rows) of m into the
// kernel's layout: w (i8Rows*cols bytes) and wsc (blocks*2*i8Rows), rows
// past c1 zero.
func (sc *int8Scratch) packWeights(m *matrix, c0, c1, nb int, w []byte, wsc []float32) {
	f, n, cols := m.w.Format, c1-c0, m.w.Cols
	sc.codes = growBytes(sc.codes, i8Rows*cols)
	sc.scale, sc.offset = grow(sc.scale, i8Rows*nb), grow(sc.offset, i8Rows*nb)
	rowBytes := len(m.w.Data) / m.w.Rows
	f.Codes(sc.codes[:n*cols], sc.scale[:n*nb], sc.offset[:n*nb], m.w.Data[c0*rowBytes:c1*rowBytes])
	clear(sc.codes[n*cols:])
	clear(sc.scale[n*nb:])
	clear(sc.offset[n*nb:])
	// Interleave four k at a time: the kernel loads a step's 32 rows at once.
	steps := cols / 4
	whole := steps &^ 15
	for s0 := 0; s0 < whole; s0 += 16 {
		transpose16(w[s0*4*i8Rows:], sc.codes[s0*4:], cols, 4*i8Rows)
		transpose16(w[s0*4*i8Rows+64:], sc.codes[16*cols+s0*4:], cols, 4*i8Rows)
	}
	src := unsafe.Slice((*uint32)(unsafe.Pointer(&sc.codes[0])), i8Rows*steps)
	dst := unsafe.Slice((*uint32)(unsafe.Pointer(&w[0])), i8Rows*steps)
	for r := range i8Rows {
		for st := whole; st < steps; st++ {
			dst[st*i8Rows+r] = src[r*steps+st]
		}
	}
	wholeBlocks := nb &^ 15
	for b0 := 0; b0 < wholeBlocks; b0 += 16 {
		for half := range 2 {
			ws := wsc[b0*2*i8Rows+16*half:]
			transpose16(asBytes(ws), asBytes(sc.scale[16*half*nb+b0:]), 4*nb, 8*i8Rows)
			transpose16(asBytes(ws[i8Rows:]), asBytes(sc.offset[16*half*nb+b0:]), 4*nb, 8*i8Rows)
		}
	}
	for r := range i8Rows {
		for b := wholeBlocks; b < nb; b++ {
			wsc[b*2*i8Rows+r] = sc.scale[r*nb+b]
			wsc[b*2*i8Rows+i8Rows+r] = sc.offset[r*nb+b]
		}
	}
}

// run writes the group's outputs (at most i8Rows) for its rows of x (g.r0
// a multiple of i8XRows), from the weights packed by packWeights (two
// codes a byte with nibbles).
func (sc *int8Scratch) run(w []byte, wsc []float32, nibbles bool, g gemmGroup, x *int8X, cols int) {
	p, c0, c1 := g.p, g.c0, g.c1
	kernel := gemmI8x32x6
	if nibbles {
		kernel = gemmI4x32x6
	}
	n, nb := c1-c0, cols/x.block
	out, width := data(p.Dst), p.W.Rows()
	var bias []float32
	if p.Bias != nil {
		bias = data(p.Bias)[c0:c1]
	}
	for t0 := g.r0; t0 < g.r1; t0 += i8XRows {
		if int8AVX2 {
			sc.avx2Tile(w, wsc, nibbles, p.W.(*matrix).w.Type() == gguf.Q8_0, x, t0, cols)
		} else {
			kernel(&w[0], &wsc[0], &x.q[t0*cols], cols, &x.sc[t0*2], x.rowsPad*8, nb, x.block/4, &sc.tile)
		}
		for r := range min(i8XRows, g.r1-t0) {
			o := out[(t0+r)*width+c0 : (t0+r)*width+c1]
			copy(o, sc.tile[r*i8Rows:r*i8Rows+n])
			for i := range bias {
				o[i] += bias[i]
			}
		}
	}
}

// avx2Tile fills the tile as gemmI8x32x6 (or gemmI4x32x6) would, for rows
// t0 on of x: four AVX2 calls of 16 weight rows by 3 rows of x, six of 2
// rows for Q8_0.
func (sc *int8Scratch) avx2Tile(w []byte, wsc []float32, nibbles, q8 bool, x *int8X, t0, cols int) {
	nb, steps := cols/x.block, x.block/4
	if q8 {
		for xr := 0; xr < i8XRows; xr += 2 {
			q, xsc := &x.q[(t0+xr)*cols], &x.sc[(t0+xr)*2]
			gemmQ8x16x2AVX2(&w[0], &wsc[0], q, cols, xsc, x.rowsPad*8, nb, steps, 128, &sc.tile[xr*i8Rows])
			gemmQ8x16x2AVX2(&w[64], &wsc[16], q, cols, xsc, x.rowsPad*8, nb, steps, 128, &sc.tile[xr*i8Rows+16])
		}
		return
	}
	for xr := 0; xr < i8XRows; xr += 3 {
		q, xsc := &x.q[(t0+xr)*cols], &x.sc[(t0+xr)*2]
		if nibbles {
			gemmI4lo16x3AVX2(&w[0], &wsc[0], q, cols, xsc, x.rowsPad*8, nb, steps, 64, &sc.tile[xr*i8Rows])
			gemmI4hi16x3AVX2(&w[0], &wsc[16], q, cols, xsc, x.rowsPad*8, nb, steps, 64, &sc.tile[xr*i8Rows+16])
			continue
		}
		gemmI8x16x3AVX2(&w[0], &wsc[0], q, cols, xsc, x.rowsPad*8, nb, steps, 128, &sc.tile[xr*i8Rows])
		gemmI8x16x3AVX2(&w[64], &wsc[16], q, cols, xsc, x.rowsPad*8, nb, steps, 128, &sc.tile[xr*i8Rows+16])
	}
}

// asBytes is f's memory as bytes.
func asBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// Int8Products says whether fast precision multiplies quantized weights in
// int8 on this processor (AVX-512 VNNI or AVX2); without it, fast is exact.
func Int8Products() bool { return hasInt8GEMM() }

// Int8Instructions names what the int8 GEMM runs on here: "AVX-512 VNNI",
// "AVX2", or "" where it does not run.
func Int8Instructions() string {
	switch {
	case hasVNNI:
		return "AVX-512 VNNI"
	case int8AVX2:
		return "AVX2"
	}
	return ""
}
