package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
)

// The block kernel against float64 sums, over lengths with and without a
// tail of fewer than 8: float32 accumulation in 8 lanes, about 1e-6 of
// the sum of |products| for these lengths.
func TestBlockDotIsTheDotProducts(t *testing.T) {
	if !hasBlockDot {
		t.Skip("this CPU has no AVX2 and FMA (or is not amd64): the block kernel is not used")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 8, 9, 16, 31, 64, 100, 2048, 2053} {
		w := make([]float32, 4*n)
		x := make([]float32, 2*n)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		got := blockDot(w, x, n)
		for i := range 4 {
			for tk := range 2 {
				want, mag := 0.0, 0.0
				for k := range n {
					p := float64(w[i*n+k]) * float64(x[tk*n+k])
					want += p
					mag += math.Abs(p)
				}
				require.InDelta(t, want, float64(got[2*i+tk]), 1e-6*mag+1e-7, "n %d w%d·x%d", n, i, tk)
			}
			// Alone, each input row gives the same bits as in the pair.
			alone := blockDot(w, x[:n], n)
			require.Equal(t, got[2*i], alone[2*i], "n %d w%d·x0 alone", n, i)
			alone = blockDot(w, x[n:], n)
			require.Equal(t, got[2*i+1], alone[2*i], "n %d w%d·x1 alone", n, i)
		}
	}
}

// MatMul gives the same products with the block kernel as without it (the
// portable path, where the CPU has no AVX2 and FMA), to float32 rounding,
// for a weight whose rows are not a multiple of the tile and an odd number
// of input rows.
func TestMatMulWithAndWithoutTheBlockKernel(t *testing.T) {
	if !hasBlockDot {
		t.Skip("this CPU has no AVX2 and FMA (or is not amd64): only the portable path runs")
	}
	r := rand.New(rand.NewPCG(7, 8))
	const n, cols, rows = 10, 300, 7
	w := make([]byte, 4*n*cols)
	for i := 0; i < len(w); i += 4 {
		binary.LittleEndian.PutUint32(w[i:], math.Float32bits(float32(r.NormFloat64())))
	}
	f, err := quant.For(gguf.F32)
	require.NoError(t, err)
	b := New(1)
	m, err := b.Upload(&model.Weight{Name: "w", Rows: n, Cols: cols, Format: f, Data: w})
	require.NoError(t, err)
	run := func(block bool) []float32 {
		defer func(old, panel bool) { hasBlockDot, hasPanelGEMM = old, panel }(hasBlockDot, hasPanelGEMM)
		hasBlockDot, hasPanelGEMM = block, false
		st := b.NewStream()
		x, _ := st.Alloc("x", rows*cols)
		xs := make([]float32, rows*cols)
		for i := range xs {
			xs[i] = float32(math.Sin(float64(i)))
		}
		st.Write(x, 0, xs)
		y, _ := st.Alloc("y", rows*n)
		st.MatMul(x, rows, backend.Proj{W: m, Dst: y})
		out := make([]float32, rows*n)
		require.NoError(t, st.Read(y, 0, out))
		return out
	}
	with, without := run(true), run(false)
	for i := range with {
		require.InDelta(t, without[i], with[i], 1e-4, "output %d", i) // sums of 300 products of about 1
	}
}

// transpose16 moves 16 rows of 16 dwords into 16 columns, touching nothing
// past them, and refuses slices too short for what the assembly would
// read or write, naming the sizes.
func TestTranspose16ChecksItsSlices(t *testing.T) {
	if !hasPanelGEMM {
		t.Skip("interleave16 is AVX-512 code, run where the panel GEMM runs")
	}
	const ld, stride = 20, 18 // dwords between rows and between columns
	src := make([]float32, 15*ld+16)
	for i := range src {
		src[i] = float32(i)
	}
	dst := make([]float32, 15*stride+16+5)
	for i := range dst {
		dst[i] = -1
	}
	transpose16(asBytes(dst), asBytes(src), 4*ld, 4*stride)
	want := make([]float32, len(dst))
	for i := range want {
		want[i] = -1
	}
	for r := range 16 {
		for c := range 16 {
			want[c*stride+r] = src[r*ld+c]
		}
	}
	require.Equal(t, want, dst)
	require.PanicsWithValue(t, "cpu: a 16 x 16 transpose reads 1264 bytes of 1260 (rows 80 apart) and writes 1144 of 1164 (columns 72 apart)",
		func() { transpose16(asBytes(dst), asBytes(src[1:]), 4*ld, 4*stride) })
	require.Panics(t, func() { transpose16(asBytes(dst[6:]), asBytes(src), 4*ld, 4*stride) })
}
