package cpu

import (
	"fmt"
	"math"
	"reflect"
	"slices"

	"gonum.org/v1/gonum/blas/blas32"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
)

// rowTile is how many weight rows a worker decodes at once: each activation
// row is then read once per tile, and the decoded tile stays in L1/L2.
const rowTile = 4

func (s *stream) Embed(dst backend.Tensor, table backend.Matrix, ids []int32) {
	m, d := table.(*matrix), data(dst)
	cols := m.w.Cols
	if len(d) < len(ids)*cols {
		s.fail(fmt.Errorf("cpu: embed of %d tokens into %d elements", len(ids), len(d)))
		return
	}
	rowBytes := len(m.w.Data) / m.w.Rows
	for i, id := range ids {
		if id < 0 || int(id) >= m.w.Rows {
			s.fail(fmt.Errorf("cpu: token id %d at %d outside %s's %d rows", id, i, m.w.Name, m.w.Rows))
			return
		}
	}
	s.parallel(len(ids), cols, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(ids[i])
			m.w.Format.Dequantize(d[i*cols:(i+1)*cols], m.w.Data[id*rowBytes:(id+1)*rowBytes])
		}
	})
}

func (s *stream) RMSNorm(dst, src, gain, scale backend.Tensor, rows, dim int, eps float32) {
	o, x, g, sc := data(dst), data(src), data(gain), optData(scale)
	s.parallel(rows, dim, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, or := x[r*dim:(r+1)*dim], o[r*dim:(r+1)*dim]
			root := math.Sqrt(sumSquares(xr)/float64(dim) + float64(eps))
			if sc != nil {
				sc[r] = float32(root)
			}
			inv := float32(1 / root)
			if hasVectorSoftmax && dim > 0 {
				normApply(&or[0], &xr[0], &g[:dim][0], dim, inv)
				continue
			}
			for i, v := range xr {
				or[i] = v * inv * g[i]
			}
		}
	})
}

// sumSquares is sum(x^2) in float64 (each square is exact there), in four
// running sums: one sum's chain of dependent adds made RMSNorm 12% of a
// tiny-qwen3 prefill's profile (its q and k norms are rows of 32).
func sumSquares(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a, b, c, d := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// optData is a tensor's data, nil for a nil tensor.
func optData(t backend.Tensor) []float32 {
	if t == nil {
		return nil
	}
	return data(t)
}

func (s *stream) NormApply(dst, src, scale, gain, bias backend.Tensor, rows, dim int, center bool) {
	o, x, sc, g, b := data(dst), data(src), data(scale), data(gain), optData(bias)
	s.parallel(rows, dim, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, or := x[r*dim:(r+1)*dim], o[r*dim:(r+1)*dim]
			var mean float32
			if center {
				var sum float64
				for _, v := range xr {
					sum += float64(v)
				}
				mean = float32(sum / float64(dim))
			}
			inv := float32(1 / float64(sc[r]))
			for i, v := range xr {
				y := (v - mean) * inv * g[i]
				if b != nil {
					y += b[i]
				}
				or[i] = y
			}
		}
	})
}

func (s *stream) LayerNorm(dst, src, gain, bias, scale backend.Tensor, rows, dim int, eps float32) {
	o, x, g, b, sc := data(dst), data(src), data(gain), data(bias), optData(scale)
	s.parallel(rows, 2*dim, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, or := x[r*dim:(r+1)*dim], o[r*dim:(r+1)*dim]
			var sum, ss float64
			for _, v := range xr {
				sum += float64(v)
			}
			mean := sum / float64(dim)
			for _, v := range xr {
				ss += (float64(v) - mean) * (float64(v) - mean)
			}
			root := math.Sqrt(ss/float64(dim) + float64(eps))
			if sc != nil {
				sc[r] = float32(root)
			}
			inv, m := float32(1/root), float32(mean)
			for i, v := range xr {
				or[i] = (v-m)*inv*g[i] + b[i]
			}
		}
	})
}

// SetPrecision chooses the int8 GEMM for fast precision where it can run
// (quantized weights, more than 8 rows, AVX-512 VNNI); every other product
// multiplies in float32.
func (s *stream) SetPrecision(p backend.Precision) { s.prec = p }

