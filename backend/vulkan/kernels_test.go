package vulkan_test

import (
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model"
)

// Tolerances, relative to the largest reference value. Both backends
// compute in float32; they differ only in summation order (dot products
// of at most a few hundred terms: ~1e-6) and in the GPU's exp, which
// Vulkan lets be off by 3 + 2|x| ulp (~1e-5 for the |x| < 30 of softmax).
const (
	tolSum = 1e-5
	tolExp = 3e-5
)

// weightTypes is every type the CPU backend runs: each must run here too.
var weightTypes = quant.Supported()

// blockOf is the block size of a type, so shapes can be chosen to fit it.
func blockOf(typ gguf.Type) int {
	info, _ := typ.Info()
	return info.BlockSize
}

func TestMatMulEveryFormat(t *testing.T) {
	// 70 rows take the tiled kernel (cooperative-matrix for the formats that
	// have one, where the device has them, and the portable one); 5 and 1
	// the matrix-vector one, with subgroup sums (each subgroup taking one
	// output and, with factor 3, looping over three) and without.
	if vulkan.Coop(testBackend(t)) {
		portable := vulkan.DefaultTuning()
		portable.Coop = false
		t.Run("rows70/portable", func(t *testing.T) { testMatMul(t, 70, portable) })
	} else {
		t.Log("the device has no cooperative-matrix GEMMs; the portable kernel runs")
	}
	for _, rows := range []int{70, 5, 1} {
		for _, subgroups := range []bool{true, false} {
			if rows > 8 && !subgroups {
				continue
			}
			tu := vulkan.DefaultTuning()
			tu.Subgroups = subgroups
			t.Run(fmt.Sprintf("rows%d/subgroups=%v", rows, subgroups), func(t *testing.T) { testMatMul(t, rows, tu) })
			if rows <= 8 && subgroups && vulkan.Subgroups(testBackend(t)) {
				vulkan.SetRowsFactor(&tu, 3)
				t.Run(fmt.Sprintf("rows%d/subgroups=%v/factor3", rows, subgroups), func(t *testing.T) { testMatMul(t, rows, tu) })
			}
		}
	}
}

func testMatMul(t *testing.T, rows int, tu vulkan.Tuning) {
	for _, typ := range weightTypes {
		t.Run(typ.String(), func(t *testing.T) {
			r := newRig(t, 1)
			vulkan.SetTuning(r.vs, tu)
			// Rows and outputs off the 64-tile grid; for float formats an odd
			// width, so rows straddle words and the K loop has a ragged end.
			cols, n1, n2 := 4*blockOf(typ)+256, 100, 33
			if blockOf(typ) == 1 {
				cols = 173
			}
			x := r.random("x", rows*cols, 1)
			wc1, wv1 := r.matrix("w1", n1, cols, typ)
			wc2, wv2 := r.matrix("w2", n2, cols, typ)
			bias := r.random("bias", n2, 1)
			y1, y2 := r.zeros("y1", rows*n1), r.zeros("y2", rows*n2)
			r.cs.MatMul(x.c, rows, backend.Proj{W: wc1, Dst: y1.c}, backend.Proj{W: wc2, Dst: y2.c, Bias: bias.c})
			r.vs.MatMul(x.v, rows, backend.Proj{W: wv1, Dst: y1.v}, backend.Proj{W: wv2, Dst: y2.v, Bias: bias.v})
			c, v := r.read(y1)
			requireClose(t, v, c, tolSum, "first projection")
			c, v = r.read(y2)
			requireClose(t, v, c, tolSum, "second projection, with bias")
		})
	}
}

func TestEmbedDecodesEveryFormatExactly(t *testing.T) {
	for _, typ := range weightTypes {
		t.Run(typ.String(), func(t *testing.T) {
			r := newRig(t, 2)
			cols := 2 * blockOf(typ)
			if cols == 2 {
				cols = 77
			}
			tc, tv := r.matrix("token_embd", 50, cols, typ)
			ids := []int32{3, 0, 49, 3, 17}
			d := r.zeros("x", len(ids)*cols)
			r.cs.Embed(d.c, tc, ids)
			r.vs.Embed(d.v, tv, ids)
			c, v := r.read(d)
			// Decoding is the same float arithmetic on both sides: exact.
			require.Equal(t, c, v)
		})
	}
}

// TestRMSNorm runs the norm with a workgroup per row and with a subgroup
// per row (rows up to 256 wide), on rows of whole vec4s (200, 300, and 100
// in the in-place pass, which takes a third of the width) and not (150,
// 66, 50), and with each subgroup looping over three rows (factor 3).
func TestRMSNorm(t *testing.T) {
	for _, subgroups := range []bool{true, false} {
		for _, dim := range []int{200, 150, 300} {
			for _, factor := range []int{1, 3} {
				if factor > 1 && !subgroups {
					continue
				}
				t.Run(fmt.Sprintf("subgroups=%v/dim%d/factor%d", subgroups, dim, factor), func(t *testing.T) {
					if subgroups && !vulkan.Subgroups(testBackend(t)) {
						t.Skip("the device has no subgroup arithmetic")
					}
					r := newRig(t, 3)
					tu := vulkan.Tune(r.vs)
					tu.Subgroups = subgroups
					vulkan.SetRowsFactor(tu, factor)
					want := "rmsnorm"
					if subgroups && dim <= 256 {
						want = "rmsnorm_sg"
					}
					kernel, _ := vulkan.NormKernel(r.vs, dim)
					require.Equal(t, want, kernel)
					testRMSNorm(t, r, dim)
				})
			}
		}
	}
}

