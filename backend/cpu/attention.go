package cpu

import (
	"math"
	"slices"
	"sync/atomic"

	"github.com/stratalab/strata/backend"
)

// Attention on the AVX-512 GEMM kernels, one head and a block of up to 32
// queries at a time. Scores: the block's queries packed as x, 12 keys of the
// cache at a time as weight rows. Mix: the head's values packed as x (lanes
// along head dims, keys along k), 12 rows of the pattern at a time as
// weight rows. A score is summed over head dims in one lane and an output
// over keys in one lane, in order, in blocks of 256 keys counted from key 0
// (or from a multiple of 256 with a sliding window): a query's values do not
// depend on the block it is in, so an incremental prefill matches a one-shot
// one bit for bit, and the fused and materialising paths agree bit for bit.
// One call per 32 x 12 tile replaces a call of gonum's dot or axpy per
// score and per key: at head_dim 32 those calls' overhead was most of the
// default model's prefill.

// attnScratch is a thread's working memory for attention blocks.
type attnScratch struct {
	q      []float32 // the block's queries, packed k-major
	w      []float32 // the block's scores, then pattern, rows of span
	k      []float32 // the last keys, padded to a whole kernel chunk
	tile32 [384]float32
	tile16 [192]float32
	_      cacheLine
}

// kernel runs the 32- or 16-lane GEMM kernel and returns its tile.
func (sc *attnScratch) kernel(bw int, xt, w *float32, ldw, k int) []float32 {
	if bw == 32 {
		gemm32x12(xt, w, ldw, k, &sc.tile32)
		return sc.tile32[:]
	}
	gemm16x12(xt, w, ldw, k, &sc.tile16)
	return sc.tile16[:]
}

// attnBlock is one head's block of queries r0 .. r0+rows-1 (bw lanes) and
// the keys [lo, hi) they may see.
type attnBlock struct {
	h, r0, bw, rows, lo, hi int
}

func (b attnBlock) span() int { return b.hi - b.lo }

// attnRows is the rows of a thread's block scratch: a block's 32 queries in
// whole 12-row chunks (engine.EstimateMemory counts them).
const attnRows = (32 + kernelRows - 1) / kernelRows * kernelRows

// rowsFor readies sc.w for n rows of span: whole 12-row chunks, as blockMix
// reads them, zero past row n.
func (sc *attnScratch) rowsFor(n, span int) []float32 {
	sc.w = grow(sc.w, (n+kernelRows-1)/kernelRows*kernelRows*span)
	clear(sc.w[n*span:])
	return sc.w
}

// attnBlocks lists every head's query blocks into bs, the last queries
// (the most keys) of each head first: threads that take the first blocks
// and those that take the last then finish together. Where 32-query blocks
// would give the threads fewer than chunksPerThread each, blocks are of 16
// queries (a query's values do not depend on its block): at T=64 tiny-qwen3's
// 8 heads made 16 blocks of two sizes for 16 threads.
func attnBlocks(bs []attnBlock, a *backend.Attention, threads int) []attnBlock {
	bs = bs[:0]
	blocks := xBlocks
	if threads > 1 && a.Heads*((a.T+31)/32) < threads*chunksPerThread {
		blocks = func(rows int, fn func(r0, width int)) {
			for r0 := 0; r0 < rows; r0 += 16 {
				fn(r0, 16)
			}
		}
	}
	for h := range a.Heads {
		first := len(bs)
		blocks(a.T, func(r0, bw int) {
			rows := min(bw, a.T-r0)
			hi := a.Pos0 + r0 + rows // past the last query's position
			lo := 0
			if a.Window > 0 {
				// Whole blocks of 256 keys, so the kernel's sums start where
				// a one-query block's would.
				lo = max(0, a.Pos0+r0-a.Window+1) &^ 255
			}
			bs = append(bs, attnBlock{h: h, r0: r0, bw: bw, rows: rows, lo: lo, hi: hi})
		})
		slices.Reverse(bs[first:])
	}
	return bs
}

// eachAttnBlock runs fn over every block on the stream's threads. Each
// thread's rows are sized for the widest block first: grown block by block,
// at T=16,000 a thread's first head left ~580 MB of garbage, which the
// collector's headroom let double the prefill's peak memory.
func (s *stream) eachAttnBlock(a *backend.Attention, fn func(sc *attnScratch, b attnBlock)) {
	s.blocks = attnBlocks(s.blocks, a, s.b.threads)
	bs := s.blocks
	if len(s.attn) < s.b.threads {
		s.attn = make([]attnScratch, s.b.threads)
	}
	widest := 0
	for _, b := range bs {
		widest = max(widest, b.span())
	}
	for i := range s.attn {
		s.attn[i].w = grow(s.attn[i].w, attnRows*widest)
	}
	s.workers(len(bs), grain, func(worker, lo, hi int) {
		for _, b := range bs[lo:hi] {
			fn(&s.attn[worker], b)
		}
	})
}

