package cpu_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// A prefill gives the same bits on any number of threads: products are cut
// into more, smaller groups and into parts of x as threads grow (gemmGroups),
// row-wise kernels into chunks whose bounds move with the thread count, and
// each chunk goes to whichever thread is free. T=70 makes 32-row blocks of x
// and a 16-row one, int8 tiles of 6 with a ragged end, and attention blocks of
// unequal spans. 3 and 5 threads cut things where powers of two do not; 8 on
// a machine of fewer cores has threads waiting on busy ones.
func TestPrefillIsTheSameOnAnyThreads(t *testing.T) {
	tokens := make([]int32, 70)
	for _, typ := range []gguf.Type{gguf.F32, gguf.Q8_0, gguf.Q4_K} {
		m, err := synth.Random(synth.Shapes["tiny-qwen3"], typ, 3)
		require.NoError(t, err)
		for i := range tokens {
			tokens[i] = int32((i*131 + 7) % m.Vocab)
		}
		for _, prec := range []engine.Precision{engine.PrecisionExact, engine.PrecisionFast} {
			for _, capture := range []bool{false, true} {
				o := engine.Options{Precision: prec, Logits: engine.LogitsAll}
				if capture {
					o.Capture = engine.CaptureAll()
				}
				name := fmt.Sprintf("%v/%v/capture=%v", typ, prec, capture)
				t.Run(name, func(t *testing.T) {
					run := func(threads int) *trace.Trace {
						e, err := engine.NewEngine(m, cpu.New(threads))
						require.NoError(t, err)
						s, err := e.NewSession(len(tokens))
						require.NoError(t, err)
						defer s.Close()
						tr, err := s.Prefill(context.Background(), tokens, o)
						require.NoError(t, err)
						return tr
					}
					want := run(1)
					require.NotEmpty(t, want.Names)
					for _, threads := range []int{2, 3, 5, 8} {
						got := run(threads)
						require.Equal(t, want.Names, got.Names)
						for _, n := range want.Names {
							enginetest.RequireBits(t, want.Tensor(n).Data, got.Tensor(n).Data, "%s on %d threads", n, threads)
						}
					}
				})
			}
		}
	}
}

func TestNameCountsThreads(t *testing.T) {
	require.Equal(t, "cpu (1 thread)", cpu.New(1).Name())
	require.Equal(t, "cpu (3 threads)", cpu.New(3).Name())
}
