package vulkan_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
)

// TestFlashAttentionShapes checks flash.comp against causal attention in
// float64 over the cases its tiling treats apart: GQA groups of 1 to 8 heads
// (and an odd one, and one wider than a workgroup's 64 rows), query counts
// off the block, continued prefills over several key blocks, and head dims
// of 64, 128 and 256 (vec4 loads) or off a multiple of 4 (scalar loads);
// and sliding windows that skip and wholly mask key blocks, with capped scores.
func TestFlashAttentionShapes(t *testing.T) {
	cases := []struct {
		T, pos0, heads, kvHeads, hd, window int
		softcap                             float32
	}{
		{T: 100, pos0: 0, heads: 4, kvHeads: 4, hd: 64},
		{T: 70, pos0: 0, heads: 8, kvHeads: 4, hd: 128},
		{T: 37, pos0: 50, heads: 8, kvHeads: 2, hd: 256},
		{T: 20, pos0: 100, heads: 16, kvHeads: 2, hd: 128},
		{T: 65, pos0: 0, heads: 2, kvHeads: 2, hd: 256},
		{T: 30, pos0: 0, heads: 6, kvHeads: 2, hd: 40},
		{T: 5, pos0: 3, heads: 80, kvHeads: 1, hd: 38},
		{T: 1, pos0: 130, heads: 4, kvHeads: 2, hd: 41},
		{T: 200, pos0: 0, heads: 4, kvHeads: 2, hd: 256, window: 64, softcap: 2},
		{T: 40, pos0: 100, heads: 8, kvHeads: 1, hd: 128, window: 30},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("T%d_pos%d_h%d_kv%d_d%d_w%d_cap%g", tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap), func(t *testing.T) {
			r := newRig(t, 11)
			_, a, z, _, _ := attention(r, tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap)
			q, k, v := readQKV(t, r, a)
			r.vs.Edit(z.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: z.v.Len(), Scalar: 7})
			r.vs.FlashAttention(a)
			got := make([]float32, z.v.Len())
			require.NoError(t, r.vs.Read(z.v, 0, got))
			requireClose(t, got, attention64(q, k, v, a), tolExp, "z")
		})
	}
}