// blockScores writes the block's scaled, capped and masked scores of keys
// [b.lo, b.hi), query row r's at dst[r*ld:].
func blockScores(a *backend.Attention, sc *attnScratch, b attnBlock, dst []float32, ld int) {
	q, k := data(a.Q), data(a.K)
	hd := a.HeadDim
	kvh, ldk := b.h/(a.Heads/a.KVHeads), a.KVHeads*a.HeadDim
	sc.q = grow(sc.q, b.bw*hd)
	for r := range b.bw {
		if r >= b.rows {
			for c := range hd {
				sc.q[c*b.bw+r] = 0
			}
			continue
		}
		i := b.r0 + r
		for c, v := range q[(i*a.Heads+b.h)*hd : (i*a.Heads+b.h+1)*hd] {
			sc.q[c*b.bw+r] = v
		}
	}
	negInf := float32(math.Inf(-1))
	for j := b.lo; j < b.hi; j += kernelRows {
		n := min(kernelRows, b.hi-j)
		kp, kld := &k[(j*a.KVHeads+kvh)*hd], ldk
		if n < kernelRows { // the kernel reads 12 rows: pad the last keys
			sc.k = grow(sc.k, kernelRows*hd)
			clear(sc.k[n*hd:])
			for i := range n {
				copy(sc.k[i*hd:(i+1)*hd], k[((j+i)*a.KVHeads+kvh)*hd:])
			}
			kp, kld = &sc.k[0], hd
		}
		tile := sc.kernel(b.bw, &sc.q[0], kp, kld, hd)
		// Key j+i is visible (a.Visible) to rows lo..hi-1 of the block:
		// checked per score, the mask took twice the kernel's time.
		base := a.Pos0 + b.r0
		for i := range n {
			key := j + i
			col := tile[i*b.bw : i*b.bw+b.rows]
			lo, hi := min(max(key-base, 0), b.rows), b.rows
			if a.Window > 0 {
				hi = min(max(key+a.Window-base, lo), b.rows)
			}
			o := dst[j-b.lo+i:]
			for r := range lo {
				o[r*ld] = negInf
			}
			if a.Softcap != 0 {
				for r := lo; r < hi; r++ {
					o[r*ld] = softcap(col[r]*a.Scale, a.Softcap)
				}
			} else {
				for r := lo; r < hi; r++ {
					o[r*ld] = col[r] * a.Scale
				}
			}
			for r := hi; r < b.rows; r++ {
				o[r*ld] = negInf
			}
		}
	}
}

// blockMix writes the block's rows of Z from the pattern rows at
// pat[r*ldp] (r < b.rows, span each, readable up to whole 12-row chunks).
func blockMix(a *backend.Attention, sc *attnScratch, b attnBlock, pat []float32, ldp int, vp []float32) {
	z := data(a.Z)
	hd, span, keys, pd := a.HeadDim, b.span(), a.Keys(), packedDims(a.HeadDim)
	kvh := b.h / (a.Heads / a.KVHeads)
	xBlocks(hd, func(d0, width int) {
		x := &vp[(kvh*pd+d0)*keys+b.lo*width]
		for q0 := 0; q0 < b.rows; q0 += kernelRows {
			tile := sc.kernel(width, x, &pat[q0*ldp], ldp, span)
			for i := range min(kernelRows, b.rows-q0) {
				i0 := b.r0 + q0 + i
				out := z[(i0*a.Heads+b.h)*hd : (i0*a.Heads+b.h+1)*hd]
				copy(out[d0:min(d0+width, hd)], tile[i*width:])
			}
		}
	})
}

// packedDims is head_dim rounded up to the kernel's blocks of 32 or 16.
func packedDims(hd int) int {
	n := 0
	xBlocks(hd, func(r0, width int) { n = r0 + width })
	return n
}

// packValues packs each KV head's values for blockMix: for each block of
// 32 (or 16) head dims d0, vp[(kvh*packedDims + d0)*keys + j*width + d] =
// V[j][kvh][d0+d], zero past head_dim.
func (s *stream) packValues(a *backend.Attention) []float32 {
	v := data(a.V)
	hd, keys, pd := a.HeadDim, a.Keys(), packedDims(a.HeadDim)
	s.vpack = grow(s.vpack, a.KVHeads*pd*keys)
	vp := s.vpack
	s.parallel(a.KVHeads, pd*keys, func(lo, hi int) {
		for kvh := lo; kvh < hi; kvh++ {
			xBlocks(hd, func(d0, width int) {
				dst := vp[(kvh*pd+d0)*keys : (kvh*pd+d0+width)*keys]
				n := min(width, hd-d0)
				for j := range keys {
					row := dst[j*width : (j+1)*width]
					copy(row, v[(j*a.KVHeads+kvh)*hd+d0:][:n])
					clear(row[n:])
				}
			})
		}
	})
	return vp
}

