// Package poison wraps a backend for tests: its streams fill new tensors
// with NaN instead of zeros and can refill the ones a session keeps, so a
// kernel reading an element the prefill has not written shows up in the
// results. They also count allocations and live tensors.
package poison

import (
	"math"
	"strings"

	"github.com/stratalab/strata/gpu"
)

// Backend hands out poisoning streams and remembers them.
type Backend struct {
	gpu.Backend
	Streams []*Stream
}

func (b *Backend) NewStream() gpu.Stream {
	s := &Stream{Stream: b.Backend.NewStream(), Live: map[gpu.Tensor]string{}}
	b.Streams = append(b.Streams, s)
	return s
}

// Last is the stream made last (a session's, right after NewSession).
func (b *Backend) Last() *Stream { return b.Streams[len(b.Streams)-1] }

// Stream counts its allocations and knows its live tensors by name.
type Stream struct {
	gpu.Stream
	Live   map[gpu.Tensor]string
	Allocs int
}

func (s *Stream) Alloc(name string, n int) (gpu.Tensor, error) {
	t, err := s.Stream.Alloc(name, n)
	if err == nil {
		s.Live[t] = name
		s.Allocs++
		s.fill(t)
	}
	return t, err
}

func (s *Stream) Free(t gpu.Tensor) {
	delete(s.Live, t)
	s.Stream.Free(t)
}

func (s *Stream) fill(t gpu.Tensor) {
	nan := make([]float32, t.Len())
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	s.Write(t, 0, nan)
}

// PoisonKept refills every live tensor but the KV cache with NaN, as if the
// buffers a session keeps between prefills held garbage.
func (s *Stream) PoisonKept() {
	for t, name := range s.Live {
		if !strings.Contains(name, ".attn.cache_") {
			s.fill(t)
		}
	}
}
