package vulkan_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/trace"
)

// A trace made on the device is read when asked for. Read lazily, a capture
// at a time, a slice of rows or one head at a time, in random order, it
// equals the same prefill's trace read eagerly in one batch, bit for bit,
// for random capture plans. Reads pass through buffers of a few KiB here,
// so that captures cross many chunk boundaries.
func TestDeviceTraceReadLazilyEqualsEager(t *testing.T) {
	b, tu := vulkan.Tuned(testBackend(t))
	tu.ReadBytes = 12 << 10
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 17)
	e, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	r := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	for i := range 30 {
		c := enginetest.RandomCapture(r, m.Layers)
		if i == 0 {
			c = engine.CaptureAll()
		}
		tokens := make([]int32, 1+r.IntN(12))
		for j := range tokens {
			tokens[j] = int32(r.IntN(m.Vocab))
		}
		o := engine.Options{Capture: c, Logits: engine.LogitsAll}
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
				enginetest.RequireBits(t, want.Data[from*row:to*row], rows.Data, "rows %d..%d of %s", from, to, what(name))
				if strings.HasSuffix(name, "attn.hook_pattern") {
					head := r.IntN(want.Shape[0])
					p, err := lazy.Pattern(trace.LayerOf(name), head)
					require.NoError(t, err)
					enginetest.RequireBits(t, want.Data[head*row:(head+1)*row], p.Data, "head %d of %s", head, what(name))
				}
			}
			got, err := lazy.Get(name)
			require.NoError(t, err, what(name))
			enginetest.RequireBits(t, want.Data, got.Data, "%s", what(name))
		}
		require.NoError(t, lazy.Close())
		require.NoError(t, eager.Close())
	}
}

// A device trace owns its memory: several live in one session; Close gives
// the memory back and keeps what Get returned; a capture not read before its
// trace, session or backend closed is a named error.
func TestDeviceTraceOwnsItsMemory(t *testing.T) {
	b, err := vulkan.Open(vulkan.Options{})
	if errors.Is(err, vulkan.ErrNoDevice) {
		t.Skip(err)
	}
	require.NoError(t, err)
	defer b.Close()
	m := genModel(t, "tiny-llama", gguf.F32, 3)
	e, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	ctx := context.Background()
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.0.attn.hook_pattern"), Logits: engine.LogitsAll}
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
	enginetest.RequireBits(t, first.Tensor(name).Data, second.Tensor(name).Data, "a trace of the session is readable after later prefills")
	require.NoError(t, second.Close())
	require.NoError(t, second.Close(), "closing twice does nothing")
	require.NotNil(t, second.Tensor(name), "what was read stays readable")
	_, err = second.Get("blocks.0.hook_resid_post")
	require.ErrorIs(t, err, trace.ErrClosed)
	require.ErrorContains(t, err, "trace: reading blocks.0.hook_resid_post: its memory was freed")

	// The next prefill of the same layout takes the closed trace's arenas
	// instead of allocating, and what it captures is its own.
	n, _ = vulkan.DeviceMemory(b)
	require.NoError(t, s.Reset())
	other := []int32{testTokens[1], testTokens[0], testTokens[3], testTokens[2]}
	fifth, err := s.Prefill(ctx, append(other, testTokens[4:]...), o)
	require.NoError(t, err)
	reused, _ := vulkan.DeviceMemory(b)
	require.Equal(t, n, reused, "the closed trace's arenas are reused")
	require.NoError(t, fifth.Load())
	require.NotEqual(t, first.Tensor(name).Data, fifth.Tensor(name).Data, "another prompt, another capture")
	require.NoError(t, fifth.Close())

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

// The analyses notebooks reach for first work on a trace still on the
// device, reading only what they reduce to, and agree with the CPU
// backend's: the logit lens and a token's lens (norm, unembedding, softmax,
// argmax and rank on the device) and the three head scores.
func TestAnalysesOfADeviceTraceMatchCPU(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.F32, 23)
	ce, ve := engines(t, m)
	tokens := append(slices.Clone(testTokens[:7]), testTokens[:7]...) // two copies: induction is defined
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.*.attn.hook_pattern"), Logits: engine.LogitsAll}
	want := prefill(t, ce, tokens, o)
	s, err := ve.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	got, err := s.Prefill(context.Background(), tokens, o)
	require.NoError(t, err)
	defer got.Close()

	require.NoError(t, ce.LogitLens(want))
	require.NoError(t, ve.LogitLens(got))
	require.Equal(t, want.Lens.Token, got.Lens.Token)
	for l := range want.Lens.Prob {
		requireClose(t, got.Lens.Prob[l], want.Lens.Prob[l], pointTol, fmt.Sprintf("lens probability at layer %d", l))
	}
	target := want.Lens.Token[m.Layers-1][len(tokens)-1]
	wl, err := ce.TokenLens(want, target)
	require.NoError(t, err)
	gl, err := ve.TokenLens(got, target)
	require.NoError(t, err)
	require.Equal(t, wl.Rank, gl.Rank)
	require.Contains(t, gl.Rank[m.Layers-1], 0, "the target is the top token where the lens says so")
	for l := range wl.Prob {
		for p := range wl.Prob[l] {
			require.InDelta(t, wl.Prob[l][p], gl.Prob[l][p], pointTol, "token lens at layer %d position %d", l, p)
		}
	}
	wr, err := ce.LensLogits(want, 3)
	require.NoError(t, err)
	gr, err := ve.LensLogits(got, 3)
	require.NoError(t, err)
	for l := range wr {
		requireClose(t, gr[l], wr[l], pointTol, fmt.Sprintf("lens logits at layer %d position 3", l))
	}
	for l := range m.Layers {
		name := trace.LayerPoint(l, "hook_resid_post")
		w, err := want.RowNorms(name)
		require.NoError(t, err)
		g, err := got.RowNorms(name) // reduced on the device: only T floats come back
		require.NoError(t, err)
		require.Len(t, g, len(tokens))
		for p := range w {
			require.InEpsilon(t, w[p], g[p], pointTol, "norm of %s at position %d", name, p)
		}
	}
	for _, kind := range []trace.HeadKind{trace.Induction, trace.PrevToken, trace.DuplicateToken} {
		w, err := trace.HeadScores(want, kind)
		require.NoError(t, err)
		g, err := trace.HeadScores(got, kind)
		require.NoError(t, err)
		for l := range w {
			for h := range w[l] {
				require.InDelta(t, w[l][h], g[l][h], pointTol, "%s score of L%dH%d", kind, l, h)
			}
		}
	}
}