// flashTiled is attention one block of queries at a time, its scores and
// pattern in cache; with capture, each row of them is also written out
// whole, masked keys included, as scoresTiled and Softmax write them
// (the keys outside the block's span only where the arena does not hold
// them already).
func (s *stream) flashTiled(a *backend.Attention, capture bool) {
	vp := s.packValues(a)
	keys := a.Keys()
	var scores, pattern []float32
	var fillScores, fillPattern bool
	var nanRows atomic.Bool // a NaN row's masked entries hold NaN, not the 0 masksHeld expects
	if capture {
		scores, pattern = data(a.Scores), data(a.Pattern)
		sl := maskLayout{heads: a.Heads, t: a.T, pos0: a.Pos0, keys: keys, window: a.Window}
		pl := sl
		pl.pattern = true
		fillScores, fillPattern = !s.masksHeld(a.Scores, sl), !s.masksHeld(a.Pattern, pl)
		defer s.masksWritten(a.Scores, sl)
		defer func() {
			if !nanRows.Load() {
				s.masksWritten(a.Pattern, pl)
			}
		}()
	}
	negInf := float32(math.Inf(-1))
	s.eachAttnBlock(a, func(sc *attnScratch, b attnBlock) {
		span := b.span()
		w := sc.rowsFor(b.rows, span)
		blockScores(a, sc, b, w, span)
		first := (b.h*a.T + b.r0) * keys
		for r := range b.rows {
			row := w[r*span : (r+1)*span]
			if capture {
				out := scores[first+r*keys : first+(r+1)*keys]
				copy(out[b.lo:], row)
				if fillScores {
					fill(out[:b.lo], negInf)
					fill(out[b.hi:], negInf)
				}
			}
			softmax(row, row)
			if capture {
				out := pattern[first+r*keys : first+(r+1)*keys]
				copy(out[b.lo:], row)
				switch {
				case row[0] != row[0]: // a NaN row is NaN outside the span too, as a whole row's softmax makes it
					fill(out[:b.lo], row[0])
					fill(out[b.hi:], row[0])
					nanRows.Store(true)
				case fillPattern:
					clear(out[:b.lo])
					clear(out[b.hi:])
				}
			}
		}
		blockMix(a, sc, b, w, span, vp)
	})
}

// masksHeld reports whether t is a whole capture arena whose masked
// entries hold what l puts there: a recycled one, written last by
// flashTiled with the same layout, in a run whose trace was closed before
// anyone was handed a slice of it.
func (s *stream) masksHeld(t backend.Tensor, l maskLayout) bool {
	m := masks(t)
	if m != nil && m.had == l {
		s.b.arenas.note(arenaMasksKept)
		return true
	}
	return false
}

// masksWritten records that t's masked entries now hold what l puts there.
// Nothing else writes an arena of scores or patterns after flashTiled: a
// hook on either takes the path through AttnScores and Softmax instead.
func (s *stream) masksWritten(t backend.Tensor, l maskLayout) {
	if m := masks(t); m != nil {
		m.wrote = l
	}
}

// fill sets every element of x to v, doubling what is set with copy, which
// moves vectors where a loop stores one element at a time (capture-all's
// masked scores were 5% of a prefill at T=512).
func fill(x []float32, v float32) {
	if len(x) == 0 {
		return
	}
	x[0] = v
	for n := 1; n < len(x); n *= 2 {
		copy(x[n:], x[:n])
	}
}

func (s *stream) scoresTiled(a *backend.Attention) {
	out, keys := data(a.Scores), a.Keys()
	negInf := float32(math.Inf(-1))
	s.eachAttnBlock(a, func(sc *attnScratch, b attnBlock) {
		first := (b.h*a.T + b.r0) * keys
		blockScores(a, sc, b, out[first+b.lo:], keys)
		for r := range b.rows {
			row := out[first+r*keys : first+(r+1)*keys]
			fill(row[:b.lo], negInf)
			fill(row[b.hi:], negInf)
		}
	})
}

func (s *stream) mixTiled(a *backend.Attention) {
	vp := s.packValues(a)
	p, keys := data(a.Pattern), a.Keys()
	s.eachAttnBlock(a, func(sc *attnScratch, b attnBlock) {
		first := (b.h*a.T + b.r0) * keys
		if first+(b.rows+kernelRows-1)/kernelRows*kernelRows*keys <= len(p) {
			blockMix(a, sc, b, p[first+b.lo:], keys, vp)
			return
		}
		// The kernel would read past the pattern: copy the block's rows.
		span := b.span()
		w := sc.rowsFor(b.rows, span)
		for r := range b.rows {
			copy(w[r*span:(r+1)*span], p[first+r*keys+b.lo:])
		}
		blockMix(a, sc, b, w, span, vp)
	})
}
