package vulkan_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// benchBackend opens a backend of the benchmark's own, closed after it:
// the shared one of the tests validates every call.
func benchBackend(b *testing.B) *vulkan.Backend {
	testBackend(b) // skips where there is no Vulkan device
	v, err := vulkan.Open(vulkan.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = v.Close() })
	return v
}

// benchEngine puts a random model of the shape on a backend of its own.
func benchEngine(b *testing.B, shape synth.Shape, typ gguf.Type) *engine.Engine {
	return benchEngineOn(b, benchBackend(b), shape, typ)
}

// benchEngineOn is benchEngine on v (benchBackend's, tuned).
func benchEngineOn(b *testing.B, v backend.Backend, shape synth.Shape, typ gguf.Type) *engine.Engine {
	m, err := synth.Random(shape, typ, 1)
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.NewEngine(m, v)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// benchTokens is a prompt of T ids spread over the vocabulary.
func benchTokens(T, vocab int) []int32 {
	tokens := make([]int32, T)
	for i := range tokens {
		tokens[i] = int32(i * 97 % vocab)
	}
	return tokens
}

// BenchmarkRecordDispatch measures the host cost of recording one kernel
// (pipeline lookup, hazard check, barrier, descriptor set, push constants,
// dispatch): what a prefill pays per kernel before the device runs anything.
// It opens its own backend: the shared one validates every call.
func BenchmarkRecordDispatch(b *testing.B) {
	v := benchBackend(b)
	s := v.NewStream()
	x, err := s.Alloc("x", 64)
	if err != nil {
		b.Fatal(err)
	}
	y, err := s.Alloc("y", 64)
	if err != nil {
		b.Fatal(err)
	}
	g, err := s.Alloc("gain", 64)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		// Alternate the direction so every kernel depends on the previous one.
		if i%2 == 0 {
			s.RMSNorm(y, x, g, nil, 1, 64, 1e-5)
		} else {
			s.RMSNorm(x, y, g, nil, 1, 64, 1e-5)
		}
		if i%1000 == 999 {
			b.StopTimer()
			if err := s.Sync(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPrefillCaptureAll times repeated capture-all prefills of a model
// as deep as bonsai-8b (36 layers, 723 capture points) but narrow, so that
// the per-point host work (buffers, captures, readback) is a large share.
// It opens its own backend: the shared one validates every call. StartClose
// is what a prefill pays for its buffers before any kernel; OneShot is a
// whole prefill; Stepped reads the trace after every layer, as a notebook
// stepping through a run does.
func BenchmarkPrefillCaptureAll(b *testing.B) {
	e := benchEngine(b, synth.Shape{Arch: "qwen3", Layers: 36, DModel: 64, FFN: 128, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: 512, Context: 32, Theta: 1e6}, gguf.F32)
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	for _, T := range []int{4, 32} {
		tokens := benchTokens(T, e.Model.Vocab)
		s, err := e.NewSession(T)
		if err != nil {
			b.Fatal(err)
		}
		// The timed prefills are repeats, as in a sweep over prompts.
		if _, err := s.Prefill(context.Background(), tokens, o); err != nil {
			b.Fatal(err)
		}
		s.Reset()
		// Close submits what Start recorded (the zero fills of new buffers).
		b.Run(fmt.Sprintf("T=%d/StartClose", T), func(b *testing.B) {
			for b.Loop() {
				r, err := s.Start(context.Background(), tokens, o)
				if err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
		b.Run(fmt.Sprintf("T=%d/OneShot", T), func(b *testing.B) {
			for b.Loop() {
				s.Reset()
				if _, err := s.Prefill(context.Background(), tokens, o); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("T=%d/Stepped", T), func(b *testing.B) {
			for b.Loop() {
				s.Reset()
				r, err := s.Start(context.Background(), tokens, o)
				if err != nil {
					b.Fatal(err)
				}
				for r.Next() {
					if _, err := r.Trace(); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := r.Finish(); err != nil {
					b.Fatal(err)
				}
			}
		})
		s.Close()
	}
}

// BenchmarkResidNorms compares the two ways to get each position's residual
// norm from a device trace of bonsai-1.7b's width and depth at T=2048: the
// device reduces and T floats per layer come back (Trace.RowNorms, what
// viz.ResidNorms uses), or every row comes back and the host reduces.
func BenchmarkResidNorms(b *testing.B) {
	shape := synth.Shapes["bonsai-1.7b"]
	shape.FFN, shape.Vocab, shape.Context = 256, 512, 2048 // what the norms read is layers x T x d_model
	e := benchEngine(b, shape, gguf.Q1_0_G128)
	m := e.Model
	const T = 2048
	tokens := benchTokens(T, m.Vocab)
	s, err := e.NewSession(T)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tr, err := s.Prefill(context.Background(), tokens, engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post")})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	b.SetBytes(int64(m.Layers) * T * int64(m.DModel) * 4) // the residual stream the norms summarise
	b.Run("device", func(b *testing.B) {
		for b.Loop() {
			for l := range m.Layers {
				if _, err := tr.RowNorms(trace.LayerPoint(l, "hook_resid_post")); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("host", func(b *testing.B) {
		for b.Loop() {
			for l := range m.Layers {
				x, err := tr.Rows(trace.LayerPoint(l, "hook_resid_post"), 0, T)
				if err != nil {
					b.Fatal(err)
				}
				for r := range T {
					sum := 0.0
					for _, v := range x.Data[r*m.DModel : (r+1)*m.DModel] {
						sum += float64(v) * float64(v)
					}
					_ = math.Sqrt(sum)
				}
			}
		}
	})
}

// BenchmarkCopy moves a point's worth of floats between device tensors, as
// a capture does, with the copy command and with copy.comp (GB/s counts
// bytes read and written).
func BenchmarkCopy(b *testing.B) {
	v := benchBackend(b)
	for _, n := range []int{4 << 20, 64 << 20} {
		for _, shader := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dMB/%s", 4*n>>20, map[bool]string{false: "command", true: "copy.comp"}[shader]), func(b *testing.B) {
				s := v.NewStream()
				vulkan.Tune(s).CopyShader = shader
				src, err := s.Alloc("src", n)
				if err != nil {
					b.Fatal(err)
				}
				dst, err := s.Alloc("dst", n)
				if err != nil {
					b.Fatal(err)
				}
				s.Copy(dst, 0, src, 0, n) // builds the pipeline outside the timing
				if err := s.Sync(); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					for range 10 {
						s.Copy(dst, 0, src, 0, n)
					}
					if err := s.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*4*float64(n)*10*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkPrefillTiles times whole bonsai-1.7b prefills (random
// Q1_0_g128 weights, capture none) on the 128 x 128 tile of 4 x 2
// accumulators per subgroup loading each way, prefetching (the usual exact
// tile) and late (the usual fast one), alternating twice, so the two are
// compared in one process.
func BenchmarkPrefillTiles(b *testing.B) {
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	tb, tu := vulkan.Tuned(v)
	e := benchEngineOn(b, tb, synth.Shapes["bonsai-1.7b"], gguf.Q1_0_G128)
	for _, late := range []bool{false, true} {
		if vulkan.CoopTileIndex4x2(late) < 0 {
			b.Fatalf("no 4 x 2 tile with late %v in coopTiles", late)
		}
	}
	for _, T := range []int{128, 512, 2048} {
		tokens := benchTokens(T, e.Model.Vocab)
		s, err := e.NewSession(T)
		if err != nil {
			b.Fatal(err)
		}
		for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
			o := engine.Options{Precision: prec}
			for _, round := range []int{1, 2} {
				for _, tiles := range []string{"prefetch", "late"} {
					b.Run(fmt.Sprintf("T=%d/%v/%s/%d", T, prec, tiles, round), func(b *testing.B) {
						if !vulkan.ForceCoopTile(v, tu, vulkan.CoopTileIndex4x2(tiles == "late"), prec == backend.PrecisionExact, false) {
							b.Skip("the tile needs more shared memory than the device has")
						}
						defer vulkan.ForceCoopTile(v, tu, -1, true, false)
						timePrefills(b, s, tokens, o)
					})
				}
			}
		}
		s.Close()
	}
}

// BenchmarkPrefillSplitK times whole prefills (random Q1_0_g128 weights,
// capture none, fast precision) with products split along K under the
// usual thresholds and under 64 workgroups whatever the tile (the rule
// before), alternating three times, so the two are compared in one process.
func BenchmarkPrefillSplitK(b *testing.B) {
	for _, shape := range []string{"bonsai-1.7b", "bonsai-8b"} {
		v := benchBackend(b)
		if !vulkan.Coop(v) {
			b.Skip("no cooperative-matrix GEMMs")
		}
		tb, tu := vulkan.Tuned(v)
		e := benchEngineOn(b, tb, synth.Shapes[shape], gguf.Q1_0_G128)
		for _, T := range []int{128, 512, 1024, 2048} {
			tokens := benchTokens(T, e.Model.Vocab)
			s, err := e.NewSession(T)
			if err != nil {
				b.Fatal(err)
			}
			o := engine.Options{Precision: backend.PrecisionFast} // exact products keep the rule
			for _, round := range []int{1, 2, 3} {
				for _, rule := range []string{"usual", "below64"} {
					b.Run(fmt.Sprintf("%s/T=%d/%s/%d", shape, T, rule, round), func(b *testing.B) {
						*tu = vulkan.DefaultTuning()
						if rule == "below64" {
							vulkan.SplitBelowAll(tu, 64)
						}
						timePrefills(b, s, tokens, o)
					})
				}
			}
			s.Close()
		}
	}
}

// BenchmarkPrefillSplitExact times whole exact prefills (random Q1_0_g128
// weights, capture none) with products split along K below 64 workgroups
// (the rule before), below 65 (the rule: bonsai-1.7b's Q, O and down
// projections at T=512 have 64, on the H200's 132 SMs, one workgroup each)
// and below 97 (bonsai-8b's gate and up at T=128 have 96), alternating
// twice.
func BenchmarkPrefillSplitExact(b *testing.B) {
	o := engine.Options{Precision: backend.PrecisionExact}
	for _, shape := range []string{"bonsai-1.7b", "bonsai-8b"} {
		v := benchBackend(b)
		if !vulkan.Coop(v) {
			b.Skip("no cooperative-matrix GEMMs")
		}
		tb, tu := vulkan.Tuned(v)
		e := benchEngineOn(b, tb, synth.Shapes[shape], gguf.Q1_0_G128)
		for _, T := range []int{128, 512} {
			tokens := benchTokens(T, e.Model.Vocab)
			s, err := e.NewSession(T)
			if err != nil {
				b.Fatal(err)
			}
			for _, round := range []int{1, 2} {
				for _, below := range []int{64, 65, 97} {
					b.Run(fmt.Sprintf("%s/T=%d/below%d/%d", shape, T, below, round), func(b *testing.B) {
						*tu = vulkan.DefaultTuning()
						vulkan.SplitBelowAll(tu, below)
						timePrefills(b, s, tokens, o)
					})
				}
			}
			s.Close()
		}
	}
}

// BenchmarkPrefillExactSplitW times whole exact prefills (random weights
// not exact in float16, capture none) with their hi + lo halves made first
// by weights16.comp and made in each tile, alternating twice, so the two
// are compared in one process; Q1_0_g128, which needs neither, once, for
// #14's ratio of each format to it.
func BenchmarkPrefillExactSplitW(b *testing.B) {
	o := engine.Options{Precision: backend.PrecisionExact}
	for _, shape := range []string{"bonsai-1.7b", "bonsai-8b"} {
		for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
			v := benchBackend(b)
			if !vulkan.Coop(v) {
				b.Skip("no cooperative-matrix GEMMs")
			}
			tb, tu := vulkan.Tuned(v)
			e := benchEngineOn(b, tb, synth.Shapes[shape], typ)
			for _, T := range []int{128, 512, 2048} {
				tokens := benchTokens(T, e.Model.Vocab)
				s, err := e.NewSession(T)
				if err != nil {
					b.Fatal(err)
				}
				routes, rounds := []string{"first", "tile"}, 2
				if typ == gguf.Q1_0_G128 {
					routes, rounds = []string{"none"}, 1
				}
				for round := range rounds {
					for _, route := range routes {
						b.Run(fmt.Sprintf("%s/%v/T=%d/%s/%d", shape, typ, T, route, round+1), func(b *testing.B) {
							*tu = vulkan.DefaultTuning()
							vulkan.HalfWRowsAll(tu, map[bool]int{true: 0, false: math.MaxInt}[route == "first"])
							timePrefills(b, s, tokens, o)
						})
					}
				}
				s.Close()
			}
			_ = e.Backend.Close() // the next format's model takes its memory
		}
	}
}

// BenchmarkLogitLens times the logit lens at exact precision over a
// Q6_K model of bonsai-1.7b's width and vocabulary (4 layers): each layer's
// unembedding multiplies T rows by a head whose hi + lo halves (1.2 GB)
// pass coopHalfWBytes, so the tiles split it ("tile") or the portable
// kernel takes it ("portable"), alternating twice.
func BenchmarkLogitLens(b *testing.B) {
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	shape := synth.Shapes["bonsai-1.7b"]
	shape.Layers, shape.FFN = 4, 256
	tb, tu := vulkan.Tuned(v)
	e := benchEngineOn(b, tb, shape, gguf.Q6_K)
	for _, T := range []int{128, 512} {
		s, err := e.NewSession(T)
		if err != nil {
			b.Fatal(err)
		}
		tr, err := s.Prefill(context.Background(), benchTokens(T, shape.Vocab), engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post")})
		if err != nil {
			b.Fatal(err)
		}
		for round := range 2 {
			for _, route := range []string{"tile", "portable"} {
				b.Run(fmt.Sprintf("T=%d/%s/%d", T, route, round+1), func(b *testing.B) {
					*tu = vulkan.DefaultTuning()
					if route == "portable" {
						tu.ExactInTileElems = math.MaxInt
					}
					for b.Loop() {
						if err := e.LogitLens(tr); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		tr.Close()
		s.Close()
	}
}

// timePrefills times s's prefills of tokens, after a second of them to
// raise the device's clocks.
func timePrefills(b *testing.B, s *engine.Session, tokens []int32, o engine.Options) {
	prefill := func() {
		s.Reset()
		if _, err := s.Prefill(context.Background(), tokens, o); err != nil {
			b.Fatal(err)
		}
	}
	for start := time.Now(); time.Since(start) < time.Second; {
		prefill()
	}
	for b.Loop() {
		prefill()
	}
}

// BenchmarkMatVec times a decoding step's products, one row of x (the LM
// head of a prefill, every product of a generated token), with a subgroup
// per output and with a workgroup per output, 16 products a submission.
// Reported as the weights' bytes read per second: these products are
// bound by memory.
func BenchmarkMatVec(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	for _, shape := range [][2]int{{4096, 4096}, {12288, 4096}, {65536, 2048}} {
		n, k := shape[0], shape[1]
		for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K, gguf.Q8_0} {
			b.Run(fmt.Sprintf("n=%d/k=%d/%v", n, k, typ), func(b *testing.B) {
				w := quantized(b, r, "w", n, k, typ)
				m, err := v.Upload(w)
				if err != nil {
					b.Fatal(err)
				}
				for _, subgroups := range []bool{true, false} {
					b.Run(fmt.Sprintf("subgroups=%v", subgroups), func(b *testing.B) {
						if subgroups && !vulkan.Subgroups(v) {
							b.Skip("the device has no subgroup arithmetic")
						}
						s := v.NewStream()
						vulkan.Tune(s).Subgroups = subgroups
						x, err := s.Alloc("x", k)
						if err != nil {
							b.Fatal(err)
						}
						s.Write(x, 0, r.values(k, 1))
						y, err := s.Alloc("y", n)
						if err != nil {
							b.Fatal(err)
						}
						const perSubmit = 16
						run := func() {
							for range perSubmit {
								s.MatMul(x, 1, backend.Proj{W: m, Dst: y})
							}
							if err := s.Sync(); err != nil {
								b.Fatal(err)
							}
						}
						for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
							run() // the clocks rise first
						}
						b.ResetTimer()
						for range b.N {
							run()
						}
						b.ReportMetric(float64(perSubmit*len(w.Data))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					})
				}
			})
		}
	}
}

// BenchmarkPrefillWeightsInTile times fast bonsai-1.7b prefills (random
// weights, capture none) in the quantized formats with their weights
// decoded in each tile and to float16 before each product, alternating
// twice so that both are compared in one process.
func BenchmarkPrefillWeightsInTile(b *testing.B) {
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0} {
		tb, tu := vulkan.Tuned(v)
		e := benchEngineOn(b, tb, synth.Shapes["bonsai-1.7b"], typ)
		for _, T := range []int{128, 512, 2048} {
			tokens := benchTokens(T, e.Model.Vocab)
			s, err := e.NewSession(T)
			if err != nil {
				b.Fatal(err)
			}
			for _, round := range []int{1, 2} {
				for _, mode := range []string{"tile", "first"} {
					b.Run(fmt.Sprintf("%v/T=%d/%s/%d", typ, T, mode, round), func(b *testing.B) {
						vulkan.HalfWRowsAll(tu, map[string]int{"first": 0, "tile": math.MaxInt}[mode])
						timePrefills(b, s, tokens, engine.Options{Precision: backend.PrecisionFast})
					})
				}
			}
			s.Close()
		}
	}
}
