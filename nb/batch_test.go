package nb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// Through nb, a batch of text and ids gives what Prefill gives each prompt,
// bit for bit on the CPU, steering and attention patterns included.
func TestPrefillBatchEqualsPrefill(t *testing.T) {
	m := cpuModel(t)
	prompts := []any{"if err != nil {\n\treturn", []int{1, 2, 3}, "x :=", []int32{5}}
	vec := make([]float32, m.Engine().Model.DModel)
	vec[3] = 2
	opts := []nb.PrefillOption{nb.Capture("blocks.*.hook_resid_post", "blocks.*.attn.hook_pattern", "ln_final.hook_normalized"), nb.AllLogits(), nb.Steer(1, vec, 3)}
	got := m.PrefillBatch(prompts, opts...)
	require.Len(t, got, len(prompts))
	for i, p := range prompts {
		want := m.Prefill(p, opts...)
		require.Equal(t, want.Tokens, got[i].Tokens)
		require.Equal(t, want.Predicted, got[i].Predicted)
		require.Equal(t, want.Names, got[i].Names)
		for _, name := range want.Names {
			enginetest.RequireBits(t, nb.Must(want.Get(name)).Data, nb.Must(got[i].Get(name)).Data, "prompt %d %s", i, name)
		}
		want.Close()
		got[i].Close()
	}
}

func TestPrefillBatchRefusesWhatItCannotDo(t *testing.T) {
	m := cpuModel(t)
	_, err := m.TryPrefillBatch("one prompt")
	require.EqualError(t, err, "nb.PrefillBatch: a batch is a []string, []any, [][]int32 or [][]int of prompts, not string")
	_, err = m.TryPrefillBatch([]string{})
	require.EqualError(t, err, "nb.PrefillBatch: the batch has no prompts")
	_, err = m.TryPrefillBatch([]any{"a", 3.5})
	require.EqualError(t, err, "nb.PrefillBatch: prompt 1: nb: a prompt is a string or token ids ([]int32 or []int), not float64")
	_, err = m.TryPrefillBatch([]string{"a"}, nb.Continue())
	require.ErrorContains(t, err, "Continue does not apply to a batch")
}

func TestMeanOverKeepsEachPromptsValue(t *testing.T) {
	trs := []*trace.Trace{{Tokens: []int32{1}}, {Tokens: []int32{1, 2, 3}}}
	n := func(tr *trace.Trace) float64 { return float64(len(tr.Tokens)) }
	b := nb.MeanOver(trs, n)
	require.Equal(t, []float64{1, 3}, b.PerPrompt)
	require.Equal(t, 2.0, b.Mean)
	require.Equal(t, "mean 2 over 2 prompts", b.String())
	twice := func(tr *trace.Trace) float64 { return 2 * n(tr) }
	require.Equal(t, []float64{1, 6}, nb.MeanOver(trs, n, twice).PerPrompt, "one metric per trace")
	require.PanicsWithError(t, "nb.MeanOver: 3 metrics for 2 traces: give one for all, or one per trace", func() { nb.MeanOver(trs, n, n, n) })
	require.PanicsWithError(t, "nb.MeanOver: no traces", func() { nb.MeanOver(nil, n) })
}
