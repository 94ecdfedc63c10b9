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
	for r0 := 0; r0 < rows; {
		width := 32
		if rows-r0 <= 16 {
			width = 16
		}
		fn(r0, width)
		r0 += width
	}
}

// packX packs x's rows k-major in blocks (xt[r0*cols + k*width + r] =
// x[r0+r][k], zero past the last row) into p, grown as needed (for as many
// rows of widest columns): 16 x 16 transposes where 16 rows and 16 k are
// whole, element by element at the edges.
func packX(p, x []float32, rows, cols, widest int) []float32 {
	padded := 0
	xBlocks(rows, func(r0, width int) { padded = r0 + width })
	n := padded * cols
	if cap(p) < n {
		p = make([]float32, padded*max(cols, widest))
	}
	p = p[:n]
	xBlocks(rows, func(r0, width int) {
		blk := p[r0*cols : (r0+width)*cols]
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
	})
	return p
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

// gemmGroup is outputs c0..c1 of one projection: what a thread takes at a time.
type gemmGroup struct {
	p      backend.Proj
	c0, c1 int
}

// gemmGroups splits the projections' outputs into groups of size, in
// gs's memory (the stream's, kept: made afresh on every product, the
// slice was 3-4% of a tiny-qwen3 prefill's profile at T=64).
func gemmGroups(gs []gemmGroup, outs []backend.Proj, size int) []gemmGroup {
	gs = gs[:0]
	for _, p := range outs {
		for c := 0; c < p.W.Rows(); c += size {
			gs = append(gs, gemmGroup{p: p, c0: c, c1: min(c+size, p.W.Rows())})
		}
	}
	return gs
}

// gemmScratch is a thread's decoded weights and kernel tiles.
type gemmScratch struct {
	dec   []float32
	wt    []float32 // gemv's weights, k-major
	tiles []float32 // a group's kernel tiles for one block of x
	out64 [64]float32
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

// run computes the group's outputs for every row of x (xt: x packed by packX).
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