func (s *stream) MatMul(x backend.Tensor, rows int, outs ...backend.Proj) {
	xs := data(x)
	if len(outs) == 0 {
		return
	}
	cols := outs[0].W.Cols()
	total := 0
	for _, p := range outs {
		if p.W.Cols() != cols {
			s.fail(fmt.Errorf("cpu: fused matmul mixes %d and %d input columns", cols, p.W.Cols()))
			return
		}
		if p.Dst.Len() < rows*p.W.Rows() || len(xs) < rows*cols {
			s.fail(fmt.Errorf("cpu: matmul %s: buffers too small for %d rows", p.W.(*matrix).w.Name, rows))
			return
		}
	}
	if rows == 0 || cols == 0 {
		return
	}
	if s.prec == backend.PrecisionFast && rows > 8 && hasInt8GEMM() && int8Weights(outs) {
		s.matMulInt8(xs, rows, cols, outs)
		return
	}
	if len(s.gemm) < s.b.threads {
		s.gemm = make([]gemmScratch, s.b.threads)
	}
	if hasPanelGEMM && rows <= gemvRows {
		groups := s.gemmGroups(outs, 64, 64, rows, rows)
		s.workers(len(groups), grain, func(worker, lo, hi int) {
			for _, g := range groups[lo:hi] {
				s.gemm[worker].gemv(g.p, g.c0, g.c1, xs, rows, cols)
			}
		})
		clear(groups) // holds no tensor past the product
		return
	}
	if hasPanelGEMM {
		xt := s.packX(xs, rows, cols)
		groups := s.gemmGroups(outs, groupRows, kernelRows, rows, 32)
		s.workers(len(groups), grain, func(worker, lo, hi int) {
			for _, g := range groups[lo:hi] {
				g.run(&s.gemm[worker], xt, rows, cols)
			}
		})
		clear(groups)
		return
	}
	for _, p := range outs {
		total += p.W.Rows()
	}
	tiles := (total + rowTile - 1) / rowTile
	s.workers(tiles, rowTile*cols*rows, func(worker, lo, hi int) {
		buf := grow(s.gemm[worker].dec, rowTile*cols)
		s.gemm[worker].dec = buf
		for tile := lo; tile < hi; tile++ {
			// Map the tile's global rows onto projections; a tile may span two.
			for g := tile * rowTile; g < min((tile+1)*rowTile, total); {
				p, r := locate(outs, g)
				m := p.W.(*matrix)
				n := min((tile+1)*rowTile, total, g-r+m.w.Rows) - g
				w := m.decode(buf, r, n)
				out, bias := data(p.Dst), []float32(nil)
				if p.Bias != nil {
					bias = data(p.Bias)
				}
				width := m.w.Rows
				for t := 0; t < rows; {
					if hasBlockDot && n == rowTile {
						// Four weight rows by two input rows (one at the end) in registers.
						pair := min(2, rows-t)
						o := blockDot(w, xs[t*cols:(t+pair)*cols], cols)
						for i := range rowTile {
							b := float32(0)
							if bias != nil {
								b = bias[r+i]
							}
							for p := range pair {
								out[(t+p)*width+r+i] = o[2*i+p] + b
							}
						}
						t += pair
						continue
					}
					xr := xs[t*cols : (t+1)*cols]
					for i := 0; i < n; i++ {
						v := dot(w[i*cols:(i+1)*cols], xr)
						if bias != nil {
							v += bias[r+i]
						}
						out[t*width+r+i] = v
					}
					t++
				}
				g += n
			}
		}
	})
}

// locate finds which projection global row g belongs to and its local row.
func locate(outs []backend.Proj, g int) (backend.Proj, int) {
	for _, p := range outs {
		if g < p.W.Rows() {
			return p, g
		}
		g -= p.W.Rows()
	}
	panic("cpu: row outside the fused projections")
}