func testRMSNorm(t *testing.T, r *rig, dim int) {
	rows := 37
	x, g := r.random("x", rows*dim, 2), r.random("gain", dim, 1)
	d, sc := r.zeros("y", rows*dim), r.zeros("scale", rows)
	r.cs.RMSNorm(d.c, x.c, g.c, sc.c, rows, dim, 1e-5)
	r.vs.RMSNorm(d.v, x.v, g.v, sc.v, rows, dim, 1e-5)
	c, v := r.read(d)
	requireClose(t, v, c, tolSum, "out of place")
	c, v = r.read(sc)
	requireClose(t, v, c, tolSum, "scales")
	// Applied again from the scales, as when hook_scale is hooked.
	r.cs.NormApply(d.c, x.c, sc.c, g.c, nil, rows, dim, false)
	r.vs.NormApply(d.v, x.v, sc.v, g.v, nil, rows, dim, false)
	c, v = r.read(d)
	requireClose(t, v, c, tolSum, "applied from scales")
	// In place, over heads, as the Q/K norm runs.
	r.cs.RMSNorm(x.c, x.c, g.c, nil, rows*3, dim/3, 1e-6)
	r.vs.RMSNorm(x.v, x.v, g.v, nil, rows*3, dim/3, 1e-6)
	c, v = r.read(x)
	requireClose(t, v, c, tolSum, "in place")
}

func TestRopeBothModesAndScalings(t *testing.T) {
	cases := []model.Rope{
		{Mode: model.RopeAdjacent, Dim: 64, Theta: 10000},
		{Mode: model.RopeNeoX, Dim: 32, Theta: 1e6},
		{Mode: model.RopeNeoX, Dim: 48, Theta: 1e6, Scaling: model.RopeScaling{Type: "linear", Factor: 4}},
		{Mode: model.RopeAdjacent, Dim: 64, Theta: 1e4, Scaling: model.RopeScaling{Type: "yarn", Factor: 4, OrigContext: 4096, BetaFast: 32, BetaSlow: 1, ExtFactor: 1, AttnFactor: 1}},
		{Mode: model.RopeAdjacent, Dim: 64, Theta: 5e5, FreqFactors: model.Llama3FreqFactors(64, 5e5, 8, 1, 4, 8192)},
	}
	for i, rope := range cases {
		t.Run(fmt.Sprintf("%s/%s/%d", rope.Mode, rope.Scaling.Type, len(rope.FreqFactors)), func(t *testing.T) {
			r := newRig(t, 4)
			rows, heads, hd := 21, 3, 64
			x := r.random("x", rows*heads*hd, 1)
			into := r.random("into", rows*heads*hd, 1)
			pos0 := 7 * i
			// Out of place first (dims past the rotary ones must be copied
			// over what dst held), then in place.
			r.cs.Rope(into.c, x.c, rows, heads, hd, pos0, &rope)
			r.vs.Rope(into.v, x.v, rows, heads, hd, pos0, &rope)
			r.cs.Rope(x.c, x.c, rows, heads, hd, pos0, &rope)
			r.vs.Rope(x.v, x.v, rows, heads, hd, pos0, &rope)
			c, v := r.read(x)
			// Same host table; the GPU may fuse the multiply-add: ~1 ulp.
			requireClose(t, v, c, 1e-6, "rotated")
			ci, vi := r.read(into)
			requireClose(t, vi, ci, 1e-6, "rotated into another tensor")
			require.Equal(t, v, vi, "in place and out of place")
		})
	}
}

// attention builds the same random attention problem on both backends.
func attention(r *rig, T, pos0, heads, kvHeads, hd, window int, softcap float32) (c, v *backend.Attention, z, scores, pattern twin) {
	keys := pos0 + T
	q := r.random("q", T*heads*hd, 1)
	k := r.random("k", (keys+5)*kvHeads*hd, 1) // a cache longer than the keys in use
	vv := r.random("v", (keys+5)*kvHeads*hd, 1)
	z = r.zeros("z", T*heads*hd)
	scores = r.zeros("scores", heads*T*keys)
	pattern = r.zeros("pattern", heads*T*keys)
	mk := func(pick func(twin) backend.Tensor) *backend.Attention {
		return &backend.Attention{Q: pick(q), K: pick(k), V: pick(vv), Z: pick(z), Scores: pick(scores), Pattern: pick(pattern),
			T: T, Pos0: pos0, Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd))),
			Window: window, Softcap: softcap}
	}
	return mk(func(x twin) backend.Tensor { return x.c }), mk(func(x twin) backend.Tensor { return x.v }), z, scores, pattern
}

