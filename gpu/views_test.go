package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
)

// On the CPU, kernels write captured points straight into the trace and
// what follows reads them from there (and scores and patterns come from the
// fused attention). Whatever subset of points is captured, and with hooks
// that change values along the way, each point must hold what a capture of
// everything holds, bit for bit, and the logits must not move: a point
// captured in place that a later kernel overwrote, or a kernel that read
// scratch the point was no longer written to, shows here.
func TestEveryCaptureSubsetRecordsWhatCaptureAllDoes(t *testing.T) {
	hookSets := [][]gpu.Hook{
		nil,
		{gpu.Scale("blocks.0.attn.hook_q", 0.5), gpu.Scale("blocks.1.hook_mlp_out", 2),
			gpu.Scale("blocks.0.ln2.hook_normalized", 1.5), gpu.Scale("blocks.1.attn.hook_pattern", 0.75)},
	}
	for _, shape := range []string{"tiny-qwen3", "tiny-gpt2", "tiny-gemma2", "tiny-qwen3moe"} {
		m := genModel(t, shape, gguf.F32, 11)
		e := newEngine(t, m)
		names := gpu.Points(&m.Config)
		r := rand.New(rand.NewPCG(7, uint64(len(shape))))
		for hs, hooks := range hookSets {
			all := prefill(t, e, testTokens, gpu.Options{Capture: gpu.CaptureAll(), Hooks: hooks, Logits: gpu.LogitsAll})
			for trial := range 6 {
				var subset []string
				for _, n := range names {
					if r.IntN(3) == 0 {
						subset = append(subset, n)
					}
				}
				t.Run(fmt.Sprintf("%s/hooks=%d/%d", shape, hs, trial), func(t *testing.T) {
					tr := prefill(t, e, testTokens, gpu.Options{Capture: gpu.CaptureOf(subset...), Hooks: hooks, Logits: gpu.LogitsAll})
					for _, n := range subset {
						if all.Tensor(n) == nil {
							continue // a point of no elements
						}
						require.Equal(t, all.Tensor(n).Data, tr.Tensor(n).Data, n)
					}
					require.Equal(t, all.Tensor("logits").Data, tr.Tensor("logits").Data, "logits")
				})
			}
		}
	}
}