// decode returns rows [r, r+n) as float32, decoding into buf unless the
// weight is float32 already.
func (m *matrix) decode(buf []float32, r, n int) []float32 {
	cols := m.w.Cols
	if m.f32 != nil {
		return m.f32[r*cols : (r+n)*cols]
	}
	rowBytes := len(m.w.Data) / m.w.Rows
	m.w.Format.Dequantize(buf[:n*cols], m.w.Data[r*rowBytes:(r+n)*rowBytes])
	return buf[:n*cols]
}

// dot is a float32 dot product through gonum's SIMD kernel.
func dot(a, b []float32) float32 {
	return blas32.Dot(blas32.Vector{N: len(a), Inc: 1, Data: a}, blas32.Vector{N: len(a), Inc: 1, Data: b[:len(a)]})
}

func (s *stream) Rope(dst, src backend.Tensor, rows, heads, headDim, pos0 int, r *model.Rope) {
	ds, xs := data(dst), data(src)
	half := r.Dim / 2
	cosines, sines := s.angles(r, pos0, rows)
	s.parallel(rows, heads*headDim, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			cos, sin := cosines[t*half:(t+1)*half], sines[t*half:(t+1)*half]
			for h := 0; h < heads; h++ {
				v := xs[(t*heads+h)*headDim : (t*heads+h+1)*headDim]
				d := ds[(t*heads+h)*headDim : (t*heads+h+1)*headDim]
				copy(d[r.Dim:], v[r.Dim:]) // partial rotary: the rest passes
				for i := 0; i < half; i++ {
					a, b := 2*i, 2*i+1
					if r.Mode == model.RopeNeoX {
						a, b = i, i+half
					}
					x0, x1 := v[a], v[b]
					d[a] = x0*cos[i] - x1*sin[i]
					d[b] = x0*sin[i] + x1*cos[i]
				}
			}
		}
	})
}

// ropeTable is a rope's cosines and sines, half of each per position from 0,
// and the parameters they were computed from.
type ropeTable struct {
	of       model.Rope
	cos, sin []float32
}

// angles is Rope.Angles of positions [pos0, pos0+rows), half per position,
// each computed once and kept: RoPE turns q and k of every layer by the
// same positions, and the cosines (pow, cos and sin per pair) were a tenth
// of a short prefill.
func (s *stream) angles(r *model.Rope, pos0, rows int) (cos, sin []float32) {
	half := r.Dim / 2
	if s.rope == nil {
		s.rope = map[*model.Rope]*ropeTable{}
	}
	tb := s.rope[r]
	// A caller may change a model's rope between prefills: start over then.
	if tb == nil || !reflect.DeepEqual(tb.of, *r) {
		tb = &ropeTable{of: *r}
		tb.of.FreqFactors = slices.Clone(r.FreqFactors)
		s.rope[r] = tb
	}
	if have := len(tb.cos) / half; have < pos0+rows {
		n := max(pos0+rows, 2*have) // decoding a token at a time grows it
		tb.cos, tb.sin = slices.Grow(tb.cos, (n-have)*half)[:n*half], slices.Grow(tb.sin, (n-have)*half)[:n*half]
		s.parallel(n-have, grain, func(lo, hi int) { // pow, cos and sin per pair
			for p := have + lo; p < have+hi; p++ {
				r.Angles(p, tb.cos[p*half:(p+1)*half], tb.sin[p*half:(p+1)*half])
			}
		})
	}
	return tb.cos[pos0*half : (pos0+rows)*half], tb.sin[pos0*half : (pos0+rows)*half]
}

func (s *stream) AttnScores(a *backend.Attention) {
	if hasPanelGEMM {
		s.scoresTiled(a)
		return
	}
	q, k, sc := data(a.Q), data(a.K), data(a.Scores)
	keys, hd, group := a.Keys(), a.HeadDim, a.Heads/a.KVHeads
	negInf := float32(math.Inf(-1))
	s.parallel(a.Heads*a.T, keys*hd, func(lo, hi int) {
		for hi_ := lo; hi_ < hi; hi_++ {
			h, i := hi_/a.T, hi_%a.T
			qr := q[(i*a.Heads+h)*hd : (i*a.Heads+h+1)*hd]
			row := sc[(h*a.T+i)*keys : (h*a.T+i+1)*keys]
			kvh := h / group
			for j := range keys {
				if !a.Visible(a.Pos0+i, j) {
					row[j] = negInf
					continue
				}
				row[j] = score(a, qr, k[(j*a.KVHeads+kvh)*hd:(j*a.KVHeads+kvh+1)*hd])
			}
		}
	})
}

