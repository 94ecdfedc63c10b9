package nb

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/trace"
)

// Issue 47.4: nb had no host-memory check: under ulimit -v 6GB a long
// prefill died with "fatal error: out of memory". On the CPU a call whose
// estimated buffers do not fit what is left is refused, with the numbers,
// and the model works after.
func TestCallsThatDoNotFitTheHostAreRefused(t *testing.T) {
	m := Open("", Backend("cpu"))
	defer m.Close()
	want := m.Prefill("func main() {").Predicted
	defer func(f func() (int64, error)) { hostAvailable = f }(hostAvailable)
	hostAvailable = func() (int64, error) { return 1 << 10, nil } // 1 KiB left
	_, err := m.TryPrefill("func main() {", Capture("*"))
	require.ErrorContains(t, err, "more of host memory (scratch ")
	require.ErrorContains(t, err, "the KV cache is held already), and 1.0 KiB is left: use a shorter prompt or fewer captures")
	_, err = m.TryGenerate("func main() {", 8)
	require.ErrorContains(t, err, "and 1.0 KiB is left")
	func() {
		defer func() {
			err, _ := recover().(error)
			require.ErrorContains(t, err, "and 1.0 KiB is left", "Start panics with it")
		}()
		m.Start("func main() {")
	}()

	// What fits runs: the session's cache is held already and not counted again.
	est := engine.EstimateMemory(&m.engine().Model.Config, len(m.Tokens("func main() {")), 0, m.sess.Capacity(), engine.Options{Logits: engine.LogitsLast})
	hostAvailable = func() (int64, error) { return est.Total() - est.Cache + 1<<20, nil }
	require.Equal(t, want, m.Prefill("func main() {").Predicted)
	hostAvailable = func() (int64, error) { return 0, errors.New("no /proc here") }
	require.Equal(t, want, m.Prefill("func main() {").Predicted, "unknown: not checked")
}

// A batch over the host memory left runs as micro-batches that fit, with
// the results of its prompts run one at a time, bit for bit.
func TestBatchOverTheHostRunsInMicroBatches(t *testing.T) {
	m := Open("", Backend("cpu"))
	defer m.Close()
	prompts := []string{"func main() {\n\tfmt.Println(", "x := 1", "if err != nil {\n\treturn err\n}", "package nb"}
	opts := []PrefillOption{Capture("blocks.*.hook_resid_post", "blocks.*.mlp.hook_post"), AllLogits()}
	var want []*trace.Trace
	lens := make([]int, len(prompts))
	for i, p := range prompts {
		want = append(want, m.Prefill(p, opts...))
		lens[i] = len(want[i].Tokens)
	}
	o := m.prefillSettings(opts).o
	limit := engine.EstimateBatch(&m.engine().Model.Config, lens[:2], o).Total()
	ends, err := engine.MicroBatches(&m.engine().Model.Config, lens, o, limit)
	require.NoError(t, err)
	require.Greater(t, len(ends), 1, "the limit splits the batch")
	defer func(f func() (int64, error)) { hostAvailable = f }(hostAvailable)
	hostAvailable = func() (int64, error) { return limit, nil }
	got := m.PrefillBatch(prompts, opts...)
	require.Len(t, got, len(prompts))
	for i := range prompts {
		require.Equal(t, want[i].Names, got[i].Names)
		for _, name := range want[i].Names {
			enginetest.RequireBits(t, Must(want[i].Get(name)).Data, Must(got[i].Get(name)).Data, "prompt %d %s", i, name)
		}
		want[i].Close()
		got[i].Close()
	}
	hostAvailable = func() (int64, error) { return 1 << 10, nil }
	_, err = m.TryPrefillBatch(prompts, opts...)
	require.ErrorContains(t, err, "nb.PrefillBatch: engine: prompt 0 of the batch (")
	require.ErrorContains(t, err, "over the limit of 1.0 KiB (the host memory left)")
}
