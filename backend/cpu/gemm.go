package cpu

import (
	"fmt"

	"github.com/stratalab/strata/backend"
)

// The AVX-512 GEMM: a thread takes groupRows weight rows (outputs) of one
// projection, decodes them once, and for each block of 32 rows of x (packed
// k-major by packX) runs the 12-row kernel over the group: the group's
// weights and the block of x stay in L2. Lanes run along rows of x, so the
// weights are read as they are stored, never transposed. Each output is
// summed in one lane, k in order, in blocks of 256, so it comes out the
// same whatever rows it is multiplied with: an incremental prefill gives
// the one-pass logits bit for bit.
const (
	kernelRows = 12 // weight rows per kernel call
	groupRows  = 48 // weight rows a thread decodes at a time
)

// xBlocks calls fn for each block of rows of x: 32 rows, the last 16 wide
// when 16 or fewer remain. Block r0 is packed from r0*cols on.
func xBlocks(rows int, fn func(r0, width int)) {
	for b := 0; 32*b < rows; b++ {
		fn(xBlock(rows, b))
	}
}

// xBlock is block b of xBlocks(rows).
func xBlock(rows, b int) (r0, width int) {
	if rows-32*b <= 16 {
		return 32 * b, 16
	}
	return 32 * b, 32
}

// packX packs x's rows k-major in blocks (xt[r0*cols + k*width + r] =
// x[r0+r][k], zero past the last row) into s.xpack, the blocks of xBlocks
// on the stream's threads. s.xpack grows for as many rows of the widest
// weight's columns, so that it is not grown again (leaving the narrower
// copy as garbage) within a prefill.
func (s *stream) packX(x []float32, rows, cols int) []float32 {
	padded := 0
	xBlocks(rows, func(r0, width int) { padded = r0 + width })
	n := padded * cols
	if cap(s.xpack) < n {
		s.xpack = make([]float32, padded*max(cols, int(s.b.widest.Load())))
	}
	s.xpack = s.xpack[:n]
	p := s.xpack
	s.parallel((rows+31)/32, 32*cols, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			r0, width := xBlock(rows, b)
			packXBlock(p[r0*cols:(r0+width)*cols], x, rows, cols, r0, width)
		}
	})
	return p
}

