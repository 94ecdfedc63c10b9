package vulkan_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
)

// A mixture's experts in one MatMulExperts give every run's rows what x W^T
// gives them in float64, for every format, at both precisions, on runs whose
// mean picks each tile height (1-16, 17-32, 33-64 and more rows; up to 8,
// on the portable kernels, matvec.comp with subgroups and without), runs that
// end inside a tile, an empty run and experts no run takes; on weights of
// one UploadGroup (one dispatch a projection) and of separate Uploads (a
// dispatch a run), there with every other expert in another format.
func TestMatMulExpertsEveryFormat(t *testing.T) {
	b := testBackend(t)
	noSubgroups := vulkan.DefaultTuning()
	noSubgroups.Coop, noSubgroups.Subgroups = false, false
	tunings := map[string]vulkan.Tuning{"default": vulkan.DefaultTuning(), "no subgroups": noSubgroups}
	if vulkan.Coop(b) {
		portable := vulkan.DefaultTuning()
		portable.Coop = false
		tunings["portable"] = portable
	} else {
		t.Log("the device has no cooperative-matrix GEMMs; the portable kernel runs")
	}
	runSets := map[string][]int{ // rows of experts 0.., and the mean of the runs that have some
		"mean5": {1, 8, 0, 6, 0}, "mean10": {1, 20, 0, 9, 0}, "mean31": {30, 0, 25, 40, 0}, "mean54": {70, 33, 0, 0, 60}, "mean110": {0, 150, 70, 110, 0},
	}
	for _, typ := range weightTypes {
		for tn, tu := range tunings {
			for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
				for rn, counts := range runSets {
					for _, together := range []bool{true, false} {
						name := fmt.Sprintf("%v/%s/%v/%s/together=%v", typ, tn, prec, rn, together)
						t.Run(name, func(t *testing.T) {
							if !together && (rn != "mean10" || tn != "default") {
								t.Skip("apart: one run set is enough")
							}
							if tn == "no subgroups" && rn != "mean5" {
								t.Skip("past 8 rows it runs matmul.comp, as \"portable\" does")
							}
							testMatMulExperts(t, b, tu, prec, typ, counts, together)
						})
					}
				}
			}
		}
	}
}

func testMatMulExperts(t *testing.T, b *vulkan.Backend, tu vulkan.Tuning, prec backend.Precision, typ gguf.Type, counts []int, together bool) {
	r := newRig(t, 3)
	vulkan.SetTuning(r.vs, tu)
	r.vs.SetPrecision(prec)
	cols, n1, n2 := 2*blockOf(typ)+256, 100, 33
	if blockOf(typ) == 1 {
		cols = 173
	}
	experts := len(counts)
	other := gguf.Q8_0 // of every other expert, apart
	if typ == other || blockOf(typ) != blockOf(other) && cols%blockOf(other) != 0 {
		other = gguf.F32
	}
	var ws1, ws2 []*model.Weight
	for e := range experts {
		et := typ
		if !together && e%2 == 1 {
			et = other
		}
		ws1 = append(ws1, quantized(t, r, fmt.Sprintf("gate%d", e), n1, cols, et))
		ws2 = append(ws2, quantized(t, r, fmt.Sprintf("up%d", e), n2, cols, et))
	}
	var w1, w2 []backend.Matrix
	if together {
		ms, err := b.UploadGroup(append(append([]*model.Weight(nil), ws1...), ws2...))
		require.NoError(t, err)
		w1, w2 = ms[:experts], ms[experts:]
	} else {
		for e := range experts {
			m1, err := b.Upload(ws1[e])
			require.NoError(t, err)
			m2, err := b.Upload(ws2[e])
			require.NoError(t, err)
			w1, w2 = append(w1, m1), append(w2, m2)
		}
	}
	// Runs in another order than the experts', and an empty one.
	var runs []backend.ExpertRun
	rows := 0
	for _, e := range []int{3, 0, 4, 2, 1} {
		runs = append(runs, backend.ExpertRun{Expert: e, First: rows, Rows: counts[e]})
		rows += counts[e]
	}
	xs := r.values(rows*cols, 1)
	x := r.tensor("x", xs)
	y1, y2 := r.zeros("y1", rows*n1), r.zeros("y2", rows*n2)
	r.vs.MatMulExperts(x.v, runs, backend.ExpertProj{W: w1, Dst: y1.v}, backend.ExpertProj{W: w2, Dst: y2.v})
	_, got1 := r.read(y1)
	_, got2 := r.read(y2)
	// As in TestCoopMatMulEveryTileKeepsItsPrecision: exact, float32 sums
	// and tensor cores' truncation, 1e-5 of sum |x w|; fast, both inputs
	// rounded to float16 (2^-11 each), 2^-9.
	bound := 1e-5
	if prec == backend.PrecisionFast {
		bound = math.Pow(2, -9)
	}
	for _, run := range runs {
		for i, p := range []struct {
			w   *model.Weight
			got []float32
		}{{ws1[run.Expert], got1}, {ws2[run.Expert], got2}} {
			n := p.w.Rows
			dec := make([]float32, n*cols)
			p.w.Format.Dequantize(dec, p.w.Data)
			got := p.got[run.First*n : (run.First+run.Rows)*n]
			worst := worstOfSum(got, xs[run.First*cols:(run.First+run.Rows)*cols], dec, nil, run.Rows, n, cols)
			require.LessOrEqual(t, worst, bound, "expert %d's %d rows, projection %d: largest error relative to sum |x w|", run.Expert, run.Rows, i)
		}
	}
}

