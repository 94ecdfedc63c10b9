package enginetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
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
		ReturnsWithin(t, limit, b.Close, fmt.Sprintf("run %d: Close while another goroutine prefills", run))
		select {
		case err := <-ended:
			require.True(t, errors.Is(err, backend.ErrBackendClosed), "run %d: the prefill fails as closed, not with %v", run, err)
		case <-time.After(limit):
			t.Fatalf("run %d: the prefill hangs after Close", run)
		}
		s.Close()
	}
}

// CheckClosesUnderUse is issue 47's sweep of Close under concurrent use,
// on a backend open makes, for a session, a run, a trace and the model
// (mapped, as model.Open makes it: MappedModel). Each Close returns within
// a limit while other goroutines use the object; their calls end, each
// with its result or an error that says the object is closed (or busy),
// never a panic; and whatever they read is the values a run alone reads:
// no memory is read after it was freed or handed to the next prefill.
func CheckClosesUnderUse(t *testing.T, open func() backend.Backend, m *model.Model) {
	const limit = time.Minute
	ctx := context.Background()
	tokens := make([]int32, min(16, m.Context))
	for i := range tokens {
		tokens[i] = int32((i*7 + 1) % m.Vocab)
	}
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	e, err := engine.NewEngine(m, open())
	require.NoError(t, err)
	defer e.Backend.Close()
	ref, err := e.NewSession(len(tokens))
	require.NoError(t, err)
	want, err := ref.Prefill(ctx, tokens, o)
	require.NoError(t, err)
	require.NoError(t, want.Load())
	ref.Close()
	// differs says, off the test's goroutine, how a read differs from want's.
	differs := func(what, name string, got *trace.Tensor) error {
		if err := bitsDiffer(want.Tensor(name).Data, got.Data); err != nil {
			return fmt.Errorf("%s: %s: %w", what, name, err)
		}
		return nil
	}
	// waitAll waits for n goroutines' results, each within limit.
	waitAll := func(what string, n int, done chan error) []error {
		var errs []error
		for range n {
			select {
			case err := <-done:
				errs = append(errs, err)
			case <-time.After(limit):
				t.Fatalf("%s: a user hangs after Close", what)
			}
		}
		return errs
	}
	closes := func(what string, close func()) {
		ReturnsWithin(t, limit, func() error { close(); return nil }, what+": Close while others use it")
	}

	// A session: goroutines prefill on it (most are refused as busy) and
	// end refused as closed; a prefill that ran has the values.
	s, err := e.NewSession(len(tokens))
	require.NoError(t, err)
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				err := s.Reset()
				if err == nil {
					var tr *trace.Trace
					if tr, err = s.Prefill(ctx, tokens, o); err == nil {
						// Close frees the session's device traces: a read
						// after it is refused, not made.
						var x *trace.Tensor
						if x, err = tr.Get("logits"); err == nil {
							err = differs("session", "logits", x)
						} else if errors.Is(err, trace.ErrClosed) {
							err = nil
						}
						tr.Close()
					}
				}
				if err != nil && !errors.Is(err, engine.ErrSessionBusy) {
					done <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	closes("Session", s.Close)
	for _, err := range waitAll("Session", 4, done) {
		require.ErrorIs(t, err, engine.ErrSessionClosed)
	}

	// A run: one goroutine steps it while it is closed; its session works
	// after, with the values.
	s, err = e.NewSession(len(tokens))
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Start(ctx, tokens, o)
	require.NoError(t, err)
	go func() {
		for r.Next() {
		}
		done <- r.Err()
	}()
	closes("Run", r.Close)
	if err := waitAll("Run", 1, done)[0]; err != nil {
		require.ErrorIs(t, err, engine.ErrSessionBusy, "a run ends, or is refused while Close has its session")
	}
	require.NoError(t, s.Reset())
	tr, err := s.Prefill(ctx, tokens, o)
	require.NoError(t, err)
	require.NoError(t, differs("after a closed run", "logits", tr.Tensor("logits")))

	// A trace: goroutines read it while it is closed. What they read is
	// the run's values, or an error that wraps trace.ErrClosed; what Get
	// handed out stays the run's values after the next prefill reuses the
	// trace's memory.
	type got struct {
		name string
		x    *trace.Tensor
	}
	kept := make(chan got, 4*len(tr.Names))
	for i := range 4 {
		go func() {
			for _, name := range tr.Names {
				var err error
				switch i {
				case 0:
					var x *trace.Tensor
					if x, err = tr.Get(name); err == nil {
						kept <- got{name, x}
					}
				case 1:
					_, err = tr.RowNorms(name)
				case 2:
					_, _, err = tr.FirstNonFinite()
				default:
					err = tr.Load(name)
				}
				if err != nil && !errors.Is(err, trace.ErrClosed) {
					done <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
			done <- nil
		}()
	}
	closes("Trace", func() { require.NoError(t, tr.Close()) })
	for _, err := range waitAll("Trace", 4, done) {
		require.NoError(t, err)
	}
	close(kept)
	require.NoError(t, s.Reset())
	next, err := s.Prefill(ctx, tokens, o)
	require.NoError(t, err)
	defer next.Close()
	for g := range kept {
		require.NoError(t, differs("a trace's Get after its Close and the next prefill", g.name, g.x))
	}
}

// CheckModelCloseUnderUse closes a mapped model (MappedModel) while
// goroutines prefill on it through an engine on the backend open makes,
// each with its session: Close returns at once, a prefill in progress ends
// with the values a run alone has (its weights stay mapped until it ends),
// and later calls fail with gguf.ErrClosed, as an engine made after does.
func CheckModelCloseUnderUse(t *testing.T, open func() backend.Backend, m *model.Model) {
	const limit = time.Minute
	ctx := context.Background()
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	o := engine.Options{Logits: engine.LogitsAll}
	e, err := engine.NewEngine(m, open())
	require.NoError(t, err)
	defer e.Backend.Close()
	want, err := e.PrefillBatch(ctx, [][]int32{tokens}, o)
	require.NoError(t, err)
	logits := want[0].Tensor("logits").Data

	// One prefill held in a hook while Close comes, the others looping.
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(string, []int, []float32) error {
		once.Do(func() { close(inside); <-release })
		return nil
	}}
	done := make(chan error, 4)
	for i := range 4 {
		go func() {
			s, err := e.NewSession(len(tokens))
			if err != nil {
				done <- err
				return
			}
			defer s.Close()
			oi := o
			if i == 0 {
				oi.Hooks = []engine.Hook{hold}
			}
			for {
				err := s.Reset()
				if err == nil {
					var tr *trace.Trace
					if tr, err = s.Prefill(ctx, tokens, oi); err == nil {
						err = bitsDiffer(logits, tr.Tensor("logits").Data)
					}
				}
				if err != nil {
					done <- err
					return
				}
			}
		}()
	}
	<-inside
	ReturnsWithin(t, limit, m.Close, "model.Close while a prefill is in progress")
	close(release)
	for range 4 {
		select {
		case err := <-done:
			require.ErrorIs(t, err, gguf.ErrClosed)
		case <-time.After(limit):
			t.Fatal("a prefill hangs after model.Close")
		}
	}
	b := open()
	defer b.Close()
	_, err = engine.NewEngine(m, b)
	require.ErrorIs(t, err, gguf.ErrClosed)
	require.ErrorIs(t, e.LogitLens(want[0]), gguf.ErrClosed)
}

// ReturnsWithin runs fn on another goroutine and requires it to return nil
// within limit; what names the call in the failure ("... hangs").
func ReturnsWithin(t testing.TB, limit time.Duration, fn func() error, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(limit):
		t.Fatalf("%s hangs", what)
	}
}
