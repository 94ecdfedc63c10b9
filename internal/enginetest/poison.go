// Package enginetest holds what the engine's and the backends' tests share.
package enginetest

import (
	"math"
	"strings"

	"github.com/stratalab/strata/backend"
)

// PoisonBackend wraps a backend whose streams fill new tensors with NaN
// instead of zeros and can refill the ones a session keeps, so that a kernel
// reading an element the prefill has not written shows up in the results.
// The streams also count allocations and live tensors.
type PoisonBackend struct {
	backend.Backend
	Streams []*PoisonStream
}

func (b *PoisonBackend) NewStream() backend.Stream {
	s := &PoisonStream{Stream: b.Backend.NewStream(), Live: map[backend.Tensor]string{}}
	b.Streams = append(b.Streams, s)
	return s
}

// Capabilities offers nothing beyond the kernels: a PoisonStream has only
// Stream's methods, so its tensors, arenas included, are all made by Alloc
// and poisoned.
func (b *PoisonBackend) Capabilities() backend.Capabilities { return backend.Capabilities{} }

// Last is the stream made last (a session's, right after NewSession).
func (b *PoisonBackend) Last() *PoisonStream { return b.Streams[len(b.Streams)-1] }

// PoisonStream counts its allocations and knows its live tensors by name.
type PoisonStream struct {
	backend.Stream
	Live   map[backend.Tensor]string
	Allocs int
}

func (s *PoisonStream) Alloc(name string, n int) (backend.Tensor, error) {
	t, err := s.Stream.Alloc(name, n)
	if err == nil {
		s.Live[t] = name
		s.Allocs++
		s.fill(t)
	}
	return t, err
}

func (s *PoisonStream) Free(t backend.Tensor) {
	delete(s.Live, t)
	s.Stream.Free(t)
}

func (s *PoisonStream) fill(t backend.Tensor) {
	nan := make([]float32, t.Len())
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	s.Write(t, 0, nan)
}

// PoisonKept refills every live tensor but the KV cache with NaN, as if the
// buffers a session keeps between prefills held garbage.
func (s *PoisonStream) PoisonKept() {
	for t, name := range s.Live {
		if !strings.Contains(name, ".attn.cache_") {
			s.fill(t)
		}
	}
}