func TestAttentionMaterialisedAndFlash(t *testing.T) {
	cases := []struct {
		T, pos0, heads, kvHeads, hd, window int
		softcap                             float32
	}{
		{T: 12, pos0: 0, heads: 4, kvHeads: 2, hd: 64},
		{T: 70, pos0: 0, heads: 8, kvHeads: 4, hd: 32},  // several tiles of queries and keys
		{T: 5, pos0: 66, heads: 2, kvHeads: 1, hd: 128}, // a continued prefill over a longer cache
		{T: 1, pos0: 9, heads: 3, kvHeads: 3, hd: 40},   // one decode step, a dim off every tile
		{T: 9, pos0: 2, heads: 2, kvHeads: 1, hd: 6},    // rows off whole vec4s: keys and dims
		// Gemma's sliding windows: rows whose window starts past whole key
		// blocks (skipped, or wholly masked for some rows of a workgroup),
		// and capped scores.
		{T: 150, pos0: 0, heads: 4, kvHeads: 2, hd: 64, window: 20, softcap: 0.5},
		{T: 70, pos0: 40, heads: 2, kvHeads: 1, hd: 128, window: 70},
		{T: 33, pos0: 0, heads: 4, kvHeads: 4, hd: 32, window: 1},
		{T: 128, pos0: 0, heads: 4, kvHeads: 2, hd: 64, window: 40}, // whole blocks skipped, keys a multiple of 4
		{T: 1, pos0: 0, heads: 2, kvHeads: 1, hd: 64},               // a single key
		{T: 300, pos0: 0, heads: 16, kvHeads: 8, hd: 128},           // bonsai's heads, many key blocks
	}
	// flash_coop.comp's routes of K and V and its workgroups of 64 and 128
	// rows (one where the device has no cooperative matrices: they are the
	// same there).
	routes := []struct {
		name   string
		halves bool
		rows   int
	}{{"kv-f32", false, 64}, {"kv16", true, 64}, {"kv16-128rows-apart", true, 128}}
	if !vulkan.Coop(testBackend(t)) {
		routes = routes[:1]
	}
	for _, tc := range cases {
		for _, kv := range routes {
			t.Run(fmt.Sprintf("T%d_pos%d_h%d_kv%d_d%d_w%d_cap%g/%s", tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap, kv.name), func(t *testing.T) {
				r := newRig(t, 5)
				tu := vulkan.Tune(r.vs)
				vulkan.FlashHalfKV(tu, kv.halves)
				vulkan.FlashCoopRows(tu, kv.rows, true)
				ac, av, z, scores, pattern := attention(r, tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap)
				keys := tc.pos0 + tc.T
				r.cs.AttnScores(ac)
				r.vs.AttnScores(av)
				c, v := r.read(scores)
				requireClose(t, v, c, tolSum, "scores (with the -inf mask)")
				r.cs.Softmax(pattern.c, scores.c, tc.heads*tc.T, keys)
				r.vs.Softmax(pattern.v, scores.v, tc.heads*tc.T, keys)
				c, v = r.read(pattern)
				requireClose(t, v, c, tolExp, "pattern")
				require.Equal(t, slices.Index(c, 0), slices.Index(v, 0), "masked entries are exactly 0")

				// The causal softmax of a capture reads each query's keys only,
				// and writes the zeros around them unless they are held.
				r.vs.Edit(pattern.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: pattern.v.Len(), Scalar: 7})
				vulkan.CausalSoftmax(r.vs, av, false)
				_, cv := r.read(pattern)
				requireClose(t, cv, c, tolExp, "causal pattern")
				require.Equal(t, slices.Index(c, 0), slices.Index(cv, 0), "masked entries are exactly 0")
				// The same through shared-memory reductions, where the device
				// would take subgroup ones.
				tu.Subgroups = false
				vulkan.CausalSoftmax(r.vs, av, false)
				tu.Subgroups = true
				_, pv := r.read(pattern)
				requireClose(t, pv, c, tolExp, "causal pattern, shared-memory reductions")
				r.vs.Edit(pattern.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: pattern.v.Len(), Scalar: 7})
				vulkan.CausalSoftmax(r.vs, av, true)
				_, hv := r.read(pattern)
				for i := range c {
					if c[i] == 0 {
						require.Equal(t, float32(7), hv[i], "a held mask is not written: entry %d", i)
					} else {
						require.Equal(t, cv[i], hv[i], "entry %d", i)
					}
				}
				vulkan.CausalSoftmax(r.vs, av, false) // the zeros back, for the mix
				r.cs.AttnMix(ac)
				r.vs.AttnMix(av)
				zc, zv := r.read(z)
				requireClose(t, zv, zc, tolExp, "z from the pattern")

				r.vs.Edit(z.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: z.v.Len(), Scalar: 7})
				r.vs.FlashAttention(av)
				_, zf := r.read(z)
				requireClose(t, zf, zc, tolExp, "z from flash attention")

				// The capturing flash attention (flash_coop.comp, where the
				// device has cooperative matrices) writes every entry.
				for _, x := range []twin{z, scores, pattern} {
					r.vs.Edit(x.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: x.v.Len(), Scalar: 7})
				}
				if !r.vs.(backend.AttentionCapture).FlashAttentionCapture(av) {
					require.False(t, vulkan.Coop(testBackend(t)) && tc.hd%16 == 0 && tc.hd <= 128, "cooperative matrices and whole 16-dim tiles, yet no capturing kernel")
					return
				}
				sc, sv := r.read(scores)
				requireClose(t, sv, sc, tolSum, "scores from the capturing flash attention")
				pc, pv := r.read(pattern)
				requireClose(t, pv, pc, tolExp, "pattern from the capturing flash attention")
				require.Equal(t, slices.Index(pc, 0), slices.Index(pv, 0), "masked entries are exactly 0")
				_, zf = r.read(z)
				requireClose(t, zf, zc, tolExp, "z from the capturing flash attention")

				// Again over what it wrote: the masks are held and not written
				// again, and every entry is as before, bit for bit.
				require.True(t, vulkan.MasksHeld(scores.v, av, false) && vulkan.MasksHeld(pattern.v, av, true))
				require.True(t, r.vs.(backend.AttentionCapture).FlashAttentionCapture(av))
				_, sv2 := r.read(scores)
				_, pv2 := r.read(pattern)
				enginetest.RequireBits(t, sv, sv2, "scores over held masks")
				enginetest.RequireBits(t, pv, pv2, "pattern over held masks")
				// Held masks are skipped: taken as held over 7s, the 7s stay.
				for _, x := range []twin{scores, pattern} {
					r.vs.Edit(x.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: x.v.Len(), Scalar: 7})
				}
				vulkan.MarkMasks(scores.v, av, false)
				vulkan.MarkMasks(pattern.v, av, true)
				require.True(t, r.vs.(backend.AttentionCapture).FlashAttentionCapture(av))
				_, sv3 := r.read(scores)
				_, pv3 := r.read(pattern)
				sevens := 0
				for i := range pc {
					if pc[i] == 0 {
						require.Equal(t, float32(7), pv3[i], "pattern entry %d", i)
						// The kernel writes the masked scores of the key blocks
						// it takes, and skips the rest.
						require.True(t, sv3[i] == 7 || math.IsInf(float64(sv3[i]), -1), "scores entry %d: %v", i, sv3[i])
						if sv3[i] == 7 {
							sevens++
						}
					} else {
						require.Equal(t, pv[i], pv3[i], "pattern entry %d", i)
						require.Equal(t, sv[i], sv3[i], "scores entry %d", i)
					}
				}
				if tc.T >= 100 { // workgroups of queries that take only some key blocks
					require.Positive(t, sevens, "held masked scores are not written")
				}
			})
		}
	}
}