// A mixture routed on the device (backend.ExpertRouting): SortExperts gives
// each expert's count, first row and slots in slot order, as a stable sort
// of the ids does, empty slots (-1) and ids that name no expert (2.5, 9,
// -3, NaN) left out; GatherRouted lines the slots' tokens up in that order,
// MatMulExpertsRouted multiplies each by its expert's weights as x W^T does
// in float64, and ScatterRouted puts each row back in its slot, leaving the
// empty slots as they were.
func TestExpertRoutingOnTheDevice(t *testing.T) {
	b := testBackend(t)
	for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
		for _, tokens := range []int{37, 2100} { // the second past sortexperts.comp's chunk of 4,096 slots
			t.Run(fmt.Sprintf("%v/tokens=%d", prec, tokens), func(t *testing.T) {
				r := newRig(t, 5)
				r.vs.SetPrecision(prec)
				const k, experts, cols, n = 2, 5, 256, 48
				slots := tokens * k
				ids := make([]float32, slots)
				for tok := range tokens {
					a := r.rng.IntN(experts)
					ids[tok*k], ids[tok*k+1] = float32(a), float32((a+1+r.rng.IntN(experts-1))%experts)
				}
				ids[3], ids[10], ids[20], ids[31], ids[40], ids[57] = -1, 2.5, 9, -3, float32(math.NaN()), -1
				var ws []*model.Weight
				for e := range experts {
					ws = append(ws, quantized(t, r, fmt.Sprintf("w%d", e), n, cols, gguf.Q8_0))
				}
				w, err := b.UploadGroup(ws)
				require.NoError(t, err)
				es := r.vs.(backend.ExpertRouting)
				require.True(t, es.Routable(w), "one UploadGroup")

				routing, err := r.vs.Alloc("routing", backend.RoutingLen(slots, experts))
				require.NoError(t, err)
				idv := r.tensor("ids", ids)
				es.SortExperts(routing, idv.v, tokens, k, experts)
				raw := make([]float32, backend.RoutingLen(slots, experts))
				require.NoError(t, r.vs.Read(routing, 0, raw))
				words := make([]uint32, len(raw))
				for i, f := range raw {
					words[i] = math.Float32bits(f)
				}
				var order []uint32
				var counts, firsts []uint32
				for e := range experts {
					firsts = append(firsts, uint32(len(order)))
					for s, id := range ids {
						if id == float32(e) {
							order = append(order, uint32(s))
						}
					}
					counts = append(counts, uint32(len(order))-firsts[e])
				}
				require.Equal(t, counts, words[:experts], "counts")
				require.Equal(t, firsts, words[experts:2*experts], "first rows")
				require.Equal(t, order, words[2*experts:2*experts+len(order)], "slots by expert, in slot order")

				xs := r.values(tokens*cols, 1)
				x := r.tensor("x", xs)
				xr, y := r.zeros("routed x", slots*cols), r.zeros("routed y", slots*n)
				es.GatherRouted(xr.v, x.v, routing, slots, experts, k, cols)
				require.True(t, es.MatMulExpertsRouted(xr.v, routing, slots, backend.ExpertProj{W: w, Dst: y.v}))
				out := r.tensor("out", slices.Repeat([]float32{-7}, slots*n))
				es.ScatterRouted(out.v, y.v, routing, slots, experts, n)
				_, gotX := r.read(xr)
				_, got := r.read(out)
				bound := 1e-5 // testMatMulExperts' bounds
				if prec == backend.PrecisionFast {
					bound = math.Pow(2, -9)
				}
				decs := make([][]float32, experts)
				for e, w := range ws {
					decs[e] = make([]float32, n*cols)
					w.Format.Dequantize(decs[e], w.Data)
				}
				for i, s := range order {
					tok := int(s) / k
					require.Equal(t, xs[tok*cols:(tok+1)*cols], gotX[i*cols:(i+1)*cols], "routed row %d: token %d", i, tok)
					e := int(ids[s])
					worst := worstOfSum(got[int(s)*n:(int(s)+1)*n], xs[tok*cols:(tok+1)*cols], decs[e], nil, 1, n, cols)
					require.LessOrEqual(t, worst, bound, "slot %d, expert %d: largest error relative to sum |x w|", s, e)
				}
				for _, s := range []int{3, 10, 20, 31, 40, 57} {
					require.Equal(t, slices.Repeat([]float32{-7}, n), got[s*n:(s+1)*n], "empty slot %d (id %g) left as it was", s, ids[s])
				}
			})
		}
	}
}

