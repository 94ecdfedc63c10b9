package cpu_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// collect runs the collector until the backend has had at least want
// arenas back in all (finalizers run after a cycle, on their own goroutine).
func collect(t *testing.T, c *cpu.ArenaCounts, want int64) {
	t.Helper()
	for range 200 {
		if c.Returned.Load() >= want {
			return
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the collector gave back %d capture arenas, want %d", c.Returned.Load(), want)
}

// tinySession is a session of 128 positions on a random tiny-qwen3, on a
// CPU backend of its own whose arenas are counted.
func tinySession(t *testing.T) (*cpu.Backend, *cpu.ArenaCounts, *engine.Session) {
	m, err := synth.Random(synth.Shapes["tiny-qwen3"], gguf.F32, 5)
	require.NoError(t, err)
	b := cpu.New(0)
	c := cpu.CountArenas(b)
	e, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	s, err := e.NewSession(128)
	require.NoError(t, err)
	return b, c, s
}

// A capture arena whose trace was collected is a later prefill's arena, its
// memory not cleared (here filled with NaN): every element of a trace made
// in it must be what the same prefill gives in new memory, bit for bit,
// whatever points are captured, for architectures with windows, GQA and
// experts, with hooks, and for a prefill that continues an earlier one
// (its keys start past position 0). An element a run leaves unwritten
// shows as NaN.
func TestReusedArenasGiveTheTraceNewMemoryGives(t *testing.T) {
	cpu.PoisonReusedArenas(true)
	defer cpu.PoisonReusedArenas(false)
	hooks := []engine.Hook{engine.Scale("blocks.0.attn.hook_q", 0.5), engine.Scale("blocks.1.attn.hook_pattern", 0.75)}
	for _, shape := range []string{"tiny-qwen3", "tiny-gemma2", "tiny-qwen3moe", "tiny-gpt2"} {
		m, err := synth.Random(synth.Shapes[shape], gguf.F32, 5)
		require.NoError(t, err)
		r := rand.New(rand.NewPCG(3, uint64(len(shape))))
		tokens, other := make([]int32, 96), make([]int32, 96)
		for i := range tokens {
			tokens[i], other[i] = int32(r.IntN(m.Vocab)), int32(r.IntN(m.Vocab))
		}
		names := trace.Points(&m.Config)
		for trial := range 5 {
			capture := engine.CaptureAll()
			if trial > 0 {
				var subset []string
				for _, n := range names {
					if r.IntN(2) == 0 {
						subset = append(subset, n)
					}
				}
				capture = engine.CaptureOf(subset...)
			}
			o := engine.Options{Capture: capture, Hooks: hooks[:trial%2*2], Logits: engine.LogitsAll}
			t.Run(fmt.Sprintf("%s/%d", shape, trial), func(t *testing.T) {
				b := cpu.New(0)
				c := cpu.CountArenas(b)
				e, err := engine.NewEngine(m, b)
				require.NoError(t, err)
				s, err := e.NewSession(len(tokens))
				require.NoError(t, err)
				defer s.Close()
				const first = 40 // trial 4 prefills the tokens after these
				run := func(tokens []int32) *trace.Trace {
					s.Reset()
					if trial == 4 {
						_, err := s.Prefill(context.Background(), tokens[:first], engine.Options{})
						require.NoError(t, err)
						tokens = tokens[first:]
					}
					tr, err := s.Prefill(context.Background(), tokens, o)
					require.NoError(t, err)
					return tr
				}
				want := run(tokens) // new memory, kept
				run(other)          // new memory, its trace dropped at once
				collect(t, c, 1)
				got := run(tokens)
				require.Positive(t, c.Reused.Load(), "no arena was reused")
				require.Equal(t, want.Names, got.Names)
				for _, n := range want.Names {
					enginetest.RequireBits(t, want.Tensor(n).Data, got.Tensor(n).Data, n)
				}
			})
		}
	}
}

// A slice of a trace that a caller keeps keeps its whole arena: the
// collector never gives it back while the slice is alive, so later
// prefills never write over it.
func TestAKeptSliceOfATraceIsNeverReused(t *testing.T) {
	_, c, s := tinySession(t)
	defer s.Close()
	prefill := func(seed int32) []float32 {
		tokens := make([]int32, 128)
		for i := range tokens {
			tokens[i] = (seed + int32(i)*31) % int32(synth.Shapes["tiny-qwen3"].Vocab)
		}
		s.Reset()
		tr, err := s.Prefill(context.Background(), tokens, engine.Options{Capture: engine.CaptureAll()})
		require.NoError(t, err)
		return tr.Tensor("blocks.1.attn.hook_pattern").Data[100:200]
	}
	kept := prefill(1)
	want := slices.Clone(kept)
	for seed := range int32(6) {
		prefill(seed + 2)
		collect(t, c, c.Returned.Load()+1)
	}
	require.Positive(t, c.Reused.Load(), "later prefills reused collected arenas")
	require.Equal(t, want, kept, "the kept slice was written over")
}

// Arenas no prefill takes are let go within a few collector cycles, and a
// backend nothing refers to any more is collected with its arenas.
func TestUntakenArenasAreLetGo(t *testing.T) {
	b, c, s := tinySession(t)
	tokens := make([]int32, 128)
	for range 3 {
		s.Reset()
		_, err := s.Prefill(context.Background(), tokens, engine.Options{Capture: engine.CaptureAll()})
		require.NoError(t, err)
	}
	collect(t, c, c.Returned.Load()+1)
	require.Positive(t, cpu.ArenasWaiting(b))
	for range 3 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	require.Zero(t, cpu.ArenasWaiting(b), "arenas still held after three cycles")

	s.Close()
	collected := make(chan struct{})
	runtime.AddCleanup(b, func(ch chan struct{}) { close(ch) }, collected)
	b, s = nil, nil
	for range 100 {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatal("the backend was never collected")
}

// A closed trace's memory, never handed out, is the next prefill's at
// once, and its masked attention entries are not written again where they
// hold what that prefill puts there: the trace made in it must be what new
// memory gives, bit for bit, after a prefill of another layout of the same
// size (48 queries of 192 keys against 96 of 96), after one whose hooks
// wrote over the scores and patterns, and after a plain one, whose masked
// entries are then kept (for a sliding window too, tiny-gemma2) where the
// capture is fused into attention (AVX-512; elsewhere every entry is
// written each prefill).
func TestClosedTracesMemoryGivesTheTraceNewMemoryGives(t *testing.T) {
	garbage := engine.Hook{Point: "blocks.[01].attn.hook_[ap]*", Host: func(_ string, _ []int, x []float32) error {
		for i := range x {
			x[i] = 7
		}
		return nil
	}}
	for _, shape := range []string{"tiny-qwen3", "tiny-gemma2"} {
		t.Run(shape, func(t *testing.T) {
			m, err := synth.Random(synth.Shapes[shape], gguf.F32, 5)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(4, uint64(len(shape))))
			tokens := make([]int32, 192)
			for i := range tokens {
				tokens[i] = int32(r.IntN(m.Vocab))
			}
			session := func(b *cpu.Backend) *engine.Session {
				e, err := engine.NewEngine(m, b)
				require.NoError(t, err)
				s, err := e.NewSession(len(tokens))
				require.NoError(t, err)
				return s
			}
			all := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
			prefill := func(s *engine.Session, skip, n int, o engine.Options) *trace.Trace {
				s.Reset()
				if skip > 0 {
					_, err := s.Prefill(context.Background(), tokens[:skip], engine.Options{})
					require.NoError(t, err)
				}
				tr, err := s.Prefill(context.Background(), tokens[skip:skip+n], o)
				require.NoError(t, err)
				return tr
			}
			fresh := session(cpu.New(0))
			defer fresh.Close()
			want := prefill(fresh, 0, 96, all)

			b := cpu.New(0)
			c := cpu.CountArenas(b)
			s := session(b)
			defer s.Close()
			hooked := all
			hooked.Hooks = []engine.Hook{garbage}
			for _, before := range []struct {
				name      string
				skip, n   int
				o         engine.Options
				keepsMask bool
			}{
				{"another layout", 144, 48, all, false},
				{"hooks", 0, 96, hooked, false},
				{"plain", 0, 96, all, true},
			} {
				require.NoError(t, prefill(s, before.skip, before.n, before.o).Close())
				recycled, kept := c.Recycled.Load(), c.MasksKept.Load()
				got := prefill(s, 0, 96, all)
				require.Equal(t, want.Names, got.Names)
				for _, n := range want.Names {
					enginetest.RequireBits(t, want.Tensor(n).Data, got.Tensor(n).Data, "%s, after %s", n, before.name)
				}
				require.Positive(t, recycled, before.name)
				if before.keepsMask && cpu.FusedCapture() {
					require.Greater(t, c.MasksKept.Load(), kept, "no masked entries were kept after %s", before.name)
				} else if before.name == "another layout" {
					require.Equal(t, kept, c.MasksKept.Load(), "masked entries of another layout were kept")
				}
				require.NoError(t, got.Close())
			}
		})
	}
}