func TestSoftmaxOfLongRows(t *testing.T) {
	// Rows longer and shorter than the workgroup, reduced with subgroup
	// operations (where the device has them) and through shared memory.
	for _, subgroups := range []bool{true, false} {
		for _, n := range []int{5000, 37} {
			t.Run(fmt.Sprintf("n=%d/subgroups=%v", n, subgroups), func(t *testing.T) {
				if subgroups && !vulkan.Subgroups(testBackend(t)) {
					t.Skip("the device has no subgroup arithmetic")
				}
				r := newRig(t, 6)
				vulkan.Tune(r.vs).Subgroups = subgroups
				rows := 3
				x := r.random("x", rows*n, 4)
				d := r.zeros("p", rows*n)
				r.cs.Softmax(d.c, x.c, rows, n)
				r.vs.Softmax(d.v, x.v, rows, n)
				c, v := r.read(d)
				requireClose(t, v, c, tolExp, "softmax")
			})
		}
	}
}

// LayerNorm rows with a mean far from zero: a one-pass variance
// (E[x^2] - E[x]^2) would lose it to cancellation in float32.
func TestLayerNorm(t *testing.T) {
	r := newRig(t, 12)
	rows, dim := 5, 768
	xs := r.values(rows*dim, 1)
	for i := range xs {
		xs[i] += 300
	}
	x, g, b := r.tensor("x", xs), r.random("g", dim, 1), r.random("b", dim, 1)
	d, sc := r.zeros("d", rows*dim), r.zeros("scale", rows)
	r.cs.LayerNorm(d.c, x.c, g.c, b.c, sc.c, rows, dim, 1e-5)
	r.vs.LayerNorm(d.v, x.v, g.v, b.v, sc.v, rows, dim, 1e-5)
	c, v := r.read(d)
	// The mean of values near 300 carries float32's 2e-5 absolute
	// rounding into deviations of about 1: 1e-4 relative.
	requireClose(t, v, c, 1e-4, "layernorm")
	c, v = r.read(sc)
	requireClose(t, v, c, 1e-4, "layernorm scales")
	r.cs.NormApply(d.c, x.c, sc.c, g.c, b.c, rows, dim, true)
	r.vs.NormApply(d.v, x.v, sc.v, g.v, b.v, rows, dim, true)
	c, v = r.read(d)
	requireClose(t, v, c, 1e-4, "layernorm applied from scales")
	r.cs.LayerNorm(x.c, x.c, g.c, b.c, nil, rows, dim, 1e-5)
	r.vs.LayerNorm(x.v, x.v, g.v, b.v, nil, rows, dim, 1e-5)
	c, v = r.read(x)
	requireClose(t, v, c, 1e-4, "layernorm in place")
}

