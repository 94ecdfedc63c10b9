package cpu_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

var benchTypes = []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.Q1_0_G128, gguf.TQ2_0_G128}

// BenchmarkMatMul times x[T,2048] W^T for W [2048 x 2048] in each format.
func BenchmarkMatMul(b *testing.B) {
	const rows, cols = 2048, 2048
	for _, T := range []int{1, 64, 256} {
		for _, typ := range benchTypes {
			for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
				name := fmt.Sprintf("T=%d/%s", T, typ)
				if prec == backend.PrecisionFast {
					if f, err := quant.For(typ); T <= 8 || err != nil || f.Codes == nil {
						continue // fast precision changes nothing there
					}
					name += "/fast"
				}
				b.Run(name, func(b *testing.B) {
					f, err := quant.For(typ)
					if err != nil {
						b.Fatal(err)
					}
					r := rand.New(rand.NewPCG(1, 2))
					w := make([]float32, rows*cols)
					for i := range w {
						w[i] = r.Float32() - 0.5
					}
					packed := make([]byte, rows*cols/f.BlockSize*f.BlockBytes)
					f.Quantize(packed, w)
					be := cpu.New(0)
					m, err := be.Upload(&model.Weight{Name: "w", Rows: rows, Cols: cols, Format: f, Data: packed})
					if err != nil {
						b.Fatal(err)
					}
					st := be.NewStream()
					st.SetPrecision(prec)
					x, _ := st.Alloc("x", T*cols)
					xs := make([]float32, T*cols)
					for i := range xs {
						xs[i] = float32(r.NormFloat64())
					}
					st.Write(x, 0, xs)
					y, _ := st.Alloc("y", T*rows)
					st.MatMul(x, T, backend.Proj{W: m, Dst: y}) // a fast product packs the weights first
					b.ResetTimer()
					for b.Loop() {
						st.MatMul(x, T, backend.Proj{W: m, Dst: y})
					}
					b.ReportMetric(2*float64(T*rows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkPrefill runs a whole prefill of a bonsai-1.7b-shape model with
// random 1-bit weights. It generates a 1.7B-parameter model first, so run it
// alone: go test ./gpu/cpu -run=^$ -bench=Prefill -benchtime=3x
func BenchmarkPrefill(b *testing.B) {
	for _, typ := range []gguf.Type{gguf.Q1_0_G128} {
		b.Run("bonsai-1.7b/"+typ.String()+"/T=64", func(b *testing.B) {
			m, err := synth.Random(synth.Shapes["bonsai-1.7b"], typ, 1)
			if err != nil {
				b.Fatal(err)
			}
			e, err := engine.NewEngine(m, cpu.New(0))
			if err != nil {
				b.Fatal(err)
			}
			tokens := make([]int32, 64)
			for i := range tokens {
				tokens[i] = int32(i * 97 % m.Vocab)
			}
			s, err := e.NewSession(len(tokens))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				s.Reset()
				if _, err := s.Prefill(context.Background(), tokens, engine.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tokens))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(2*float64(m.Params()-int64(m.Vocab*m.DModel))*float64(len(tokens))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPrefillThreads sweeps the backend's thread count (cpu.New(n),
// whatever GOMAXPROCS is: 1, 2, 4, ... up to GOMAXPROCS, and GOMAXPROCS) on
// the files of the CPU table against llama.cpp in docs/PERFORMANCE.md,
// random weights of each shape and type. Each round prefills once on each
// thread count in turn, so that all see the same machine; it reports each
// count's median tokens/s (tok/s@n) and the median over rounds of its speed
// against one thread's in the same round (x@n). bonsai-1.7b keeps a packed
// copy of its weights per thread count (1.3 GB each in Q4_K), and its
// one-thread prefills are most of the run: leave it out with -bench
// 'PrefillThreads/tiny' where memory or time is short. On a 16-core host:
//
//	go test ./backend/cpu -run '^$' -bench PrefillThreads -benchtime 10x -timeout 30m
func BenchmarkPrefillThreads(b *testing.B) {
	counts := []int{}
	for n := 1; n < runtime.GOMAXPROCS(0); n *= 2 {
		counts = append(counts, n)
	}
	counts = append(counts, runtime.GOMAXPROCS(0))
	files := []struct {
		shape string
		typ   gguf.Type
	}{{"tiny-qwen3", gguf.F16}, {"tiny-qwen3", gguf.Q8_0}, {"tiny-qwen3", gguf.Q4_0}, {"tiny-qwen3", gguf.Q4_K}, {"tiny-qwen3", gguf.Q6_K}, {"bonsai-1.7b", gguf.Q4_K}}
	for _, file := range files {
		b.Run(file.shape+"/"+file.typ.String(), func(b *testing.B) {
			m, err := synth.Random(synth.Shapes[file.shape], file.typ, 1)
			if err != nil {
				b.Fatal(err)
			}
			sessions := make([]*engine.Session, len(counts))
			for i, n := range counts {
				e, err := engine.NewEngine(m, cpu.New(n))
				if err != nil {
					b.Fatal(err)
				}
				if sessions[i], err = e.NewSession(256); err != nil {
					b.Fatal(err)
				}
				defer sessions[i].Close()
			}
			for _, T := range []int{64, 256} {
				for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
					if f, _ := quant.For(file.typ); prec == backend.PrecisionFast && f.Codes == nil {
						continue // fast precision changes nothing for float weights
					}
					b.Run(fmt.Sprintf("T=%d/%v", T, prec), func(b *testing.B) {
						tokens := make([]int32, T)
						for i := range tokens {
							tokens[i] = int32((i*7919 + 13) % m.Vocab) // strata bench's prompt
						}
						prefill := func(s *engine.Session) time.Duration {
							s.Reset()
							start := time.Now()
							if _, err := s.Prefill(context.Background(), tokens, engine.Options{Precision: prec}); err != nil {
								b.Fatal(err)
							}
							return time.Since(start)
						}
						for _, s := range sessions {
							prefill(s) // packs the weights of a fast product, makes the scratch
						}
						times := make([][]time.Duration, len(counts))
						speedups := make([][]float64, len(counts))
						for b.Loop() {
							for i, s := range sessions {
								times[i] = append(times[i], prefill(s))
								speedups[i] = append(speedups[i], float64(times[0][len(times[0])-1])/float64(times[i][len(times[i])-1]))
							}
						}
						for i, n := range counts {
							slices.Sort(times[i])
							slices.Sort(speedups[i])
							b.ReportMetric(float64(T)/times[i][len(times[i])/2].Seconds(), fmt.Sprintf("tok/s@%d", n))
							if n > 1 {
								b.ReportMetric(speedups[i][len(speedups[i])/2], fmt.Sprintf("x@%d", n))
							}
						}
					})
				}
			}
		})
	}
}

// BenchmarkCaptureCost runs prefills of the default model's shape
// (tiny-qwen3: 4 layers, d 256, vocabulary 2048) capturing nothing and
// capturing every point, alternately in one loop so that both see the same
// machine, and reports each one's median and the median ratio of each
// capture-all prefill to the no-capture one before it (issue #18: at most
// 1.1; the machine's speed drifts over a run by more than that). Each trace
// is closed, as a sweep would, which hands its memory to the next prefill.
// Capture-all writes 6.8 MB per prefill at T=64, 112.7 MB at T=512 (67.1 MB
// of it attention scores and patterns), into arenas of earlier traces
// (reused-arenas/op).
func BenchmarkCaptureCost(b *testing.B) {
	m, err := synth.Random(synth.Shapes["tiny-qwen3"], gguf.F32, 1)
	if err != nil {
		b.Fatal(err)
	}
	backend := cpu.New(0)
	counts := cpu.CountArenas(backend)
	e, err := engine.NewEngine(m, backend)
	if err != nil {
		b.Fatal(err)
	}
	for _, T := range []int{64, 512} {
		b.Run(fmt.Sprintf("T=%d", T), func(b *testing.B) {
			tokens := make([]int32, T)
			for i := range tokens {
				tokens[i] = int32(i * 97 % m.Vocab)
			}
			s, err := e.NewSession(T)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			run := func(o engine.Options) time.Duration {
				s.Reset()
				start := time.Now()
				tr, err := s.Prefill(context.Background(), tokens, o)
				if err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				tr.Close()
				return d
			}
			run(engine.Options{Capture: engine.CaptureAll()}) // warm-up
			var none, all []time.Duration
			reused := counts.Reused.Load()
			for b.Loop() {
				none = append(none, run(engine.Options{}))
				all = append(all, run(engine.Options{Capture: engine.CaptureAll()}))
			}
			median := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Microseconds()) / 1e3
			}
			ratios := make([]float64, len(all))
			for i := range all {
				ratios[i] = float64(all[i]) / float64(none[i])
			}
			slices.Sort(ratios)
			b.ReportMetric(median(none), "none-ms")
			b.ReportMetric(median(all), "all-ms")
			b.ReportMetric(ratios[len(ratios)/2], "all/none")
			b.ReportMetric(float64(counts.Reused.Load()-reused)/float64(len(all)), "reused-arenas/op")
		})
	}
}

// BenchmarkCaptureMemory writes what a capture-all prefill of the default
// model's shape writes at T=512 (112.7 MB), in rows of 2 KB as attention
// writes its patterns, into memory written before ("reused") and into a new
// slice each time ("new", as each prefill's trace is): the difference is
// what new memory costs a capture, whatever the kernels do.
func BenchmarkCaptureMemory(b *testing.B) {
	const n, row = 112_700_000 / 4, 512
	src := make([]float32, row)
	var keep []float32
	for _, fresh := range []bool{false, true} {
		b.Run(map[bool]string{false: "reused", true: "new"}[fresh], func(b *testing.B) {
			dst := make([]float32, n)
			copy(dst, make([]float32, n)) // its pages are mapped before the timing
			b.SetBytes(4 * n)
			for b.Loop() {
				if fresh {
					dst = make([]float32, n)
				}
				for o := 0; o+row <= n; o += row {
					copy(dst[o:o+row], src)
				}
				keep = dst
			}
		})
	}
	_ = keep
}
