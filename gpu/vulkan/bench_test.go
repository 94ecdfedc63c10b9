package vulkan_test

import (
	"testing"

	"github.com/stratalab/strata/gpu/vulkan"
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
