package nb

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
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
	est := engine.EstimateMemory(&m.eng.Model.Config, len(m.Tokens("func main() {")), 0, m.sess.Capacity(), engine.Options{Logits: engine.LogitsLast})
	hostAvailable = func() (int64, error) { return est.Total() - est.Cache + 1<<20, nil }
	require.Equal(t, want, m.Prefill("func main() {").Predicted)
	hostAvailable = func() (int64, error) { return 0, errors.New("no /proc here") }
	require.Equal(t, want, m.Prefill("func main() {").Predicted, "unknown: not checked")
}