// score is one scaled (and capped) attention score.
func score(a *backend.Attention, q, k []float32) float32 {
	v := dot(q, k) * a.Scale
	if a.Softcap != 0 {
		v = softcap(v, a.Softcap)
	}
	return v
}

func softcap(x, cap float32) float32 {
	return float32(float64(cap) * math.Tanh(float64(x)/float64(cap)))
}

func (s *stream) Softcap(x backend.Tensor, n int, cap float32) {
	d := data(x)
	s.parallel(n, 8, func(lo, hi int) { // tanh in float64: more than a cheap element
		for i := lo; i < hi; i++ {
			d[i] = softcap(d[i], cap)
		}
	})
}

func (s *stream) Softmax(dst, src backend.Tensor, rows, n int) {
	o, x := data(dst), data(src)
	s.parallel(rows, n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmax(o[r*n:(r+1)*n], x[r*n:(r+1)*n])
		}
	})
}

// softmax writes softmax(x) to o; -Inf entries get exactly 0.
func softmax(o, x []float32) {
	if hasVectorSoftmax && len(x) > 0 {
		softmaxVector(o, x)
		return
	}
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var sum float64
	for i, v := range x {
		if v < -math.MaxFloat32 { // masked: skip the exponential
			o[i] = 0
			continue
		}
		e := float32(math.Exp(float64(v - m)))
		o[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range o {
		o[i] *= inv
	}
}

func (s *stream) AttnMix(a *backend.Attention) {
	if hasPanelGEMM {
		s.mixTiled(a)
		return
	}
	p, v, z := data(a.Pattern), data(a.V), data(a.Z)
	keys, hd, group := a.Keys(), a.HeadDim, a.Heads/a.KVHeads
	s.parallel(a.Heads*a.T, keys*hd, func(lo, hi int) {
		for hi_ := lo; hi_ < hi; hi_++ {
			h, i := hi_/a.T, hi_%a.T
			mix(z[(i*a.Heads+h)*hd:(i*a.Heads+h+1)*hd], p[(h*a.T+i)*keys:(h*a.T+i)*keys+a.Pos0+i+1], v, a.KVHeads, h/group, hd)
		}
	})
}

// mix writes out = sum_j w[j] * v[j, kvh, :], through gonum's SIMD axpy
// (the scalar loop was 38% of a tiny-qwen3 prefill at T=512).
func mix(out, w, v []float32, kvHeads, kvh, hd int) {
	clear(out)
	o := blas32.Vector{N: hd, Inc: 1, Data: out}
	for j, wj := range w {
		blas32.Axpy(wj, blas32.Vector{N: hd, Inc: 1, Data: v[(j*kvHeads+kvh)*hd : (j*kvHeads+kvh+1)*hd]}, o)
	}
}

func (s *stream) FlashAttentionCapture(a *backend.Attention) bool {
	if !hasPanelGEMM {
		return false
	}
	s.flashTiled(a, true)
	return true
}

func (s *stream) FlashAttention(a *backend.Attention) {
	if hasPanelGEMM {
		s.flashTiled(a, false)
		return
	}
	q, k, v, z := data(a.Q), data(a.K), data(a.V), data(a.Z)
	hd, group := a.HeadDim, a.Heads/a.KVHeads
	if len(s.attn) < s.b.threads {
		s.attn = make([]attnScratch, s.b.threads)
	}
	s.workers(a.Heads*a.T, a.Keys()*hd, func(worker, lo, hi int) {
		// The thread's row, kept: made per chunk, rows were garbage on
		// every call.
		sc := &s.attn[worker]
		sc.w = grow(sc.w, a.Keys())
		row := sc.w
		for hi_ := lo; hi_ < hi; hi_++ {
			h, i := hi_/a.T, hi_%a.T
			kvh := h / group
			qr := q[(i*a.Heads+h)*hd : (i*a.Heads+h+1)*hd]
			w := row[:a.Pos0+i+1]
			for j := range w {
				if !a.Visible(a.Pos0+i, j) {
					w[j] = float32(math.Inf(-1))
					continue
				}
				w[j] = score(a, qr, k[(j*a.KVHeads+kvh)*hd:(j*a.KVHeads+kvh+1)*hd])
			}
			softmax(w, w)
			mix(z[(i*a.Heads+h)*hd:(i*a.Heads+h+1)*hd], w, v, a.KVHeads, kvh, hd)
		}
	})
}

func (s *stream) Add(dst, a, b backend.Tensor, n int) {
	d, x, y := data(dst)[:n], data(a)[:n], data(b)[:n]
	// Split from a few thousand elements (grain): left whole below 65,536
	// (parallelCopy), the residual sums were 45% of what a tiny-qwen3
	// prefill at T=64 ran outside parallel calls.
	s.parallel(n, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = x[i] + y[i]
		}
	})
}

