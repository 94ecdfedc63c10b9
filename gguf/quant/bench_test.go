package quant_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stratalab/strata/gguf/quant"
)

// BenchmarkDot dots one 4096-element row per op. MB/s counts packed weight
// bytes read; GFLOP/s counts a multiply and an add per element.
func BenchmarkDot(b *testing.B) {
	const n = 4096
	rng := rand.New(rand.NewPCG(11, 12))
	x := weights(rng, n)
	for _, typ := range quant.Supported() {
		b.Run(typ.String(), func(b *testing.B) {
			f := mustFor(b, typ)
			w := quantize(b, f, weights(rng, n))
			b.SetBytes(int64(len(w)))
			var sink float32
			for b.Loop() {
				sink += f.Dot(w, x)
			}
			b.ReportMetric(2*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			_ = sink
		})
	}
}

// BenchmarkDequantize decodes one 4096-element row per op; MB/s counts
// packed bytes read.
func BenchmarkDequantize(b *testing.B) {
	const n = 4096
	rng := rand.New(rand.NewPCG(13, 14))
	dst := make([]float32, n)
	for _, typ := range quant.Supported() {
		b.Run(typ.String(), func(b *testing.B) {
			f := mustFor(b, typ)
			w := quantize(b, f, weights(rng, n))
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				f.Dequantize(dst, w)
			}
		})
	}
}
