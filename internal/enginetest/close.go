package enginetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/model"
)

// CheckCloseWhilePrefilling closes a backend while another goroutine
// prefills on it, runs times at growing delays: Close returns, and the
// prefill then ends, done or failed with backend.ErrBackendClosed, within
// limit. On Vulkan Close destroyed a fence a prefill waited on, and both
// hung (3 of 12 runs), or the prefill waited on a destroyed fence.
func CheckCloseWhilePrefilling(t *testing.T, open func() backend.Backend, m *model.Model, runs int) {
	const limit = time.Minute
	tokens := make([]int32, min(64, m.Context))
	for i := range tokens {
		tokens[i] = int32((i*7 + 1) % m.Vocab)
	}
	for run := range runs {
		b := open()
		e, err := engine.NewEngine(m, b)
		require.NoError(t, err)
		s, err := e.NewSession(len(tokens))
		require.NoError(t, err)
		started, ended := make(chan struct{}), make(chan error, 1)
		go func() {
			close(started)
			for {
				err := s.Reset()
				if err == nil {
					_, err = s.Prefill(context.Background(), tokens, engine.Options{Capture: engine.CaptureOf("blocks.0.*")})
				}
				if err != nil {
					ended <- err
					return
				}
			}
		}()
		<-started
		time.Sleep(time.Duration(run) * 3 * time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- b.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err, "run %d", run)
		case <-time.After(limit):
			t.Fatalf("run %d: Close hangs while another goroutine prefills", run)
		}
		select {
		case err := <-ended:
			require.True(t, errors.Is(err, backend.ErrBackendClosed), "run %d: the prefill fails as closed, not with %v", run, err)
		case <-time.After(limit):
			t.Fatalf("run %d: the prefill hangs after Close", run)
		}
		s.Close()
	}
}
