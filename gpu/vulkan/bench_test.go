package vulkan_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/vulkan"
	"github.com/stratalab/strata/model"
)

// BenchmarkRecordDispatch measures the host cost of recording one kernel
// (pipeline lookup, hazard check, barrier, descriptor set, push constants,
// dispatch): what a prefill pays per kernel before the device runs anything.
// It opens its own backend: the shared one validates every call.
func BenchmarkRecordDispatch(b *testing.B) {
	backend(b)
	v, err := vulkan.Open(vulkan.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
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
			s.RMSNorm(y, x, g, 1, 64, 1e-5)
		} else {
			s.RMSNorm(x, y, g, 1, 64, 1e-5)
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
	backend(b)
	v, err := vulkan.Open(vulkan.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	shape := model.Shape{Arch: "qwen3", Layers: 36, DModel: 64, FFN: 128, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: 512, Context: 32, Theta: 1e6}
	m, err := model.Random(shape, gguf.F32, 1)
	if err != nil {
		b.Fatal(err)
	}
	e, err := gpu.NewEngine(m, v)
	if err != nil {
		b.Fatal(err)
	}
	o := gpu.Options{Capture: gpu.CaptureAll(), Logits: gpu.LogitsAll}
	for _, T := range []int{4, 32} {
		tokens := make([]int32, T)
		for i := range tokens {
			tokens[i] = int32(i * 97 % m.Vocab)
		}
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