// GELU over ordinary values and over magnitudes where tanh's exponentials
// overflow float32.
func TestGELU(t *testing.T) {
	r := newRig(t, 13)
	xs := append(r.values(3000, 3), -1e4, -100, -30, -10, 0, 10, 30, 100, 1e4)
	x, d := r.tensor("x", xs), r.zeros("d", len(xs))
	r.cs.GELU(d.c, x.c, len(xs))
	r.vs.GELU(d.v, x.v, len(xs))
	c, v := r.read(d)
	requireClose(t, v, c, tolExp, "gelu")
	for i, y := range v[3000:] {
		x := xs[3000+i]
		require.False(t, math.IsNaN(float64(y)), "gelu(%g) is NaN", x)
		switch {
		case x >= 10: // the gate is 1 to float32's precision
			require.Equal(t, x, y, "gelu(%g)", x)
		case x <= -30: // and 0 here: at most 1e-10 of x leaks through
			require.InDelta(t, 0, y, 1e-10, "gelu(%g)", x)
		}
	}
}

// GeGLU in place, and Softcap over values far past the cap (where tanh's
// exponentials overflow) and near zero.
func TestGeGLUAndSoftcap(t *testing.T) {
	r := newRig(t, 14)
	n := 3000
	g, up := r.random("gate", n, 3), r.random("up", n, 1)
	r.cs.GeGLU(g.c, g.c, up.c, n)
	r.vs.GeGLU(g.v, g.v, up.v, n)
	c, v := r.read(g)
	requireClose(t, v, c, tolExp, "geglu in place")

	xs := append(r.values(n, 40), 1e30, -1e30, 1e-30, 0, 300, -300)
	x := r.tensor("x", xs)
	r.cs.Softcap(x.c, len(xs), 30)
	r.vs.Softcap(x.v, len(xs), 30)
	c, v = r.read(x)
	requireClose(t, v, c, tolExp, "softcap")
	require.Equal(t, []float32{30, -30}, v[n:n+2], "capped at ±30")
	require.InDelta(t, 1e-30, v[n+2], 1e-36, "the identity near 0")
	for _, y := range v {
		require.False(t, math.IsNaN(float64(y)))
	}
}

func TestElementwise(t *testing.T) {
	r := newRig(t, 7)
	n := 3000
	a, b, up := r.random("a", n, 1), r.random("b", n, 1), r.random("up", n, 1)
	r.cs.Add(a.c, a.c, b.c, n-1)
	r.vs.Add(a.v, a.v, b.v, n-1)
	c, v := r.read(a)
	require.Equal(t, c, v, "add is exact")
	r.cs.Add(up.c, a.c, b.c, n)
	r.vs.Add(up.v, a.v, b.v, n)
	c, v = r.read(up)
	require.Equal(t, c, v, "add into a third tensor")
	r.cs.SwiGLU(b.c, b.c, up.c, n)
	r.vs.SwiGLU(b.v, b.v, up.v, n)
	c, v = r.read(b)
	requireClose(t, v, c, tolExp, "swiglu in place")
	r.cs.Copy(up.c, 10, a.c, 100, 500)
	r.vs.Copy(up.v, 10, a.v, 100, 500)
	c, v = r.read(up)
	require.Equal(t, c, v, "copy is exact")
}

func TestEditEveryOp(t *testing.T) {
	r := newRig(t, 8)
	rows, cols := 12, 96
	src := r.random("src", 2*cols, 1)
	edits := []backend.Edit{
		{Op: backend.EditFill, Off: 32, Rows: rows, Cols: 32, Stride: cols, Scalar: 0},
		{Op: backend.EditScale, Off: 0, Rows: 1, Cols: rows * cols, Scalar: -1.5},
		{Op: backend.EditSet, Off: 5 * cols, Rows: 1, Cols: cols, Src: nil, SrcOff: cols},
		{Op: backend.EditAdd, Off: 0, Rows: rows, Cols: cols, Stride: cols, Scalar: 0.25},
		{Op: backend.EditMean, Off: 64, Rows: rows, Cols: 32, Stride: cols},
	}
	for _, e := range edits {
		x := r.random("x", rows*cols, 1)
		ec, ev := e, e
		if e.Op == backend.EditSet || e.Op == backend.EditAdd {
			ec.Src, ev.Src = src.c, src.v
		}
		r.cs.Edit(x.c, ec)
		r.vs.Edit(x.v, ev)
		c, v := r.read(x)
		// The GPU may fuse x + s*src into one rounding, and sums the mean
		// in compensated float32 where the CPU uses float64: 1 ulp either way.
		requireClose(t, v, c, 1e-6, fmt.Sprintf("edit op %d", e.Op))
	}
}