// Routing calls with tensors too short, or no experts, fail the stream
// with an error naming the kernel and the tensor, before the device.
func TestExpertRoutingRefusesBadSizes(t *testing.T) {
	b := testBackend(t)
	for name, call := range map[string]func(es backend.ExpertRouting, routing, ids, x backend.Tensor){
		"sortexperts needs 30 elements of routing": func(es backend.ExpertRouting, routing, ids, x backend.Tensor) {
			es.SortExperts(routing, ids, 10, 2, 5) // 2 * 5 + 20 elements
		},
		"sorting slots among 0 experts": func(es backend.ExpertRouting, routing, ids, x backend.Tensor) {
			es.SortExperts(routing, ids, 4, 2, 0)
		},
		"gather_routed needs 640 elements of y": func(es backend.ExpertRouting, routing, ids, x backend.Tensor) {
			es.GatherRouted(x, ids, routing, 20, 5, 2, 32)
		},
		"scatter_routed of rows of 0": func(es backend.ExpertRouting, routing, ids, x backend.Tensor) {
			es.ScatterRouted(x, ids, routing, 4, 5, 0)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := b.NewStream()
			defer s.Close()
			alloc := func(name string, n int) backend.Tensor {
				x, err := s.Alloc(name, n)
				require.NoError(t, err)
				return x
			}
			call(s.(backend.ExpertRouting), alloc("routing", 20), alloc("ids", 20), alloc("y", 64))
			require.ErrorContains(t, s.Sync(), name)
		})
	}
}

// Route on the device chooses the CPU's experts, in its order, at its
// weights (to float32's rounding of sums in another order): on rows with
// ties (the lower index first), fewer finite logits than slots (-1 and 0
// past them), every logit -Inf (every slot empty), a NaN (experts 0..k-1
// at NaN weights), and more experts than a workgroup's 64 lanes.
func TestRouteMatchesCPU(t *testing.T) {
	r := newRig(t, 9)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, c := range []struct{ experts, k int }{{8, 2}, {200, 8}, {128, 1}} {
		t.Run(fmt.Sprintf("experts=%d/k=%d", c.experts, c.k), func(t *testing.T) {
			const rows = 7
			logits := r.values(rows*c.experts, 2)
			row := func(i int) []float32 { return logits[i*c.experts : (i+1)*c.experts] }
			for e := range c.experts { // row 1: ties everywhere
				row(1)[e] = float32(e % 3)
			}
			for e := range row(2) { // row 2: one finite logit
				row(2)[e] = -inf
			}
			row(2)[c.experts-1] = 0.5
			for e := range row(3) { // row 3: every expert ablated
				row(3)[e] = -inf
			}
			row(4)[c.experts/2] = nan
			ids, ws := r.zeros("ids", rows*c.k), r.zeros("weights", rows*c.k)
			lg := r.tensor("logits", logits)
			r.cs.Route(ids.c, ws.c, lg.c, rows, c.experts, c.k)
			r.vs.Route(ids.v, ws.v, lg.v, rows, c.experts, c.k)
			wantIDs, gotIDs := r.read(ids)
			wantW, gotW := r.read(ws)
			require.Equal(t, wantIDs, gotIDs, "ids")
			for i := range wantW {
				if math.IsNaN(float64(wantW[i])) {
					require.True(t, math.IsNaN(float64(gotW[i])), "weight %d: NaN", i)
					continue
				}
				require.InDelta(t, wantW[i], gotW[i], 1e-6, "weight %d", i) // probabilities at most 1, float32 sums
			}
		})
	}
}