// cpuTime is the CPU time the process (driver threads included) has used.
func cpuTime(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// attention64 is causal multi-head attention with grouped kv heads, in
// float64, with a's sliding window and score cap when it has them.
func attention64(q, k, v []float32, a *backend.Attention) []float32 {
	hd, group := a.HeadDim, a.Heads/a.KVHeads
	z := make([]float32, a.T*a.Heads*hd)
	w := make([]float64, a.Keys())
	for i := range a.T {
		for h := range a.Heads {
			qr, kvh := q[(i*a.Heads+h)*hd:][:hd], h/group
			maxW, sum := math.Inf(-1), 0.0
			p := a.Pos0 + i
			first := 0
			if a.Window > 0 {
				first = max(0, p-a.Window+1)
			}
			for j := range p + 1 {
				w[j] = math.Inf(-1)
				if j < first {
					continue
				}
				kr := k[(j*a.KVHeads+kvh)*hd:][:hd]
				dot := 0.0
				for d := range hd {
					dot += float64(qr[d]) * float64(kr[d])
				}
				w[j] = dot * float64(a.Scale)
				if a.Softcap != 0 {
					w[j] = float64(a.Softcap) * math.Tanh(w[j]/float64(a.Softcap))
				}
				maxW = math.Max(maxW, w[j])
			}
			for j := range p + 1 {
				w[j] = math.Exp(w[j] - maxW)
				sum += w[j]
			}
			for d := range hd {
				acc := 0.0
				for j := range a.Pos0 + i + 1 {
					acc += w[j] * float64(v[(j*a.KVHeads+kvh)*hd+d])
				}
				z[(i*a.Heads+h)*hd+d] = float32(acc / sum)
			}
		}
	}
	return z
}

func TestFlashAttentionRefusesWideHeads(t *testing.T) {
	r := newRig(t, 12)
	_, a, _, _, _ := attention(r, 2, 0, 1, 1, 260, 0, 0)
	r.vs.FlashAttention(a)
	require.ErrorContains(t, r.vs.Sync(), "flash attention over 260-dim heads needs")
}

// BenchmarkFlashAttention times one causal prefill's attention on the
// device, at the head layouts of the bonsai models (1.7b: 16 heads over 8 kv
// heads; 8b: 32 over 8) and a multi-head one, at a T lavapipe gets through;
// then a continued prefill and a decoding step over a longer cache; and the
// bonsai layouts at T=2048, for the H200. Each at both precisions (fast runs
// flash_coop.comp where the device has cooperative matrices); and, where
// nothing precedes the prompt, the two paths that write the scores and the
// pattern as well: flash attention capturing them ("capture", what a trace
// of them takes) and scores, softmax and mix one after the other
// ("materialise", what a hook on them takes). flash_coop.comp's choices by
// T are also forced each way: workgroups of 64 or 128 rows at fast
// precision, K and V converted to float16 in each workgroup ("kvf32") or
// once before ("kv16").
func BenchmarkFlashAttention(b *testing.B) {
	v := benchBackend(b)
	cases := []struct{ T, pos0, heads, kvHeads, hd int }{
		{T: 256, heads: 16, kvHeads: 8, hd: 128},
		{T: 256, heads: 32, kvHeads: 8, hd: 128},
		{T: 256, heads: 8, kvHeads: 8, hd: 64},
		{T: 128, pos0: 384, heads: 16, kvHeads: 8, hd: 128},
		{T: 1, pos0: 1023, heads: 16, kvHeads: 8, hd: 128},
		{T: 2048, heads: 16, kvHeads: 8, hd: 128},
		{T: 2048, heads: 32, kvHeads: 8, hd: 128},
	}
	for _, c := range cases {
		for _, p := range []struct {
			name string
			backend.Precision
			coopRows int    // -1: flash.comp, cooperative matrices off; 0: by T; -128: 128, K and V staged in turn
			path     string // "": flash attention alone
			kv       string // "": by T
		}{{"flash.comp", backend.PrecisionExact, -1, "", ""}, {"exact", backend.PrecisionExact, 0, "", ""}, {"fast", backend.PrecisionFast, 0, "", ""},
			{"exact-64rows", backend.PrecisionExact, 64, "", ""}, {"exact-128rows", backend.PrecisionExact, 128, "", ""},
			{"fast-64rows", backend.PrecisionFast, 64, "", ""}, {"fast-128rows", backend.PrecisionFast, 128, "", ""}, {"fast-128rows-apart", backend.PrecisionFast, -128, "", ""},
			{"exact-kvf32", backend.PrecisionExact, 0, "", "f32"}, {"exact-kv16", backend.PrecisionExact, 0, "", "16"},
			{"fast-kvf32", backend.PrecisionFast, 0, "", "f32"}, {"fast-kv16", backend.PrecisionFast, 0, "", "16"},
			{"exact-capture", backend.PrecisionExact, 0, "capture", ""}, {"fast-capture", backend.PrecisionFast, 0, "capture", ""},
			{"exact-materialise", backend.PrecisionExact, 0, "materialise", ""}, {"fast-materialise", backend.PrecisionFast, 0, "materialise", ""}} {
			if p.path != "" && c.pos0 != 0 {
				continue
			}
			b.Run(fmt.Sprintf("T%d_pos%d_h%d_kv%d_d%d/%s", c.T, c.pos0, c.heads, c.kvHeads, c.hd, p.name), func(b *testing.B) {
				tu := vulkan.DefaultTuning()
				switch p.coopRows {
				case -1:
					tu.Coop = false
				case 64, 128:
					vulkan.FlashCoopRows(&tu, p.coopRows, false)
				case -128:
					vulkan.FlashCoopRows(&tu, 128, true)
				}
				if p.kv != "" {
					vulkan.FlashHalfKV(&tu, p.kv == "16")
				}
				// Device time per kernel beside the wall time: the paths
				// that write scores are several kernels. (A timestamp after
				// each: ns/op is not quite what it was before 2026-12-03.)
				profiled := v.SetProfiling(true) == nil
				defer v.SetProfiling(false)
				s := v.NewStream()
				vulkan.SetTuning(s, tu)
				s.SetPrecision(p.Precision)
				rng := rand.New(rand.NewPCG(1, 2))
				keys := c.pos0 + c.T
				tensor := func(name string, n int) backend.Tensor {
					x, err := s.Alloc(name, n)
					if err != nil {
						b.Fatal(err)
					}
					data := make([]float32, n)
					for i := range data {
						data[i] = float32(rng.NormFloat64())
					}
					s.Write(x, 0, data)
					return x
				}
				a := &backend.Attention{
					Q: tensor("q", c.T*c.heads*c.hd), K: tensor("k", keys*c.kvHeads*c.hd), V: tensor("v", keys*c.kvHeads*c.hd),
					Z: tensor("z", c.T*c.heads*c.hd), T: c.T, Pos0: c.pos0, Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.hd,
					Scale: float32(1 / math.Sqrt(float64(c.hd))),
				}
				run := func() { s.FlashAttention(a) }
				if p.path != "" {
					a.Scores = tensor("scores", c.heads*c.T*keys)
					a.Pattern = tensor("pattern", c.heads*c.T*keys)
				}
				switch p.path {
				case "capture":
					fc := s.(backend.AttentionCapture)
					if !fc.FlashAttentionCapture(a) {
						b.Skip("flash attention captures on cooperative matrices only")
					}
					run = func() { fc.FlashAttentionCapture(a) }
				case "materialise":
					run = func() {
						s.AttnScores(a)
						s.Softmax(a.Pattern, a.Scores, c.heads*c.T, keys)
						s.AttnMix(a)
					}
				}
				// Pipelines built and the clocks up before the timing: on the
				// H200 without this, the kernels that write scores ran 4-5x
				// slower than in a prefill, flash attention alone did not
				// (memory-bound ones waiting on a lower memory clock, presumably).
				for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
					run()
					if err := s.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				v.StageTimes()
				cpu0 := cpuTime(b)
				b.ResetTimer()
				for range b.N {
					run()
					if err := s.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				// lavapipe runs on the host's cores, which other work may share:
				// the process's CPU time per call is steadier than wall time.
				b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
				if profiled {
					for _, st := range v.StageTimes() {
						b.ReportMetric(st.Time.Seconds()*1e3/float64(b.N), st.Name+"-ms/op")
					}
				}
				// Multiply-adds of Q K^T and P V over the causal triangle.
				visible := float64(c.T) * (float64(c.pos0) + float64(c.T+1)/2)
				b.ReportMetric(4*visible*float64(c.heads*c.hd)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestCoopFlashAttention holds flash_coop.comp (flash attention on
// cooperative matrices) to causal attention in float64: at fast precision
// over its inputs rounded to float16, as the kernel takes them, and at exact
// precision over the inputs as they are; each in workgroups of 64 and 128
// rows (with K and V staged together and in turn), over both routes of K
// and V;
// across the cases its tiling treats apart: GQA groups sharing a workgroup
// (and 16 of them, a whole workgroup's rows in 4 or 8 queries), query counts
// off its rows, continued prefills over several blocks of 32 keys, head dims
// of 32, 64 and 128, sliding windows that skip and wholly mask blocks,
// capped scores, and keys whose scores grow along the cache (ramp: each
// row's maximum keeps jumping, so its output is rescaled block after block).
//
// Tolerance, fast: with its inputs rounded alike, the kernel differs from
// the reference by the float16 rounding of each probability before P V (a
// relative 2^-11, so at most 2^-11 max|V| in an output, the probabilities
// being normalised by the sum of the unrounded ones) and by float32 sums.
// Twice 2^-11 max|V| covers that; an indexing error is of order max|V|.
// Exact: each input is hi + lo halves and each product three (the lo lo one,
// 2^-22 of the rest, left out), so the kernel is held to tolExp, as
// flash.comp is.
func TestCoopFlashAttention(t *testing.T) {
	b := testBackend(t)
	if !vulkan.Coop(b) {
		t.Skip("this device has no cooperative matrices: fast precision runs flash.comp")
	}
	cases := []struct {
		T, pos0, heads, kvHeads, hd, window int
		softcap                             float32
		ramp                                bool
	}{
		{T: 100, pos0: 0, heads: 4, kvHeads: 4, hd: 64},
		{T: 300, pos0: 0, heads: 4, kvHeads: 2, hd: 128, ramp: true},
		{T: 64, pos0: 200, heads: 8, kvHeads: 8, hd: 64, ramp: true},
		{T: 70, pos0: 0, heads: 16, kvHeads: 8, hd: 128},
		{T: 37, pos0: 50, heads: 8, kvHeads: 2, hd: 128},
		{T: 20, pos0: 100, heads: 32, kvHeads: 2, hd: 128},
		{T: 129, pos0: 0, heads: 8, kvHeads: 4, hd: 32},
		{T: 1, pos0: 130, heads: 4, kvHeads: 2, hd: 64},
		{T: 200, pos0: 0, heads: 4, kvHeads: 2, hd: 128, window: 64, softcap: 2},
		{T: 40, pos0: 100, heads: 8, kvHeads: 1, hd: 64, window: 30},
	}
	for _, tc := range cases {
		for _, p := range []struct {
			backend.Precision
			rows  int
			apart bool // K and V staged in turn (128 rows at exact precision on the H200 take it anyway)
		}{{backend.PrecisionFast, 64, false}, {backend.PrecisionFast, 128, false}, {backend.PrecisionFast, 128, true}, {backend.PrecisionExact, 64, false}, {backend.PrecisionExact, 128, true}} {
			for _, kv := range flashKVRoutes {
				t.Run(fmt.Sprintf("T%d_pos%d_h%d_kv%d_d%d_w%d_cap%g_ramp%v/%s_rows%d_apart%v/%s", tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap, tc.ramp, p.Precision, p.rows, p.apart, kv.name), func(t *testing.T) {
					r := newRig(t, 12)
					tu := vulkan.Tune(r.vs)
					vulkan.FlashCoopRows(tu, p.rows, p.apart)
					vulkan.FlashHalfKV(tu, kv.halves)
					_, a, z, _, _ := attention(r, tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap)
					q, k, v := readQKV(t, r, a)
					if tc.ramp {
						row := tc.kvHeads * tc.hd
						for j := range len(k) / row {
							for i := range row {
								k[j*row+i] *= 1 + float32(j)/16
							}
						}
						r.vs.Write(a.K, 0, k)
					}
					r.vs.Edit(z.v, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: z.v.Len(), Scalar: 7})
					r.vs.SetPrecision(p.Precision)
					r.vs.FlashAttention(a)
					got := make([]float32, z.v.Len())
					require.NoError(t, r.vs.Read(z.v, 0, got))
					requireCoopFlash(t, got, q, k, v, a, p.Precision)
				})
			}
		}
	}
}

// requireCoopFlash holds flash_coop.comp's output (got: the first outputs
// of Z, all of them but in one test) to float64 attention with
// TestCoopFlashAttention's tolerances (it rounds q, k and v to float16 at
// fast precision).
func requireCoopFlash(t *testing.T, got, q, k, v []float32, a *backend.Attention, p backend.Precision) {
	t.Helper()
	if p == backend.PrecisionExact {
		requireClose(t, got, attention64(q, k, v, a)[:len(got)], tolExp, "z")
		return
	}
	maxV := 0.0
	for _, x := range [][]float32{q, k, v} {
		for i, f := range x {
			x[i] = float16.Fromfloat32(f).Float32()
		}
	}
	for _, f := range v {
		maxV = math.Max(maxV, math.Abs(float64(f)))
	}
	want := attention64(q, k, v, a)
	worst := 0.0
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	require.LessOrEqual(t, worst, 2*math.Ldexp(1, -11)*maxV, "largest error of an output (max |V| %.3g)", maxV)
}

// TestCoopFlashAttentionLongPrompt runs a prompt long enough for
// flash_coop.comp's choices for long prompts, as they are (no test
// settings): 128-row workgroups (K and V staged in turn where both do not
// fit, as at exact precision on the H200) reading K and V converted to
// float16 once, at both precisions, against float64.
func TestCoopFlashAttentionLongPrompt(t *testing.T) {
	if !vulkan.Coop(testBackend(t)) {
		t.Skip("this device has no cooperative matrices: fast precision runs flash.comp")
	}
	for _, p := range []backend.Precision{backend.PrecisionFast, backend.PrecisionExact} {
		t.Run(p.String(), func(t *testing.T) {
			r := newRig(t, 15)
			_, a, z, _, _ := attention(r, 1100, 0, 8, 2, 128, 0, 0)
			q, k, v := readQKV(t, r, a)
			r.vs.SetPrecision(p)
			rows, apart, halves := vulkan.FlashLayout(r.vs, a)
			require.Equal(t, 128, rows)
			require.True(t, halves, "K and V converted once")
			require.Equal(t, vulkan.FlashApartNeeded(testBackend(t), p == backend.PrecisionExact), apart, "K and V staged in turn only where both do not fit")
			t.Logf("128 rows, K and V staged in turn: %v", apart)
			r.vs.FlashAttention(a)
			got := make([]float32, z.v.Len())
			require.NoError(t, r.vs.Read(z.v, 0, got))
			requireCoopFlash(t, got, q, k, v, a, p)
		})
	}
}

// flashKVRoutes are flash_coop.comp's ways of reading K and V: converted to
// float16 in each workgroup, or once before.
var flashKVRoutes = []struct {
	name   string
	halves bool
}{{"kv-f32", false}, {"kv16", true}}

// TestCoopFlashAttentionOutOfFloat16Range gives flash_coop.comp a value
// float16 cannot hold, along each route of K and V: a V entry of 1e5 at
// key 0, in every workgroup's first key block, or a K entry of -1e5 at key
// 70, in a block only the later workgroups read. The workgroups that meet
// it compute their rows in float32 instead, so their output is float32
// attention (tolExp of the float64 reference, which takes the inputs as
// they are), not infinities. At fast precision the workgroups whose
// queries all come before key 70's block never read it and stay at fast
// precision: the queries that do not see key 70 are held to its tolerance
// (some of them come from a workgroup that fell back, which meets it too).
func TestCoopFlashAttentionOutOfFloat16Range(t *testing.T) {
	if !vulkan.Coop(testBackend(t)) {
		t.Skip("this device has no cooperative matrices: fast precision runs flash.comp")
	}
	for _, p := range []backend.Precision{backend.PrecisionFast, backend.PrecisionExact} {
		for _, kv := range flashKVRoutes {
			for _, at := range []string{"v-key0", "k-key70"} {
				t.Run(fmt.Sprintf("%s/%s/%s", p, kv.name, at), func(t *testing.T) {
					r := newRig(t, 13)
					vulkan.FlashHalfKV(vulkan.Tune(r.vs), kv.halves)
					_, a, z, _, _ := attention(r, 90, 10, 4, 1, 64, 0, 0)
					q, k, v := readQKV(t, r, a)
					if at == "v-key0" {
						v[3] = 1e5
						r.vs.Write(a.V, 0, v)
					} else {
						k[70*64+5] = -1e5
						r.vs.Write(a.K, 0, k)
					}
					r.vs.SetPrecision(p)
					r.vs.FlashAttention(a)
					got := make([]float32, z.v.Len())
					require.NoError(t, r.vs.Read(z.v, 0, got))
					if p == backend.PrecisionFast && at == "k-key70" {
						seen := (70 - 10) * 4 * 64 // the outputs of the queries that see key 70
						requireClose(t, got[seen:], attention64(q, k, v, a)[seen:], tolExp, "z of the queries that see key 70")
						requireCoopFlash(t, got[:seen], q, k, v, a, p)
						return
					}
					requireClose(t, got, attention64(q, k, v, a), tolExp, "z")
				})
			}
		}
	}
}

// readQKV reads an attention's Q, K and V back from the device.
func readQKV(t *testing.T, r *rig, a *backend.Attention) (q, k, v []float32) {
	t.Helper()
	q, k, v = make([]float32, a.Q.Len()), make([]float32, a.K.Len()), make([]float32, a.V.Len())
	require.NoError(t, r.vs.Read(a.Q, 0, q))
	require.NoError(t, r.vs.Read(a.K, 0, k))
	require.NoError(t, r.vs.Read(a.V, 0, v))
	return q, k, v
}

// TestCoopMaterialisedAttention holds scores.comp and mix.comp on
// cooperative matrices (tile_coop.glsl: what a hook on the scores or the
// pattern takes) to float64 at both precisions: the scores against
// scale * Q K^T (capped, -inf where masked), the mix against P V over each
// query's keys, for a pattern as a hook may leave it (any values, above the
// diagonal too, where the kernel must not read), with probabilities under
// float16's normal range ("tiny") and with inputs float16 cannot hold
// ("big": K and P entries in every tile, so every workgroup sums in
// float32; "some": in the first block of keys and of queries only, so that
// workgroups in float32 run beside the others, at exact precision). Those
// entries meet zeros (Q's dim, V's key), so they do not swamp the outputs
// the tolerance is relative to. At fast precision the reference takes the inputs rounded to
// float16 as the kernel does (P times 1024 first); the products of two
// float16 values are exact in float32, so what is left is float32's sums,
// as at exact precision, whose dropped lo x lo product is 2^-22 of each
// term: both are held to tolSum. An indexing error or an unscaled tiny
// probability (a relative 2^-11 or more of each term) is far above it.
func TestCoopMaterialisedAttention(t *testing.T) {
	if !vulkan.Coop(testBackend(t)) {
		t.Skip("this device has no cooperative matrices: scores.comp and mix.comp run in float32")
	}
	cases := []struct {
		T, pos0, heads, kvHeads, hd, window int
		softcap                             float32
		pattern                             string // "", "tiny", "big" or "some"
	}{
		{T: 100, pos0: 0, heads: 4, kvHeads: 2, hd: 64},
		{T: 70, pos0: 0, heads: 16, kvHeads: 8, hd: 128},
		{T: 37, pos0: 50, heads: 8, kvHeads: 2, hd: 128},
		{T: 1, pos0: 130, heads: 4, kvHeads: 2, hd: 64},
		{T: 65, pos0: 3, heads: 3, kvHeads: 3, hd: 40}, // dims off a 16-dim tile
		{T: 20, pos0: 1, heads: 2, kvHeads: 1, hd: 6},  // and off whole vec4s, as keys are
		{T: 150, pos0: 0, heads: 4, kvHeads: 2, hd: 64, window: 20, softcap: 0.5},
		{T: 130, pos0: 0, heads: 2, kvHeads: 1, hd: 64, pattern: "tiny"},
		{T: 90, pos0: 10, heads: 4, kvHeads: 1, hd: 64, pattern: "big"},
		{T: 130, pos0: 0, heads: 2, kvHeads: 1, hd: 64, pattern: "some"}, // some workgroups in float32, others not
	}
	for _, tc := range cases {
		for _, p := range []backend.Precision{backend.PrecisionFast, backend.PrecisionExact} {
			t.Run(fmt.Sprintf("T%d_pos%d_h%d_kv%d_d%d_w%d_cap%g_%s/%s", tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap, tc.pattern, p), func(t *testing.T) {
				r := newRig(t, 14)
				_, a, z, scores, pattern := attention(r, tc.T, tc.pos0, tc.heads, tc.kvHeads, tc.hd, tc.window, tc.softcap)
				q, k, v := readQKV(t, r, a)
				keys := a.Keys()
				pat := make([]float32, tc.heads*tc.T*keys)
				for i := range pat {
					pat[i] = r.rng.Float32()
					if tc.pattern == "tiny" {
						pat[i] *= 1e-5
					}
				}
				if tc.pattern == "big" || tc.pattern == "some" {
					// Q's dim 3 and V's first key are 0, so that the big
					// entries force the float32 sums without swamping the
					// outputs the tolerance is relative to.
					for i := range tc.T * tc.heads {
						q[i*tc.hd+3] = 0
					}
					clear(v[:tc.kvHeads*tc.hd])
					for j := range keys {
						if tc.pattern == "big" || j < 64 { // "some": the first block of keys
							k[j*tc.kvHeads*tc.hd+3] = 1e5
						}
					}
					for h := range tc.heads {
						for i := range tc.T {
							if tc.pattern == "big" || i < 64 { // "some": the first block of queries
								pat[(h*tc.T+i)*keys] = 100 // 102,400 once times 1024
							}
						}
					}
					r.vs.Write(a.Q, 0, q)
					r.vs.Write(a.K, 0, k)
					r.vs.Write(a.V, 0, v)
				}
				r.vs.Write(pattern.v, 0, pat)
				r.vs.SetPrecision(p)
				r.vs.AttnScores(a)
				r.vs.AttnMix(a)
				gotS, gotZ := make([]float32, scores.v.Len()), make([]float32, z.v.Len())
				require.NoError(t, r.vs.Read(scores.v, 0, gotS))
				require.NoError(t, r.vs.Read(z.v, 0, gotZ))

				if p == backend.PrecisionFast && tc.pattern != "big" {
					if tc.pattern == "some" {
						// Tiles in float16 and in float32 side by side: no
						// one reference holds both to tolSum.
						return
					}
					for _, x := range [][]float32{q, k, v} {
						for i, f := range x {
							x[i] = float16.Fromfloat32(f).Float32()
						}
					}
					for i, f := range pat {
						pat[i] = float16.Fromfloat32(f*1024).Float32() / 1024
					}
				}
				requireClose(t, gotS, scores64(q, k, a), tolSum, "scores")
				requireClose(t, gotZ, mix64(pat, v, a), tolSum, "z")
			})
		}
	}
}

// scores64 is scale * Q K^T per head in float64, capped where a caps, and
// -inf where the query does not see the key.
func scores64(q, k []float32, a *backend.Attention) []float32 {
	hd, group, keys := a.HeadDim, a.Heads/a.KVHeads, a.Keys()
	s := make([]float32, a.Heads*a.T*keys)
	for h := range a.Heads {
		for i := range a.T {
			for j := range keys {
				at := (h*a.T+i)*keys + j
				if !a.Visible(a.Pos0+i, j) {
					s[at] = float32(math.Inf(-1))
					continue
				}
				dot := 0.0
				for d := range hd {
					dot += float64(q[(i*a.Heads+h)*hd+d]) * float64(k[(j*a.KVHeads+h/group)*hd+d])
				}
				dot *= float64(a.Scale)
				if a.Softcap != 0 {
					dot = float64(a.Softcap) * math.Tanh(dot/float64(a.Softcap))
				}
				s[at] = float32(dot)
			}
		}
	}
	return s
}

// mix64 is Z = P V in float64 over each query's keys up to its own position
// (what a pattern holds past it is not read).
func mix64(pat, v []float32, a *backend.Attention) []float32 {
	hd, group, keys := a.HeadDim, a.Heads/a.KVHeads, a.Keys()
	z := make([]float32, a.T*a.Heads*hd)
	for i := range a.T {
		for h := range a.Heads {
			for d := range hd {
				acc := 0.0
				for j := range a.Pos0 + i + 1 {
					acc += float64(pat[(h*a.T+i)*keys+j]) * float64(v[(j*a.KVHeads+h/group)*hd+d])
				}
				z[(i*a.Heads+h)*hd+d] = float32(acc)
			}
		}
	}
	return z
}