func (s *stream) SwiGLU(dst, gate, up backend.Tensor, n int) {
	d, g, u := data(dst), data(gate), data(up)
	s.parallel(n, 1, func(lo, hi int) {
		if hasVectorSoftmax && hi > lo {
			swiglu(&d[lo], &g[lo], &u[lo], hi-lo)
			return
		}
		for i := lo; i < hi; i++ {
			d[i] = g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
		}
	})
}

// geluCoef is sqrt(2/pi), as GPT-2 and ggml write it.
const geluCoef = 0.7978845608028654

func gelu(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(geluCoef*(v+0.044715*v*v*v))))
}

func (s *stream) GELU(dst, src backend.Tensor, n int) {
	d, x := data(dst), data(src)
	s.parallel(n, 8, func(lo, hi int) { // tanh in float64
		for i := lo; i < hi; i++ {
			d[i] = gelu(x[i])
		}
	})
}

func (s *stream) GeGLU(dst, gate, up backend.Tensor, n int) {
	d, g, u := data(dst), data(gate), data(up)
	s.parallel(n, 8, func(lo, hi int) { // tanh in float64
		for i := lo; i < hi; i++ {
			d[i] = gelu(g[i]) * u[i]
		}
	})
}

func (s *stream) Copy(dst backend.Tensor, dstOff int, src backend.Tensor, srcOff, n int) {
	d, x := data(dst), data(src)
	if dstOff < 0 || srcOff < 0 || n < 0 || dstOff > len(d) || n > len(d)-dstOff || srcOff > len(x) || n > len(x)-srcOff {
		s.fail(fmt.Errorf("cpu: copy of %d elements from %d/%d to %d/%d out of range", n, srcOff, len(x), dstOff, len(d)))
		return
	}
	d, x = d[dstOff:dstOff+n], x[srcOff:srcOff+n]
	s.spans(n, func(lo, hi int) { copy(d[lo:hi], x[lo:hi]) })
}

// spans calls fn over [0, n) in one span, or split over the threads in
// spans of at least parallelCopy elements where n is that large (Copy).
func (s *stream) spans(n int, fn func(lo, hi int)) {
	chunks := n / parallelCopy
	if chunks < 2 {
		fn(0, n)
		return
	}
	s.parallel(chunks, parallelCopy, func(lo, hi int) { fn(n*lo/chunks, n*hi/chunks) })
}

// parallelCopy is the smallest copy (in elements, 256 KiB) split over the
// threads: the residual stream is 512 KiB at T=512 on the default model's
// shape.
const parallelCopy = 1 << 16