// packXBlock packs block r0 (width rows) of x into blk: 16 x 16 transposes
// where 16 rows and 16 k are whole, element by element at the edges.
func packXBlock(blk, x []float32, rows, cols, r0, width int) {
	for rh := 0; rh < width; rh += 16 {
		whole := 0
		if r0+rh+16 <= rows {
			whole = cols &^ 15
			for k0 := 0; k0 < whole; k0 += 16 {
				transpose16(asBytes(blk[k0*width+rh:]), asBytes(x[(r0+rh)*cols+k0:]), 4*cols, 4*width)
			}
		}
		for r := rh; r < rh+16; r++ {
			for k := whole; k < cols; k++ {
				v := float32(0)
				if r0+r < rows {
					v = x[(r0+r)*cols+k]
				}
				blk[k*width+r] = v
			}
		}
	}
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// paddedStride is the stride the kernels read decoded weight rows at: rows
// a multiple of 4 KiB apart fall in one L1 set, which 12 of them and the
// stream of x overflow (alone, the kernel ran 11% slower at k = 2048 than
// at a stride 64 bytes longer; bonsai-1.7b prefills at T=256 ran 5-15%
// faster padded).
func paddedStride(cols int) int {
	if cols%1024 == 0 {
		return cols + 16
	}
	return cols
}

// gemmGroup is outputs c0..c1 of one projection for rows r0..r1-1 of x:
// what a thread takes at a time.
type gemmGroup struct {
	p              backend.Proj
	c0, c1, r0, r1 int
}

// gemmGroups splits the projections' outputs into groups of size, and the
// rows of x into parts at multiples of xStep, in s.groups (kept: made
// afresh on every product, the slice was 3-4% of a tiny-qwen3 prefill's
// profile at T=64). Where that makes fewer than chunksPerThread groups a
// thread, size is halved down to step (smaller groups cost nothing but
// the reuse of a block of x in cache), and then x is cut (each part decodes
// the group's weights again): tiny-qwen3's 256-output products made 6
// groups of 48, or 8 of the int8 kernel's 32, and 8 to 10 of 16 threads
// had nothing to do in them.
func (s *stream) gemmGroups(outs []backend.Proj, size, step, rows, xStep int) []gemmGroup {
	count := func(size int) int {
		n := 0
		for _, p := range outs {
			n += (p.W.Rows() + size - 1) / size
		}
		return n
	}
	steps, parts := (rows+xStep-1)/xStep, 1
	if s.b.threads > 1 {
		want := s.b.threads * chunksPerThread
		for size > step && count(size) < want {
			size = max(step, size/2/step*step)
		}
		parts = min(steps, (want+count(size)-1)/count(size))
	}
	gs := s.groups[:0]
	for _, p := range outs {
		for c := 0; c < p.W.Rows(); c += size {
			for part := range parts {
				r0, r1 := steps*part/parts*xStep, min(rows, steps*(part+1)/parts*xStep)
				gs = append(gs, gemmGroup{p: p, c0: c, c1: min(c+size, p.W.Rows()), r0: r0, r1: r1})
			}
		}
	}
	s.groups = gs
	return gs
}

// cacheLine ends a thread's scratch, which sits next to the other threads'
// in one slice: the tiles a thread writes at its end then share no cache
// line with the next thread's.
type cacheLine [64]byte

// gemmScratch is a thread's decoded weights and kernel tiles.
type gemmScratch struct {
	dec   []float32
	wt    []float32 // gemv's weights, k-major
	tiles []float32 // a group's kernel tiles for one block of x
	out64 [64]float32
	_     cacheLine
}

// gemvRows is the most rows of x the matrix-vector path takes: below it,
// most lanes of the 16-row kernel would multiply zero rows.
const gemvRows = 4

// gemv computes outputs c0..c1 (at most 64) of p for each of rows (at most
// gemvRows) rows of x: 64 weight rows decoded and stored k-major once,
// then each row of x through gemv64, summed as the 16- and 32-row kernels
// sum it (a row gives the same bits however it is multiplied).
func (sc *gemmScratch) gemv(p backend.Proj, c0, c1 int, x []float32, rows, cols int) {
	m := p.W.(*matrix)
	n := c1 - c0
	sc.dec = grow(sc.dec, 64*cols)
	w := m.decode(sc.dec, c0, n)
	if n < 64 {
		if m.f32 != nil { // decoded rows are already in sc.dec
			copy(sc.dec, w)
		}
		clear(sc.dec[n*cols : 64*cols])
		w = sc.dec[:64*cols]
	}
	sc.wt = grow(sc.wt, 64*cols)
	whole := cols &^ 15
	for rb := range 4 {
		for k0 := 0; k0 < whole; k0 += 16 {
			transpose16(asBytes(sc.wt[k0*64+rb*16:]), asBytes(w[rb*16*cols+k0:]), 4*cols, 256)
		}
	}
	for k := whole; k < cols; k++ {
		for i := range 64 {
			sc.wt[k*64+i] = w[i*cols+k]
		}
	}
	out, width := data(p.Dst), m.w.Rows
	var bias []float32
	if p.Bias != nil {
		bias = data(p.Bias)[c0:c1]
	}
	for r := range rows {
		gemv64(&sc.wt[0], &x[r*cols], cols, &sc.out64)
		o := out[r*width+c0 : r*width+c1]
		copy(o, sc.out64[:n])
		for i := range bias {
			o[i] += bias[i]
		}
	}
}

// run computes the group's outputs for its rows of x (xt: all of x packed by
// packX; g.r0 a multiple of 32, where its blocks start).
func (g gemmGroup) run(sc *gemmScratch, xt []float32, rows, cols int) {
	m := g.p.W.(*matrix)
	n := g.c1 - g.c0
	chunks := (n + kernelRows - 1) / kernelRows
	var w []float32
	ldw := cols
	// Float32 weights are read in place unless the padding pays for a copy:
	// at 128 rows of x or more, each weight row is read four times or more.
	if m.f32 == nil || rows >= 128 {
		ldw = paddedStride(cols)
	}
	if m.f32 != nil && n%kernelRows == 0 && ldw == cols {
		w = m.f32[g.c0*cols : g.c1*cols]
	} else {
		// Decoded (or copied) a row at a time at stride ldw, with zero rows
		// up to whole chunks.
		sc.dec = grow(sc.dec, chunks*kernelRows*ldw)
		for i := range n {
			dst := sc.dec[i*ldw : i*ldw+cols]
			if row := m.decode(dst, g.c0+i, 1); m.f32 != nil { // a view of the weights
				copy(dst, row)
			}
		}
		clear(sc.dec[n*ldw:])
		w = sc.dec
	}
	out, width := data(g.p.Dst), m.w.Rows
	var bias []float32
	if g.p.Bias != nil {
		bias = data(g.p.Bias)
	}
	sc.tiles = grow(sc.tiles, chunks*kernelRows*32)
	xBlocks(rows, func(r0, bw int) {
		if r0 < g.r0 || r0 >= g.r1 {
			return
		}
		xb := &xt[r0*cols]
		valid := min(bw, rows-r0)
		// The chunks' tiles one after the other: [group rows][bw].
		for q := range chunks {
			tile := sc.tiles[q*kernelRows*bw:]
			if bw == 32 {
				gemm32x12(xb, &w[q*kernelRows*ldw], ldw, cols, (*[384]float32)(tile))
			} else {
				gemm16x12(xb, &w[q*kernelRows*ldw], ldw, cols, (*[192]float32)(tile))
			}
		}
		if bias != nil {
			for i, b := range bias[g.c0:g.c1] {
				for r := range valid {
					sc.tiles[i*bw+r] += b
				}
			}
		}
		// Transposed into out's rows, 16 x 16 where whole.
		for i0 := 0; i0 < n; i0 += 16 {
			for j0 := 0; j0 < valid; j0 += 16 {
				if i0+16 <= n && j0+16 <= valid {
					transpose16(asBytes(out[(r0+j0)*width+g.c0+i0:]), asBytes(sc.tiles[i0*bw+j0:]), 4*bw, 4*width)
					continue
				}
				for i := i0; i < min(i0+16, n); i++ {
					for j := j0; j < min(j0+16, valid); j++ {
						out[(r0+j)*width+g.c0+i] = sc.tiles[i*bw+j]
					}
				}
			}
		}
	})
}

// transpose16 transposes 16 rows of 16 dwords (row r at src[r*ld:]) into
// 16 columns (column j at dst[j*stride:]) with interleave16 (a dword at a
// time without AVX-512, for the AVX2 int8 GEMM), once it has
// checked that both slices hold what that touches: the assembly checks
// nothing, and a caller's edge arithmetic gone wrong would read or write
// past them.
func transpose16(dst, src []byte, ld, stride int) {
	if len(src) < 15*ld+64 || len(dst) < 15*stride+64 {
		panic(fmt.Sprintf("cpu: a 16 x 16 transpose reads %d bytes of %d (rows %d apart) and writes %d of %d (columns %d apart)",
			15*ld+64, len(src), ld, 15*stride+64, len(dst), stride))
	}
	if !hasInterleave16 {
		for r := range 16 {
			for j := range 16 {
				copy(dst[j*stride+4*r:j*stride+4*r+4], src[r*ld+4*j:r*ld+4*j+4])
			}
		}
		return
	}
	interleave16(&dst[0], &src[0], ld, stride)
}