// A sweep that reads each trace whole reads into the host memory of the
// trace before it: Close gives back what Get did not hand out, the
// session's next trace reads into it (allocating next to nothing), and what
// that trace reads is its own, bit for bit as a fresh read; what Get handed
// out is left alone.
func TestClosedDeviceTracesLendTheirHostMemory(t *testing.T) {
	b := testBackend(t)
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 17)
	e, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	ctx := context.Background()
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	other := append([]int32{testTokens[2], testTokens[0], testTokens[1]}, testTokens[3:]...)

	ref, err := e.NewSession(0)
	require.NoError(t, err)
	want, err := ref.Prefill(ctx, other, o)
	require.NoError(t, err)
	require.NoError(t, want.Load())
	ref.Close()

	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	allocated := func(fn func() error) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		require.NoError(t, fn())
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	first, err := s.Prefill(ctx, testTokens, o)
	require.NoError(t, err)
	var bytes uint64
	for _, name := range first.Names {
		bytes += 4 * uint64(len(want.Tensor(name).Data))
	}
	require.GreaterOrEqual(t, allocated(func() error { return first.Load() }), bytes, "a first read makes its memory")
	kept, err := first.Get("logits")
	require.NoError(t, err)
	keptValues := slices.Clone(kept.Data)
	require.NoError(t, first.Close())
	_, err = first.Get("hook_embed")
	require.ErrorIs(t, err, trace.ErrClosed, "what Close gave back is not readable")

	require.NoError(t, s.Reset())
	second, err := s.Prefill(ctx, other, o)
	require.NoError(t, err)
	logits := 4 * uint64(len(kept.Data))
	require.Less(t, allocated(func() error { return second.Load() }), logits+bytes/10,
		"the next read takes the memory given back (of %d bytes, the logits Get handed out are made anew)", bytes)
	for _, name := range want.Names {
		enginetest.RequireBits(t, want.Tensor(name).Data, second.Tensor(name).Data, "%s read into lent memory", name)
	}
	enginetest.RequireBits(t, keptValues, kept.Data, "what Get handed out is left alone")
	require.NoError(t, second.Close())

	// FreeSpare lets it all go: the closed traces' device arenas now, and
	// the next read makes its memory again.
	buffers, _ := vulkan.DeviceMemory(b)
	s.FreeSpare()
	fewer, _ := vulkan.DeviceMemory(b)
	require.Less(t, fewer, buffers, "the spare arenas are freed")
	require.NoError(t, s.Reset())
	third, err := s.Prefill(ctx, other, o)
	require.NoError(t, err)
	require.GreaterOrEqual(t, allocated(func() error { return third.Load() }), bytes)
	enginetest.RequireBits(t, want.Tensor("logits").Data, third.Tensor("logits").Data)
}

