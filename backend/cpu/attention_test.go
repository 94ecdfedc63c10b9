package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/internal/enginetest"
)

// The tiled attention against float64 attention written plainly, on shapes
// around its blocks: queries around 16 and 32, head dims that pad (40) or
// not (32), more keys than 256 (the kernel's sum blocks), grouped heads, a
// cache already holding earlier positions, sliding windows and soft caps.
// And four equalities, bit for bit: the fused path gives the materialising
// path's Z, and so does the fused path that captures, with the same scores
// and pattern, masked entries included (written over garbage); every query alone (as a one-token prefill over the same cache)
// gives its row of a whole prefill; and its scores and pattern too.
//
// Tolerance: a score is a float32 dot of head_dim terms, a pattern entry an
// exponential of it, an output a float32 sum over up to 300 keys in blocks of
// 256: to first order (head_dim + 300) float32 roundings (2^-24) of the sums
// of magnitudes, with scores of order 10 amplifying their error tenfold
// through the exponential. 1e-4 of the largest |Z| covers that with room;
// an error in indexing is of order 1.
func TestTiledAttentionIsAttentionWhateverTheBlock(t *testing.T) {
	if !hasPanelGEMM {
		t.Skip("this CPU has no AVX-512 (or is not amd64): the tiled attention is not used")
	}
	r := rand.New(rand.NewPCG(3, 4))
	b := New(2)
	for _, c := range []struct {
		t, pos0, heads, kvHeads, hd, window int
		softcap                             float32
	}{
		{1, 0, 2, 1, 32, 0, 0},
		{17, 0, 4, 2, 32, 0, 0},
		{45, 3, 4, 2, 40, 0, 0},
		{33, 270, 2, 2, 16, 0, 0},
		{50, 260, 4, 1, 32, 20, 0},
		{50, 260, 2, 1, 32, 300, 0},
		{40, 0, 2, 1, 64, 0, 30},
	} {
		t.Run(fmt.Sprintf("T=%d/pos0=%d/heads=%d:%d/hd=%d/window=%d/softcap=%v", c.t, c.pos0, c.heads, c.kvHeads, c.hd, c.window, c.softcap), func(t *testing.T) {
			keys := c.pos0 + c.t
			st := b.NewStream()
			tensor := func(n int, scale float64) (backend.Tensor, []float32) {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(scale * r.NormFloat64())
				}
				x, err := st.Alloc("x", n)
				require.NoError(t, err)
				st.Write(x, 0, v)
				return x, v
			}
			q, qs := tensor(c.t*c.heads*c.hd, 1)
			k, ks := tensor((keys+5)*c.kvHeads*c.hd, 1) // a cache with room after
			v, vs := tensor((keys+5)*c.kvHeads*c.hd, 1)
			at := func(z, scores, pattern backend.Tensor) *backend.Attention {
				return &backend.Attention{Q: q, K: k, V: v, Z: z, Scores: scores, Pattern: pattern, T: c.t, Pos0: c.pos0,
					Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.hd, Scale: float32(1/math.Sqrt(float64(c.hd))) * 3,
					Window: c.window, Softcap: c.softcap}
			}
			alloc := func(n int) backend.Tensor {
				x, err := st.Alloc("y", n)
				require.NoError(t, err)
				return x
			}
			fused := at(alloc(c.t*c.heads*c.hd), nil, nil)
			st.FlashAttention(fused)
			mat := at(alloc(c.t*c.heads*c.hd), alloc(c.heads*c.t*keys), alloc(c.heads*c.t*keys))
			st.AttnScores(mat)
			st.Softmax(mat.Pattern, mat.Scores, c.heads*c.t, keys)
			st.AttnMix(mat)
			require.NoError(t, st.Sync())
			z := data(fused.Z)
			enginetest.RequireBits(t, z, data(mat.Z), "fused and materialised Z")
			captured := at(alloc(c.t*c.heads*c.hd), alloc(c.heads*c.t*keys), alloc(c.heads*c.t*keys))
			for _, x := range []backend.Tensor{captured.Scores, captured.Pattern} {
				fill(data(x), float32(math.NaN()))
			}
			require.True(t, st.(backend.AttentionCapture).FlashAttentionCapture(captured))
			require.NoError(t, st.Sync())
			enginetest.RequireBits(t, z, data(captured.Z), "fused Z with and without capture")
			enginetest.RequireBits(t, data(mat.Scores), data(captured.Scores), "captured scores")
			enginetest.RequireBits(t, data(mat.Pattern), data(captured.Pattern), "captured pattern")

			// float64, plainly.
			want := make([]float64, len(z))
			largest := 0.0
			group := c.heads / c.kvHeads
			for i := range c.t {
				p := c.pos0 + i
				for h := range c.heads {
					kvh := h / group
					w := make([]float64, keys)
					m := math.Inf(-1)
					for j := range keys {
						w[j] = math.Inf(-1)
						if j > p || (c.window > 0 && p-j >= c.window) {
							continue
						}
						var s float64
						for d := range c.hd {
							s += float64(qs[(i*c.heads+h)*c.hd+d]) * float64(ks[(j*c.kvHeads+kvh)*c.hd+d])
						}
						s *= float64(fused.Scale)
						if c.softcap != 0 {
							s = float64(c.softcap) * math.Tanh(s/float64(c.softcap))
						}
						w[j] = s
						m = max(m, s)
					}
					var sum float64
					for j := range w {
						w[j] = math.Exp(w[j] - m)
						sum += w[j]
					}
					for d := range c.hd {
						var o float64
						for j := range w {
							o += w[j] / sum * float64(vs[(j*c.kvHeads+kvh)*c.hd+d])
						}
						want[(i*c.heads+h)*c.hd+d] = o
						largest = max(largest, math.Abs(o))
					}
				}
			}
			for i, g := range z {
				require.InDelta(t, want[i], float64(g), 1e-4*largest, "element %d", i)
			}

			// Each query alone, over the same cache.
			for i := range c.t {
				qi, _ := tensor(c.heads*c.hd, 0)
				st.Copy(qi, 0, q, i*c.heads*c.hd, c.heads*c.hd)
				one := at(alloc(c.heads*c.hd), alloc(c.heads*(c.pos0+i+1)), alloc(c.heads*(c.pos0+i+1)))
				one.Q, one.T, one.Pos0 = qi, 1, c.pos0+i
				st.FlashAttention(one)
				st.AttnScores(one)
				st.Softmax(one.Pattern, one.Scores, c.heads, c.pos0+i+1)
				require.NoError(t, st.Sync())
				enginetest.RequireBits(t, z[i*c.heads*c.hd:(i+1)*c.heads*c.hd], data(one.Z), "query %d alone", i)
				for h := range c.heads {
					n := c.pos0 + i + 1
					row := (h*c.t + i) * keys
					enginetest.RequireBits(t, data(mat.Scores)[row:row+n], data(one.Scores)[h*n:(h+1)*n], "query %d head %d scores alone", i, h)
					enginetest.RequireBits(t, data(mat.Pattern)[row:row+n], data(one.Pattern)[h*n:(h+1)*n], "query %d head %d pattern alone", i, h)
				}
			}
		})
	}
}