func (s *stream) Edit(t backend.Tensor, e backend.Edit) {
	d := data(t)
	if err := e.Check(len(d)); err != nil {
		s.fail(fmt.Errorf("cpu: %w", err))
		return
	}
	var src []float32
	if e.Op == backend.EditSet || e.Op == backend.EditAdd {
		src = data(e.Src)
	}
	row := func(r int) []float32 { return d[e.Off+r*e.Stride : e.Off+r*e.Stride+e.Cols] }
	if e.Op == backend.EditMean {
		mean := make([]float64, e.Cols)
		for r := range e.Rows {
			for i, v := range row(r) {
				mean[i] += float64(v)
			}
		}
		for r := range e.Rows {
			for i := range row(r) {
				row(r)[i] = float32(mean[i] / float64(e.Rows))
			}
		}
		return
	}
	for r := range e.Rows {
		x := row(r)
		var sr []float32
		if src != nil {
			sr = src[e.SrcOff+r*e.SrcStride : e.SrcOff+r*e.SrcStride+e.Cols]
		}
		for i := range x {
			switch e.Op {
			case backend.EditFill:
				x[i] = e.Scalar
			case backend.EditScale:
				x[i] *= e.Scalar
			case backend.EditSet:
				x[i] = sr[i]
			case backend.EditAdd:
				x[i] += e.Scalar * sr[i]
			}
		}
	}
}

func (s *stream) Argmax(dst, src backend.Tensor, rows, n int) {
	d, x := data(dst), data(src)
	for r := range rows {
		best := 0
		for i, v := range x[r*n : (r+1)*n] {
			if v != v { // NaN: no largest
				best = -1
				break
			}
			if v > x[r*n+best] {
				best = i
			}
		}
		d[r] = float32(best)
	}
}

func (s *stream) Rank(dst, src backend.Tensor, rows, n, col int) {
	d, x := data(dst), data(src)
	if col < 0 || col >= n || len(d) < rows || len(x) < rows*n {
		s.fail(fmt.Errorf("cpu: rank of column %d in %d rows of %d (%d and %d elements)", col, rows, n, len(d), len(x)))
		return
	}
	s.parallel(rows, n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, c := x[r*n:(r+1)*n], 0
			for _, v := range row {
				if v > row[col] {
					c++
				}
			}
			d[r] = float32(c)
		}
	})
}

func (s *stream) RowNorms(dst, src backend.Tensor, off, rows, n int) {
	d, x := data(dst), data(src)
	if off < 0 || rows < 0 || n < 0 || len(d) < rows || off > len(x) || rows*n > len(x)-off {
		s.fail(fmt.Errorf("cpu: norms of %d rows of %d at %d (%d and %d elements)", rows, n, off, len(d), len(x)))
		return
	}
	s.parallel(rows, n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			sum := 0.0
			for _, v := range x[off+r*n : off+(r+1)*n] {
				sum += float64(v) * float64(v)
			}
			d[r] = float32(math.Sqrt(sum))
		}
	})
}

// blockDot returns the dot products of the 4 rows of w with the rows of x
// (one or two, of n elements each), as out[2*i+t] = w_i · x_t: the kernel
// takes the first n &^ 7 elements, the tail is added here. A product is
// made the same way whether its input row comes alone or in a pair, so that
// a prefill's results do not depend on how its tokens are batched.
func blockDot(w, x []float32, n int) [8]float32 {
	var out [8]float32
	pair := len(x) >= 2*n
	body := n &^ 7
	if body > 0 {
		if pair {
			dot4x2(&w[0], &w[n], &w[2*n], &w[3*n], &x[0], &x[n], body, &out)
		} else {
			dot4x1(&w[0], &w[n], &w[2*n], &w[3*n], &x[0], body, &out)
		}
	}
	for k := body; k < n; k++ {
		for i := range 4 {
			out[2*i] += w[i*n+k] * x[k]
			if pair {
				out[2*i+1] += w[i*n+k] * x[n+k]
			}
		}
	}
	return out
}

func (s *stream) Route(ids, weights, logits backend.Tensor, rows, experts, k int) {
	id, w, x := data(ids), data(weights), data(logits)
	s.parallel(rows, experts*k, func(lo, hi int) {
		p := make([]float64, experts)
		for r := lo; r < hi; r++ {
			row := x[r*experts : (r+1)*experts]
			m := math.Inf(-1)
			for _, v := range row {
				m = max(m, float64(v))
			}
			var sum float64
			for e, v := range row {
				p[e] = math.Exp(float64(v) - m)
				sum += p[e]
			}
			ids, ws := id[r*k:(r+1)*k], w[r*k:(r+1)*k]
			if math.IsInf(m, -1) { // every expert ablated: no slot is filled
				for j := range k {
					ids[j], ws[j] = -1, 0
				}
				continue
			}
			if !(sum > 0) { // a NaN logit
				for j := range k {
					ids[j], ws[j] = float32(j), float32(math.NaN())
				}
				continue
			}
			// Top k by selection; a chosen expert's p is marked -1. A slot
			// only experts of probability 0 could fill is left empty.
			var kept float64
			for j := range k {
				best := -1
				for e, v := range p {
					if v > 0 && (best < 0 || v > p[best]) {
						best = e
					}
				}
				if best < 0 {
					ids[j], ws[j] = -1, 0
					continue
				}
				ids[j], ws[j] = float32(best), float32(p[best]/sum)
				kept += p[best] / sum
				p[best] = -1
			}
			for j := range k {
				ws[j] = float32(float64(ws[j]) / kept)
			}
		}
	})
}

