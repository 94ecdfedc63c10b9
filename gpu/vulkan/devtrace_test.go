package vulkan_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/internal/gputest"
	"github.com/stratalab/strata/gpu/trace"
	"github.com/stratalab/strata/gpu/vulkan"
)

// A trace made on the device is read when asked for. Read lazily, a capture
// at a time, a slice of rows or one head at a time, in random order, it
// equals the same prefill's trace read eagerly in one batch, bit for bit,
// for random capture plans. Reads pass through buffers of a few KiB here,
// so that captures cross many chunk boundaries.
func TestDeviceTraceReadLazilyEqualsEager(t *testing.T) {
	b := backend(t)
	defer vulkan.SetReadChunk(vulkan.SetReadChunk(12 << 10))
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 17)
	e, err := gpu.NewEngine(m, b)
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	r := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	for i := range 30 {
		c := gputest.RandomCapture(r, m.Layers)
		if i == 0 {
			c = gpu.CaptureAll()
		}
		tokens := make([]int32, 1+r.IntN(12))
		for j := range tokens {
			tokens[j] = int32(r.IntN(m.Vocab))
		}
		o := gpu.Options{Capture: c, Logits: gpu.LogitsAll}
		require.NoError(t, s.Reset())
		eager, err := s.Prefill(ctx, tokens, o)
		require.NoError(t, err)
		require.NoError(t, eager.Load())
		require.NoError(t, s.Reset())
		lazy, err := s.Prefill(ctx, tokens, o)
		require.NoError(t, err)
		require.Equal(t, eager.Names, lazy.Names)

		what := func(name string) string { return name + " with capture " + strings.Join(c.Globs, ",") }
		for _, k := range r.Perm(len(eager.Names)) {
			name := eager.Names[k]
			want := eager.Tensor(name)
			require.Equal(t, want.Shape, lazy.Shape(name), "the shape is known before any read: %s", what(name))
			if r.IntN(2) == 0 && want.Shape[0] > 0 {
				from := r.IntN(want.Shape[0])
				to := from + 1 + r.IntN(want.Shape[0]-from)
				rows, err := lazy.Rows(name, from, to)
				require.NoError(t, err, what(name))
				row := len(want.Data) / want.Shape[0]
				requireBits(t, rows.Data, want.Data[from*row:to*row], "rows %d..%d of %s", from, to, what(name))
				if strings.HasSuffix(name, "attn.hook_pattern") {
					head := r.IntN(want.Shape[0])
					p, err := lazy.Pattern(trace.LayerOf(name), head)
					require.NoError(t, err)
					requireBits(t, p.Data, want.Data[head*row:(head+1)*row], "head %d of %s", head, what(name))
				}
			}
			got, err := lazy.Get(name)
			require.NoError(t, err, what(name))
			requireBits(t, got.Data, want.Data, "%s", what(name))
		}
		require.NoError(t, lazy.Close())
		require.NoError(t, eager.Close())
	}
}

func requireBits(t *testing.T, got, want []float32, format string, args ...any) {
	t.Helper()
	require.Len(t, got, len(want), append([]any{format}, args...)...)
	for i := range want {
		if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s: [%d] is %g, want %g", sprintf(format, args...), i, got[i], want[i])
		}
	}
}

// A device trace owns its memory: several live in one session; Close gives
// the memory back and keeps what was read; a capture not read before its
// trace, session or backend closed is a named error.
func TestDeviceTraceOwnsItsMemory(t *testing.T) {
	b, err := vulkan.Open(vulkan.Options{})
	if errors.Is(err, vulkan.ErrNoDevice) {
		t.Skip(err)
	}
	require.NoError(t, err)
	defer b.Close()
	m := genModel(t, "tiny-llama", gguf.F32, 3)
	e, err := gpu.NewEngine(m, b)
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	ctx := context.Background()
	o := gpu.Options{Capture: gpu.CaptureOf("blocks.*.hook_resid_post", "blocks.0.attn.hook_pattern"), Logits: gpu.LogitsAll}
	first, err := s.Prefill(ctx, testTokens, o)
	require.NoError(t, err)
	require.NoError(t, first.Load()) // the session's reader now exists
	buffers, used := vulkan.DeviceMemory(b)

	require.NoError(t, s.Reset())
	second, err := s.Prefill(ctx, testTokens, o)
	require.NoError(t, err)
	require.NoError(t, s.Reset())
	third, err := s.Prefill(ctx, testTokens, o)
	require.NoError(t, err)
	n, bytes := vulkan.DeviceMemory(b)
	require.Greater(t, n, buffers, "two more traces hold device memory")
	require.Greater(t, bytes, used)

	name := "blocks.1.hook_resid_post"
	require.Equal(t, first.Tensor(name).Data, second.Tensor(name).Data, "a trace of the session is readable after later prefills")
	require.NoError(t, second.Close())
	require.NoError(t, second.Close(), "closing twice does nothing")
	require.NotNil(t, second.Tensor(name), "what was read stays readable")
	_, err = second.Get("blocks.0.hook_resid_post")
	require.ErrorIs(t, err, trace.ErrClosed)
	require.ErrorContains(t, err, "trace: reading blocks.0.hook_resid_post: trace: its device memory was freed")

	s.Close()
	_, err = third.Get(name)
	require.ErrorIs(t, err, trace.ErrClosed, "the session's close frees its traces")
	n, bytes = vulkan.DeviceMemory(b)
	require.Less(t, n, buffers, "the session's buffers and traces are back")
	require.Less(t, bytes, used)

	s2, err := e.NewSession(0)
	require.NoError(t, err)
	fourth, err := s2.Prefill(ctx, testTokens, o)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	_, err = fourth.Get(name)
	require.ErrorIs(t, err, trace.ErrClosed, "the backend's close frees its traces")
	require.ErrorContains(t, err, "vulkan: the backend is closed")
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