// Issue 47.4: each thread's block rows grew block by block as the keys a
// block sees grew, leaving at T=16,000 about 580 MB of garbage a thread,
// which the collector's headroom let stand: the prefill's peak was twice
// its estimate. Attention now allocates at most what engine.EstimateMemory
// counts for it (each thread's attnRows rows of every key, and the packed
// values), and a second call of the same shape next to nothing.
func TestAttentionAllocatesWhatTheEstimateCounts(t *testing.T) {
	const T, heads, hd = 2048, 2, 32
	b := New(2)
	st := b.NewStream()
	alloc := func(n int) backend.Tensor {
		x, err := st.Alloc("x", n)
		require.NoError(t, err)
		fill(data(x), 0.01)
		return x
	}
	a := &backend.Attention{Q: alloc(T * heads * hd), K: alloc(T * hd), V: alloc(T * hd), Z: alloc(T * heads * hd),
		T: T, Heads: heads, KVHeads: 1, HeadDim: hd, Scale: 0.1}
	allocated := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		st.FlashAttention(a)
		require.NoError(t, st.Sync())
		runtime.ReadMemStats(&ms)
		return ms.TotalAlloc - before
	}
	counted := uint64(4 * (b.threads*attnRows*T + packedDims(hd)*T))
	slack := uint64(64 << 10) // the list of blocks, goroutines
	first := allocated()
	require.LessOrEqual(t, first, counted+slack, "bytes allocated by the first call")
	require.LessOrEqual(t, allocated(), slack, "bytes allocated by a second call of the same shape")
}