func (s *stream) GatherRows(dst, src backend.Tensor, rows []int32, cols int) {
	d, x := data(dst), data(src)
	for i, r := range rows {
		if r < 0 || (int(r)+1)*cols > len(x) || (i+1)*cols > len(d) {
			s.fail(fmt.Errorf("cpu: gather of row %d (%d wide) into row %d is out of range", r, cols, i))
			return
		}
		copy(d[i*cols:(i+1)*cols], x[int(r)*cols:(int(r)+1)*cols])
	}
}

func (s *stream) ScatterRows(dst, src backend.Tensor, rows []int32, cols int) {
	d, x := data(dst), data(src)
	for i, r := range rows {
		if r < 0 || (int(r)+1)*cols > len(d) || (i+1)*cols > len(x) {
			s.fail(fmt.Errorf("cpu: scatter of row %d into row %d (%d wide) is out of range", i, r, cols))
			return
		}
		copy(d[int(r)*cols:(int(r)+1)*cols], x[i*cols:(i+1)*cols])
	}
}

func (s *stream) WeightedSum(dst, src, weights backend.Tensor, rows, k, cols int) {
	d, x, w := data(dst), data(src), data(weights)
	s.parallel(rows, k*cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			out := d[r*cols : (r+1)*cols]
			clear(out)
			for j := range k {
				wj := w[r*k+j]
				for i, v := range x[(r*k+j)*cols : (r*k+j+1)*cols] {
					out[i] += wj * v
				}
			}
		}
	})
}

// softmaxVector is softmax on AVX-512 (softmax_amd64.s): exponentials
// within a float32 rounding or two of math.Exp's, summed in float64, 20x
// faster than a call of math.Exp per element. Entries more than 87.3 below
// the maximum (-Inf among them) get exactly 0. It gives the same bits for
// an element wherever in x it falls, and the same sum for any x that
// differs only by -Inf entries at either end in multiples of 16.
func softmaxVector(o, x []float32) {
	var lanes [16]float32
	maxf32(&x[0], len(x), &lanes)
	m := lanes[0]
	for _, v := range lanes[1:] {
		m = max(m, v)
	}
	if m != m { // NaN: every entry NaN, as the scalar softmax and the GPUs' have it
		fill(o, m)
		return
	}
	var sums [16]float64
	expShifted(&o[0], &x[0], len(x), m, &sums)
	var sum float64
	for _, s := range sums {
		sum += s
	}
	scalef32(&o[0], len(o), float32(1/sum))
}

// MatMulExperts runs each run as a MatMul of views of x and the outputs:
// weights are read where they are, so the experts need no pass of their own.
func (s *stream) MatMulExperts(x backend.Tensor, runs []backend.ExpertRun, outs ...backend.ExpertProj) {
	cols, err := backend.CheckExperts(x, runs, outs)
	if err != nil {
		s.fail(fmt.Errorf("cpu: %w", err))
		return
	}
	projs := make([]backend.Proj, len(outs))
	for _, r := range runs {
		if r.Rows == 0 {
			continue
		}
		for i, o := range outs {
			w := o.W[r.Expert]
			projs[i] = backend.Proj{W: w, Dst: s.View(o.Dst, r.First*w.Rows(), r.Rows*w.Rows())}
		}
		s.MatMul(s.View(x, r.First*cols, r.Rows*cols), r.Rows, projs...)
	}
}
