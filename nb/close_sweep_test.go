package nb_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/nb"
)

// Issue 47's sweep of Close under concurrent use, for nb: a Model closed
// while goroutines prefill, generate and step on it, and Steps closed while
// another goroutine advances them. Each Close returns, each call ends with
// its result or the closed Model's error (never a panic or a hang), and
// another open Model of the file works after, with the same results.
func TestClosesUnderUse(t *testing.T) {
	const limit = time.Minute
	w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.F32, 3)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, w.WriteFile(path))
	other := nb.Open(path, nb.Backend("cpu"))
	defer other.Close()
	want := other.Prefill("abc").Predicted

	m := nb.Open(path, nb.Backend("cpu"))
	done := make(chan error, 4)
	calls := []func() error{
		// Weights read on the host, without the call lock: under -race, a
		// read of the closing Model's engine raced Close's write.
		func() (err error) {
			defer func() { err, _ = recover().(error) }()
			m.Unembed(5)
			m.WE(5, 6)
			return nil
		},
		func() error { _, err := m.TryPrefill("abc"); return err },
		func() error { _, err := m.TryGenerate("abc", 2); return err },
		func() error {
			// The others' prefills take the steps' buffers (Err says so):
			// only a refused Start ends this caller.
			s, err := m.TryStart("abc")
			if err == nil {
				s.Next()
				s.Close()
			}
			return err
		},
	}
	for _, call := range calls {
		go func() {
			for {
				if err := call(); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	enginetest.ReturnsWithin(t, limit, m.Close, "Model.Close while others use it")
	for range calls {
		select {
		case err := <-done:
			require.EqualError(t, err, "nb: the Model is closed (or was never opened with nb.Open)")
		case <-time.After(limit):
			t.Fatal("a call hangs after Model.Close")
		}
	}
	require.Equal(t, want, other.Prefill("abc").Predicted, "the other Model of the file works after")

	// Steps closed while another goroutine advances them: both return, and
	// the model prefills after.
	s := other.Start("abc")
	stepped := make(chan error, 1)
	go func() {
		for s.Next() {
		}
		stepped <- s.Err()
	}()
	s.Close()
	select {
	case err := <-stepped:
		require.NoError(t, err, "the steps ran out or were closed")
	case <-time.After(limit):
		t.Fatal("Steps.Next hangs after Steps.Close")
	}
	require.Equal(t, want, other.Prefill("abc").Predicted)
}