func TestArgmaxTakesFirstOfTies(t *testing.T) {
	r := newRig(t, 9)
	rows, n := 6, 1000
	vals := r.values(rows*n, 1)
	vals[2*n+10], vals[2*n+500] = 9, 9 // a tie: the first wins
	negInf, nan := float32(math.Inf(-1)), float32(math.NaN())
	for i := range n {
		vals[3*n+i] = negInf // all -inf: index 0, as the CPU backend says
	}
	vals[4*n+700] = nan // one NaN among numbers: no largest
	vals[4*n+3] = 50
	for i := range n {
		vals[5*n+i] = nan
	}
	x, d := r.tensor("logits", vals), r.zeros("ids", rows)
	r.cs.Argmax(d.c, x.c, rows, n)
	r.vs.Argmax(d.v, x.v, rows, n)
	c, v := r.read(d)
	require.Equal(t, c, v)
	require.Equal(t, float32(10), v[2])
	require.Equal(t, float32(0), v[3])
	require.Equal(t, []float32{-1, -1}, v[4:6], "rows holding a NaN")
}

func TestStreamErrorsNameTheProblem(t *testing.T) {
	b := testBackend(t)
	s := b.NewStream()
	x, err := s.Alloc("x", 10)
	require.NoError(t, err)
	s.Copy(x, 5, x, 0, 8)
	require.ErrorContains(t, s.Sync(), "copy of 8 elements from x at 0 (of 10) to x at 5 (of 10) is out of range")

	s = b.NewStream()
	x, err = s.Alloc("x", 10)
	require.NoError(t, err)
	s.Add(x, x, x, 11)
	require.ErrorContains(t, s.Sync(), "add needs 11 elements of x, which has 10")
	require.NoError(t, s.Sync(), "Sync hands the error over once: it was the last request's")

	s = b.NewStream()
	x, err = s.Alloc("x", 10)
	require.NoError(t, err)
	require.ErrorContains(t, s.Read(x, 8, make([]float32, 3)), "read of 3 elements at 8 from x of 10")
	s.Free(x)
	s.Add(x, x, x, 1)
	require.ErrorContains(t, s.Sync(), "tensor x is used after Free")

	_, err = s.Alloc("huge", 1<<40)
	require.ErrorContains(t, err, "huge needs")

	w := &model.Weight{Name: "blk.0.attn_q.weight", Rows: 2, Cols: 256, Data: make([]byte, 1000)}
	w.Format = &quant.Format{Type: gguf.Q5_0} // one the file layer knows and no backend runs
	_, err = b.Upload(w)
	require.ErrorContains(t, err, "tensor blk.0.attn_q.weight has type Q5_0, which has no Vulkan shader")
	w.Format, w.Data = mustFormat(t, gguf.Q8_0), make([]byte, 500)
	_, err = b.Upload(w)
	require.ErrorContains(t, err, "tensor blk.0.attn_q.weight: 2 x 256 Q8_0 needs 544 bytes, the file has 500")
}

func mustFormat(t *testing.T, typ gguf.Type) *quant.Format {
	f, err := quant.For(typ)
	require.NoError(t, err)
	return f
}

// TestLargeWrites stages writes bigger than a staging buffer, and more in
// one submission than the staging bound, which submits early.
func TestLargeWrites(t *testing.T) {
	b := testBackend(t)
	s := b.NewStream()
	vulkan.Tune(s).StagingBytes = 12 << 20
	r := newRig(t, 10)
	var want [][]float32
	var ts []backend.Tensor
	for i := range 4 {
		data := r.values(5<<20/4+i, 1) // 5 MiB and a little more each: over a 4 MiB staging buffer
		x, err := s.Alloc("big", len(data))
		require.NoError(t, err)
		s.Write(x, 0, data)
		want, ts = append(want, data), append(ts, x)
	}
	for i, x := range ts {
		got := make([]float32, x.Len())
		require.NoError(t, s.Read(x, 0, got))
		require.Equal(t, want[i], got)
	}
}

// Upload reads weights from the model file's mapping: a file truncated
// underneath it is an error, not a crash.
func TestUploadOfTruncatedFileIsAnError(t *testing.T) {
	b := testBackend(t)
	path, m := enginetest.MappedModel(t)
	require.NoError(t, os.Truncate(path, 4096))
	_, err := b.Upload(m.Blocks[1].Down)
	require.ErrorContains(t, err, "vulkan: memory fault reading blk.1.ffn_down.weight")
}

func TestRankCountsLargerEntries(t *testing.T) {
	r := newRig(t, 10)
	rows, n, col := 5, 3000, 1234
	vals := r.values(rows*n, 1)
	vals[2*n+col] = 100             // the largest: rank 0
	vals[3*n+col] = vals[3*n+col+1] // a tie is not larger
	x, d := r.tensor("logits", vals), r.zeros("ranks", rows)
	r.cs.Rank(d.c, x.c, rows, n, col)
	r.vs.Rank(d.v, x.v, rows, n, col)
	c, v := r.read(d)
	for row := range rows {
		want := 0
		for _, y := range vals[row*n : (row+1)*n] {
			if y > vals[row*n+col] {
				want++
			}
		}
		require.Equal(t, float32(want), v[row], "rank in row %d", row)
	}
	require.Equal(t, c, v)
	require.Zero(t, v[2])
}

