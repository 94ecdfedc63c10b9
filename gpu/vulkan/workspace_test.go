package vulkan_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/cpu"
	"github.com/stratalab/strata/gpu/vulkan"
)

// poisonBackend gives the engine Vulkan streams that fill new tensors with
// NaN instead of zeros and can refill the ones a session keeps, so that a
// kernel reading an element the prefill has not written shows up.
type poisonBackend struct {
	gpu.Backend
	streams []*poisonStream
}

func (b *poisonBackend) NewStream() gpu.Stream {
	s := &poisonStream{Stream: b.Backend.NewStream(), live: map[gpu.Tensor]string{}}
	b.streams = append(b.streams, s)
	return s
}

type poisonStream struct {
	gpu.Stream
	live   map[gpu.Tensor]string
	allocs int
}

func (s *poisonStream) Alloc(name string, n int) (gpu.Tensor, error) {
	t, err := s.Stream.Alloc(name, n)
	if err == nil {
		s.live[t] = name
		s.allocs++
		s.fill(t)
	}
	return t, err
}

func (s *poisonStream) Free(t gpu.Tensor) {
	delete(s.live, t)
	s.Stream.Free(t)
}

func (s *poisonStream) fill(t gpu.Tensor) {
	nan := make([]float32, t.Len())
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	s.Write(t, 0, nan)
}

// poisonKept refills every live tensor but the KV cache with NaN.
func (s *poisonStream) poisonKept() {
	for t, name := range s.live {
		if !strings.Contains(name, ".attn.cache_") {
			s.fill(t)
		}
	}
}

// A session's kept buffers go from prefill to prefill with NaN in them, and
// every prefill still matches the CPU backend: no kernel reads what the
// prefill has not written. A prefill like the last one allocates no buffer,
// not even a readback mirror.
func TestPrefillsReuseBuffersAndReadNothingStale(t *testing.T) {
	b := backend(t)
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 5)
	pb := &poisonBackend{Backend: b}
	ve, err := gpu.NewEngine(m, pb)
	require.NoError(t, err)
	vs, err := ve.NewSession(64)
	require.NoError(t, err)
	defer vs.Close()
	st := pb.streams[len(pb.streams)-1]
	ce, err := gpu.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	cs, err := ce.NewSession(64)
	require.NoError(t, err)
	defer cs.Close()

	all := gpu.Options{Capture: gpu.CaptureAll(), Logits: gpu.LogitsAll, Predict: true}
	requests := []struct {
		what   string
		tokens []int32
		cont   bool
		o      gpu.Options
	}{
		{"capture-all", testTokens, false, all},
		{"continued by 5, narrower (matrix-vector kernels)", testTokens[:5], true, gpu.Options{Capture: gpu.CaptureOf("blocks.*.attn.hook_pattern", "logits"), Logits: gpu.LogitsLast}},
		{"3 tokens, nothing captured (flash attention)", testTokens[:3], false, gpu.Options{Predict: true}},
		{"7 tokens, one layer, with an ablation", testTokens[2:9], false, gpu.Options{Capture: gpu.CaptureOf("blocks.1.*"), Logits: gpu.LogitsAll,
			Hooks: []gpu.Hook{gpu.AblateHead(1, 2)}}},
		{"capture-all again", testTokens, false, all},
	}
	ctx := context.Background()
	for _, q := range requests {
		if !q.cont {
			vs.Reset()
			cs.Reset()
		}
		st.poisonKept()
		got, err := vs.Prefill(ctx, q.tokens, q.o)
		require.NoError(t, err, q.what)
		want, err := cs.Prefill(ctx, q.tokens, q.o)
		require.NoError(t, err, q.what)
		requireSameTraceQuiet(t, got, want, q.what)
		if q.o.Predict {
			requirePredictions(t, got, want, m.Vocab)
		}
	}

	buffers, used := vulkan.DeviceMemory(b)
	allocs := st.allocs
	vs.Reset()
	_, err = vs.Prefill(ctx, testTokens, all)
	require.NoError(t, err)
	require.Equal(t, allocs, st.allocs, "the same request again allocates no tensor")
	requireMemoryBack(t, b, buffers, used, "after the same request again")
}
