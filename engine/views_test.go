package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/trace"
)

// On the CPU, kernels write captured points straight into the trace and
// what follows reads them from there (and scores and patterns come from the
// fused attention). Whatever subset of points is captured, and with hooks
// that change values along the way, each point must hold what a capture of
// everything holds, bit for bit, and the logits must not move: a point
// captured in place that a later kernel overwrote, or a kernel that read
// scratch the point was no longer written to, shows here.
func TestEveryCaptureSubsetRecordsWhatCaptureAllDoes(t *testing.T) {
	hookSets := [][]engine.Hook{
		nil,
		{engine.Scale("blocks.0.attn.hook_q", 0.5), engine.Scale("blocks.1.hook_mlp_out", 2),
			engine.Scale("blocks.0.ln2.hook_normalized", 1.5), engine.Scale("blocks.1.attn.hook_pattern", 0.75)},
	}
	for _, shape := range []string{"tiny-qwen3", "tiny-gpt2", "tiny-gemma2", "tiny-qwen3moe"} {
		m := genModel(t, shape, gguf.F32, 11)
		e := newEngine(t, m)
		names := trace.Points(&m.Config)
		r := rand.New(rand.NewPCG(7, uint64(len(shape))))
		for hs, hooks := range hookSets {
			all := prefill(t, e, testTokens, engine.Options{Capture: engine.CaptureAll(), Hooks: hooks, Logits: engine.LogitsAll})
			for trial := range 6 {
				var subset []string
				for _, n := range names {
					if r.IntN(3) == 0 {
						subset = append(subset, n)
					}
				}
				t.Run(fmt.Sprintf("%s/hooks=%d/%d", shape, hs, trial), func(t *testing.T) {
					tr := prefill(t, e, testTokens, engine.Options{Capture: engine.CaptureOf(subset...), Hooks: hooks, Logits: engine.LogitsAll})
					for _, n := range subset {
						if all.Tensor(n) == nil {
							continue // a point of no elements
						}
						enginetest.RequireBits(t, all.Tensor(n).Data, tr.Tensor(n).Data, n)
					}
					enginetest.RequireBits(t, all.Tensor("logits").Data, tr.Tensor("logits").Data, "logits")
				})
			}
		}
	}
}

// noViews is a backend whose streams bind no ranges of a tensor, as a
// device with a coarser alignment than SlotAlign would not.
type noViews struct{ backend.Backend }

func (b noViews) NewStream() backend.Stream { return noViewStream{b.Backend.NewStream()} }

// Capabilities offers nothing beyond the kernels: noViewStream has only Stream's methods.
func (noViews) Capabilities() backend.Capabilities { return backend.Capabilities{} }

type noViewStream struct{ backend.Stream }

func (noViewStream) View(backend.Tensor, int, int) backend.Tensor { return nil }

// Where a stream gives no view of a point's place, its kernel writes
// scratch and the point is copied into the trace: the same values, bit for
// bit. A layer capturing both its scores and its pattern has no scratch for
// them, so that is a named error there, not a crash; one of them alone
// has scratch, and is copied.
func TestPointsWithoutViewsAreCopied(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.F32, 12)
	var rest []string
	for _, n := range trace.Points(&m.Config) {
		if !strings.HasSuffix(n, "attn.hook_attn_scores") && !strings.HasSuffix(n, "attn.hook_pattern") {
			rest = append(rest, n)
		}
	}
	hooks := []engine.Hook{engine.Scale("blocks.0.attn.hook_q", 0.5), engine.Scale("blocks.1.hook_resid_pre", 2)}
	o := engine.Options{Capture: engine.CaptureOf(rest...), Hooks: hooks, Logits: engine.LogitsAll}
	want := prefill(t, newEngine(t, m), testTokens, o)
	e, err := engine.NewEngine(m, noViews{cpu.New(0)})
	require.NoError(t, err)
	got := prefill(t, e, testTokens, o)
	require.Equal(t, want.Names, got.Names)
	for _, n := range want.Names {
		enginetest.RequireBits(t, want.Tensor(n).Data, got.Tensor(n).Data, n)
	}

	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Capture: engine.CaptureOf("blocks.1.attn.hook_*")})
	require.ErrorContains(t, err, "blocks.1.attn.hook_")
	require.ErrorContains(t, err, "cannot be bound")
	pattern := engine.Options{Capture: engine.CaptureOf("blocks.1.attn.hook_pattern")}
	inPlace := prefill(t, newEngine(t, m), testTokens, pattern)
	tr, err := s.Prefill(context.Background(), testTokens, pattern)
	require.NoError(t, err, "the pattern alone goes through scratch")
	enginetest.RequireBits(t, inPlace.Tensor("blocks.1.attn.hook_pattern").Data, tr.Tensor("blocks.1.attn.hook_pattern").Data)
	require.NoError(t, s.Reset())
	tr, err = s.Prefill(context.Background(), testTokens, o)
	require.NoError(t, err, "the session works after the refusal")
	enginetest.RequireBits(t, want.Tensor("logits").Data, tr.Tensor("logits").Data)
}