func TestRowNormsOfRowsWiderThanAWorkgroup(t *testing.T) {
	r := newRig(t, 11)
	rows, n, off := 6, 2500, 37
	vals := r.values(off+rows*n+5, 3)
	x, d := r.tensor("resid", vals), r.zeros("norms", rows)
	r.cs.RowNorms(d.c, x.c, off, rows, n)
	r.vs.RowNorms(d.v, x.v, off, rows, n)
	c, v := r.read(d)
	want := make([]float32, rows)
	for row := range want {
		sum := 0.0
		for _, y := range vals[off+row*n : off+(row+1)*n] {
			sum += float64(y) * float64(y)
		}
		want[row] = float32(math.Sqrt(sum))
	}
	// A float32 tree sum of 2,500 squares: a few ulps of the norm.
	requireClose(t, v, want, 1e-6, "norms on the GPU")
	requireClose(t, c, want, 1e-7, "norms on the CPU")
}

// PrecisionFast rounds both inputs of each product to float16. Against a
// float64 product of the unrounded inputs, each term may then be off by two
// float16 roundings (2^-11 each to nearest, 2^-10 toward zero: the rounding
// mode of packHalf2x16 is the driver's), so each output stays within
// 2^-9 * sum |x_k w_k|, plus float32 accumulation. It must also differ from
// the exact product, or the precision did nothing.
func TestMatMulFastPrecisionIsFloat16Inputs(t *testing.T) {
	paths := []bool{false}
	if vulkan.Coop(testBackend(t)) {
		paths = append(paths, true)
	}
	for _, coop := range paths {
		for _, typ := range []gguf.Type{gguf.F32, gguf.Q8_0, gguf.Q4_K, gguf.Q1_0_G128} {
			t.Run(fmt.Sprintf("coop=%v/%v", coop, typ), func(t *testing.T) {
				r := newRig(t, 12)
				vulkan.Tune(r.vs).Coop = coop
				// 200 rows: the rows after the first tile (64 or 128 rows) keep
				// float16 products.
				rows, cols, n := 200, 512, 100
				xs := r.values(rows*cols, 1)
				xs[5] = 1e6 // out of float16's range: its tile is recomputed in float32
				x := r.tensor("x", xs)
				w := quantized(t, r, "w", n, cols, typ)
				wv, err := testBackend(t).Upload(w)
				require.NoError(t, err)
				ws := make([]float32, n*cols)
				w.Format.Dequantize(ws, w.Data)
				y := r.zeros("y", rows*n)
				read := func(p backend.Precision) []float32 {
					r.vs.SetPrecision(p)
					r.vs.MatMul(x.v, rows, backend.Proj{W: wv, Dst: y.v})
					out := make([]float32, rows*n)
					require.NoError(t, r.vs.Read(y.v, 0, out))
					return out
				}
				fast, exact := read(backend.PrecisionFast), read(backend.PrecisionExact)
				moved := 0.0
				for m := range rows {
					for j := range n {
						want, mag := 0.0, 0.0
						for k := range cols {
							p := float64(xs[m*cols+k]) * float64(ws[j*cols+k])
							want += p
							mag += math.Abs(p)
						}
						got := float64(fast[m*n+j])
						require.InDelta(t, want, got, mag*(math.Pow(2, -9)+1e-5), "y[%d][%d]", m, j)
						moved = max(moved, math.Abs(got-float64(exact[m*n+j]))/(mag+1e-30))
					}
				}
				require.Greater(t, moved, 1e-5, "fast products differ from exact ones by float16 rounding")
			})
		}
	}
}

// Copies between device tensors run copy.comp: 16 bytes at a time where
// the length and both offsets allow, else a float at a time; each must move
// exactly its range, within one tensor too.
func TestCopyMovesExactlyItsRange(t *testing.T) {
	r := newRig(t, 21)
	src := r.random("src", 50_003, 1)
	for _, c := range []struct{ dstOff, srcOff, n int }{
		{0, 0, 50_000}, {4, 8, 40_000}, {3, 5, 1_001}, {1, 4, 4_096}, {7, 0, 1}, {0, 49_999, 4},
	} {
		dst := r.random("dst", 50_011, 1)
		r.cs.Copy(dst.c, c.dstOff, src.c, c.srcOff, c.n)
		r.vs.Copy(dst.v, c.dstOff, src.v, c.srcOff, c.n)
		want, got := r.read(dst)
		require.Equal(t, want, got, "copy of %d from %d to %d", c.n, c.srcOff, c.dstOff)
	}
	// Within one tensor, the ranges apart.
	r.cs.Copy(src.c, 30_000, src.c, 2, 12_345)
	r.vs.Copy(src.v, 30_000, src.v, 2, 12_345)
	want, got := r.read(src)
	require.Equal(t, want, got, "a copy within a tensor")
}