// A sweep's prefills reuse their closed traces' arenas (and a layer its
// scratch), whose masked attention entries a capture of the same layout
// left there: where the capturing flash attention runs (cooperative
// matrices), it does not write them again. Every capture of such a
// prefill equals a fresh session's, bit for bit: a plain prefill, one with
// sliding windows (tiny-gemma3), and a continued one (another layout from
// position 4); 100 tokens, so that workgroups of queries have keys no
// block of theirs takes (the tails skipped); and the pattern alone, whose
// scratch of scores layers of different windows share.
func TestReusedArenasCaptureAsFreshOnes(t *testing.T) {
	b := testBackend(t)
	var kept atomic.Int64
	vulkan.OnMasksKept(b, func() { kept.Add(1) })
	defer func() {
		vulkan.OnMasksKept(b, nil)
		if vulkan.Coop(b) {
			require.Positive(t, kept.Load(), "masks were held")
		}
	}()
	long := make([]int32, 100)
	for i := range long {
		long[i] = int32(i*37%500 + 3)
	}
	for _, shape := range []string{"tiny-qwen3", "tiny-gemma3"} {
		t.Run(shape, func(t *testing.T) {
			m := genModel(t, shape, gguf.F16, 21)
			e, err := engine.NewEngine(m, b)
			require.NoError(t, err)
			ctx := context.Background()
			o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
			fresh := func(tokens []int32, pos0 int, o engine.Options) *trace.Trace {
				s, err := e.NewSession(0)
				require.NoError(t, err)
				defer s.Close()
				if pos0 > 0 {
					_, err := s.Prefill(ctx, testTokens[:pos0], engine.Options{})
					require.NoError(t, err)
				}
				tr, err := s.Prefill(ctx, tokens, o)
				require.NoError(t, err)
				require.NoError(t, tr.Load())
				return tr
			}
			s, err := e.NewSession(0)
			require.NoError(t, err)
			defer s.Close()
			sweep := func(tokens []int32, pos0 int, o engine.Options) *trace.Trace {
				require.NoError(t, s.Reset())
				if pos0 > 0 {
					_, err := s.Prefill(ctx, testTokens[:pos0], engine.Options{})
					require.NoError(t, err)
				}
				tr, err := s.Prefill(ctx, tokens, o)
				require.NoError(t, err)
				return tr
			}
			other := append([]int32{testTokens[3], testTokens[1]}, testTokens[2:]...)
			longOther := append([]int32{long[5]}, long[1:]...)
			patterns := engine.Options{Capture: engine.CaptureOf("blocks.*.attn.hook_pattern")}
			for i, c := range []struct {
				tokens []int32
				pos0   int
				o      engine.Options
			}{{testTokens, 0, o}, {other, 0, o}, {testTokens, 0, o}, {other[4:], 4, o}, {testTokens[4:], 4, o},
				{long[4:], 4, o}, {longOther[4:], 4, o}, {long, 0, patterns}, {longOther, 0, patterns}} {
				want := fresh(c.tokens, c.pos0, c.o)
				got := sweep(c.tokens, c.pos0, c.o)
				for _, name := range want.Names {
					enginetest.RequireBits(t, want.Tensor(name).Data, got.Tensor(name).Data, "prefill %d of the sweep: %s", i, name)
				}
				require.NoError(t, got.Close())
			}
		})
	}
}
