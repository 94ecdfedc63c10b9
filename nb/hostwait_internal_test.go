package nb

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
)

// A call that waits behind a Host function says why it may wait forever:
// made from that function, it would (no Go runtime check catches it).
func TestACallWaitingBehindAHostFunctionSaysSo(t *testing.T) {
	m := Open("", Backend("cpu"))
	defer func(d time.Duration) { hostWaitWarning = d }(hostWaitWarning)
	hostWaitWarning = 50 * time.Millisecond
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer func(f *os.File) { os.Stderr = f }(os.Stderr)
	os.Stderr = w

	inner := make(chan error, 1)
	hook := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(string, []int, []float32) error {
		go func() { _, err := m.TryPrefill("x"); inner <- err }()
		time.Sleep(300 * time.Millisecond) // the other call waits and warns
		return nil
	}}
	_, err = m.TryPrefill("func main() {", Hooks(hook))
	require.NoError(t, err)
	require.NoError(t, <-inner, "the waiting call runs once the hooked one ends")
	w.Close()
	said, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, string(said), "if the Host function made this call, it waits forever")

	// The count of running Host functions is back to zero.
	require.Zero(t, m.inHost.Load())
}

// A Host function that calls its own model gets an error at once; one that
// panics fails the prefill, and the model goes on working.
func TestAHostFunctionCallingItsModelIsAnError(t *testing.T) {
	m := Open("", Backend("cpu"))
	before := m.Prefill("func main() {").Predicted
	var inner error
	calls := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(string, []int, []float32) error {
		_, inner = m.TryPrefill("x")
		return nil
	}}
	_, err := m.TryPrefill("func main() {", Hooks(calls))
	require.NoError(t, err)
	require.ErrorContains(t, inner, "a hook's Host function called the Model that runs it")

	panics := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(string, []int, []float32) error {
		m.Prefill("x")
		return nil
	}}
	_, err = m.TryPrefill("func main() {", Hooks(panics))
	require.NotContains(t, err.Error(), "hook_resid_post: hook at")
	require.ErrorContains(t, err, "hook at blocks.0.hook_resid_post: its Host function panicked: nb: a hook's Host function called the Model that runs it")
	require.Equal(t, before, m.Prefill("func main() {").Predicted, "the model works after")
	require.Zero(t, m.hostGoroutine.Load())
}