// A view is a range of its tensor that kernels bind from element 0: what
// kernels, copies and writes put in a view lands in that range and nowhere
// else, and reads of a view see only it.
func TestViewsAreRangesOfTheirTensor(t *testing.T) {
	r := newRig(t, 22)
	const n, width = 3 * backend.SlotAlign * 50, 100
	arena := r.random("arena", n, 1)
	x, y := r.random("x", width*5, 1), r.random("y", width*5, 1)
	view := func(tw twin, off, n int) twin {
		c := r.cs.View(tw.c, off, n)
		v := r.vs.View(tw.v, off, n)
		require.NotNil(t, v, "a view at %d", off)
		return twin{c: c, v: v}
	}
	a := view(arena, backend.SlotAlign, width*5)
	b := view(arena, 9*backend.SlotAlign, width*5)
	r.cs.Add(a.c, x.c, y.c, width*5)
	r.vs.Add(a.v, x.v, y.v, width*5)
	r.cs.GELU(b.c, a.c, width*5)
	r.vs.GELU(b.v, a.v, width*5)
	r.cs.Copy(a.c, 7, b.c, 3, 101)
	r.vs.Copy(a.v, 7, b.v, 3, 101)
	r.cs.Write(b.c, 5, []float32{1, 2, 3})
	r.vs.Write(b.v, 5, []float32{1, 2, 3})
	c, v := r.read(arena)
	requireClose(t, v, c, 1e-6, "the arena after kernels wrote two of its ranges") // GELU's tanh: a few ulp
	for i := range n {
		if i < backend.SlotAlign || i >= 9*backend.SlotAlign+width*5 || (i >= backend.SlotAlign+width*5 && i < 9*backend.SlotAlign) {
			require.Equal(t, c[i], v[i], "element %d, outside both views, is as written", i)
		}
	}
	cv, vv := r.read(b)
	require.Equal(t, v[9*backend.SlotAlign:9*backend.SlotAlign+width*5], vv, "a view reads its range")
	require.Equal(t, cv[5:8], vv[5:8])
	got := make([]float32, 10)
	require.NoError(t, r.vs.ReadBatch([]backend.ReadRequest{{Src: b.v, Off: 4, Dst: got}}))
	require.Equal(t, v[9*backend.SlotAlign+4:9*backend.SlotAlign+14], got, "a batched read of a view")

	// Where the device cannot bind a range, there is no view.
	require.Nil(t, r.vs.View(arena.v, 1, 8), "an offset of 4 bytes is off every NVIDIA and lavapipe alignment")
	require.Nil(t, r.vs.View(arena.v, n-4, 8), "past the end")
	r.vs.Free(arena.v)
	r.vs.Add(b.v, x.v, y.v, 4)
	require.ErrorContains(t, r.vs.Sync(), "used after Free of arena")
}

// What is known of a capture's masked entries goes with the range of the
// buffer it was recorded for, and is forgotten as soon as anything writes
// any of that range: a write from the host, a copy, a kernel; writes
// elsewhere in the buffer leave it.
func TestHeldMasksAreForgottenOnAnyWrite(t *testing.T) {
	r := newRig(t, 9)
	_, a, _, _, _ := attention(r, 8, 0, 2, 1, 32, 0, 0)
	n := a.Heads * a.T * a.Keys()
	slot := (n + backend.SlotAlign - 1) / backend.SlotAlign * backend.SlotAlign
	arena, err := r.vs.Alloc("arena", 3*slot)
	require.NoError(t, err)
	views := make([]backend.Tensor, 3)
	for i := range views {
		views[i] = r.vs.View(arena, i*slot, n)
		require.NotNil(t, views[i])
	}
	mark := func() {
		for _, v := range views {
			vulkan.MarkMasks(v, a, false)
		}
	}
	held := func() []bool {
		h := make([]bool, len(views))
		for i, v := range views {
			h[i] = vulkan.MasksHeld(v, a, false)
		}
		return h
	}
	mark()
	require.Equal(t, []bool{true, true, true}, held())
	require.False(t, vulkan.MasksHeld(views[0], a, true), "scores' masks are not a pattern's")
	other := *a
	other.Pos0, other.T = 2, 6 // as many keys, another layout
	require.False(t, vulkan.MasksHeld(views[0], &other, false))
	other = *a
	other.Window = 3
	require.False(t, vulkan.MasksHeld(views[0], &other, false), "another window")
	whole := r.vs.View(arena, 0, slot+n)
	require.NotNil(t, whole)
	require.False(t, vulkan.MasksHeld(whole, a, false), "another range")

	r.vs.Write(views[1], n-1, []float32{1})
	require.Equal(t, []bool{true, false, true}, held(), "a write of the last element")
	mark()
	r.vs.Copy(arena, 2*slot, arena, 0, 1)
	require.Equal(t, []bool{true, true, false}, held(), "a copy into the first element")
	mark()
	r.vs.Edit(views[0], backend.Edit{Op: backend.EditFill, Rows: 1, Cols: 1, Scalar: 7})
	require.Equal(t, []bool{false, true, true}, held(), "a kernel")
	mark()
	r.vs.Edit(arena, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: arena.Len(), Scalar: 7})
	require.Equal(t, []bool{false, false, false}, held(), "a kernel over the whole arena")
	require.NoError(t, r.vs.Sync())
}
