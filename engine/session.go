package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Session is one conversation with an engine: a KV cache and a position.
// A session is used from one goroutine at a time: a call made while
// another goroutine's call on the same session (or on one of its runs) is in
// progress fails with ErrSessionBusy and changes nothing. Different sessions
// of one engine run concurrently.
type Session struct {
	e        *Engine
	tiers    []sessionTier // one per engine tier
	capacity int           // positions a prompt may fill
	held     int           // positions the cache holds: more than capacity after a batch (PrefillBatch)
	pos      atomic.Int64
	cacheK   []backend.Tensor // each on its layer's home tier
	cacheV   []backend.Tensor
	run      *Run // the run holding the tiers' workspaces, until it ends

	readMu sync.Mutex                // orders reads of the session's device traces
	traces map[*deviceTrace]struct{} // live device traces, freed with the session
	host   hostSpare                 // host memory closed traces' reads give back

	mu       sync.Mutex  // held by the call in progress
	closing  atomic.Bool // Close was called: whoever holds mu closes
	isClosed bool        // under mu
	release  func()      // under mu: lets go of the model's file the call holds
}

// sessionTier is a session's part on one tier.
type sessionTier struct {
	st backend.Stream
	ws workspace // the last prefill's buffers, for the next
	// Under the session's readMu:
	reader backend.Stream   // device traces' reads' own stream, made on first read
	spare  []backend.Tensor // a closed trace's arenas, for the next run to reuse
}

var (
	// ErrSessionBusy is returned by a call on a session (or its run) while
	// another goroutine's call on it is in progress. Use one session per
	// goroutine, or serialise the calls.
	ErrSessionBusy = errors.New("engine: the session is in use by another goroutine (a session runs one call at a time; use a session per goroutine)")
	// ErrSessionClosed is returned by a call on a closed session or on a
	// run of one.
	ErrSessionClosed = errors.New("engine: the session was closed")
	errNilSession    = errors.New("engine: nil *Session (use Engine.NewSession)")
)

// NewSession allocates a KV cache for capacity positions (0: the model's context length).
func (e *Engine) NewSession(capacity int) (*Session, error) {
	if e == nil || e.Model == nil || e.Backend == nil {
		return nil, errNoEngine
	}
	c := &e.Model.Config
	if capacity < 0 {
		return nil, fmt.Errorf("engine: KV cache of %d positions: the capacity must be 0 (the model's context, %d) or positive", capacity, c.Context)
	}
	if capacity == 0 {
		capacity = c.Context
	}
	if capacity > c.Context {
		return nil, fmt.Errorf("engine: KV cache of %d positions exceeds the model's context length %d", capacity, c.Context)
	}
	return e.newSession(capacity, capacity)
}

// newSession makes a session of capacity positions whose KV cache holds
// held positions: more where a batch's prompts fill it side by side.
func (e *Engine) newSession(capacity, held int) (*Session, error) {
	c := &e.Model.Config
	s := &Session{e: e, capacity: capacity, held: held, tiers: make([]sessionTier, len(e.tiers))}
	for i, b := range e.tiers {
		s.tiers[i].st = b.NewStream()
	}
	for l := 0; l < c.Layers; l++ {
		st := s.tiers[e.place.Layers[l]].st
		k, err := st.Alloc(trace.LayerPoint(l, trace.AttnCacheK), held*c.KVDim())
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cacheK = append(s.cacheK, k)
		v, err := st.Alloc(trace.LayerPoint(l, trace.AttnCacheV), held*c.KVDim())
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cacheV = append(s.cacheV, v)
	}
	return s, nil
}

// ropeAt is the RoPE this session's layer uses.
func (s *Session) ropeAt(layer int) *model.Rope {
	if c := &s.e.Model.Config; c.LongRope != nil && c.Context > c.Rope.Scaling.OrigContext {
		// Phi-3's long factors, chosen by the model's context as llama.cpp
		// chooses by its own: by the cache's size, a prompt's logits
		// depended on what the session had held before.
		return c.LongRope
	}
	return s.e.Model.RopeAt(layer)
}

// lock claims the session for one call: ErrSessionBusy while another
// goroutine holds it, ErrSessionClosed once it is closed.
func (s *Session) lock() error {
	if s == nil {
		return errNilSession
	}
	if !s.mu.TryLock() {
		return ErrSessionBusy
	}
	if s.isClosed || s.closing.Load() {
		s.unlock()
		return ErrSessionClosed
	}
	// The call reads the weights where the file is mapped (on the CPU): a
	// model.Close meanwhile leaves the unmapping to its end.
	release, err := s.e.Model.File.Hold()
	if err != nil {
		s.unlock()
		return fmt.Errorf("engine: %w", err)
	}
	s.release = release
	return nil
}

// unlock ends a call, first carrying out a Close that arrived during it.
func (s *Session) unlock() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
	for {
		if s.closing.Load() && !s.isClosed {
			s.close()
		}
		closed := s.isClosed
		s.mu.Unlock()
		// A Close that found the session busy after the check above is
		// seen here: take the lock back and close, unless another call
		// has it now (it closes as it ends).
		if closed || !s.closing.Load() || !s.mu.TryLock() {
			return
		}
	}
}

// Close ends the session's unfinished run, if any, and frees the session's
// KV cache and prefill buffers. Called while another goroutine's call on the
// session is in progress, it returns at once and that call closes the
// session as it ends. Later calls fail with ErrSessionClosed; Close again
// does nothing.
func (s *Session) Close() {
	if s == nil {
		return
	}
	s.closing.Store(true)
	if s.mu.TryLock() {
		if !s.isClosed {
			s.close()
		}
		s.mu.Unlock()
	}
}

func (s *Session) close() {
	s.isClosed = true
	s.endRun(ErrSessionClosed)
	s.freeTraces()
	for i := range s.tiers {
		s.tiers[i].ws.free(s.tiers[i].st)
	}
	for l, t := range s.cacheK {
		s.tiers[s.e.place.Layers[l]].st.Free(t)
	}
	for l, t := range s.cacheV {
		s.tiers[s.e.place.Layers[l]].st.Free(t)
	}
	s.cacheK, s.cacheV = nil, nil
	// Release the streams' own buffers now rather than when they are
	// collected; an error here belongs to work that is being thrown away.
	for i := range s.tiers {
		s.tiers[i].st.Close()
	}
}

// endRun stops the run holding the session's buffers, if any, so that they
// can go to a new run or be freed; the run's calls then return why.
func (s *Session) endRun(why error) {
	if s.run != nil {
		s.run.fail(why)
		s.run.release(runReleased)
	}
}

// Engine is the engine the session runs on.
func (s *Session) Engine() *Engine {
	if s == nil {
		return nil
	}
	return s.e
}

// Pos is the position the next prefill starts at.
func (s *Session) Pos() int {
	if s == nil {
		return 0
	}
	return int(s.pos.Load())
}

// Capacity is the KV cache's length in positions.
func (s *Session) Capacity() int {
	if s == nil {
		return 0
	}
	return s.capacity
}

// Reset forgets the cached positions; the next prefill starts at 0. It
// fails only as every call does: on a busy, closed or nil session.
func (s *Session) Reset() error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	s.pos.Store(0)
	return nil
}

// Grow makes the session's KV cache hold capacity positions (at most the
// model's context), keeping the positions it holds: a session can start
// small and grow as prompts need, where a cache of a long context would
// take gigabytes of device memory for a short prompt. A smaller capacity
// changes nothing. An unfinished step-wise run ends.
func (s *Session) Grow(capacity int) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	c := &s.e.Model.Config
	switch {
	case capacity <= s.capacity:
		return nil
	case capacity > c.Context:
		return fmt.Errorf("engine: KV cache of %d positions exceeds the model's context length %d", capacity, c.Context)
	}
	s.endRun(errSuperseded)
	if capacity > s.held {
		if err := s.hold(capacity); err != nil {
			return err
		}
	}
	s.capacity = capacity
	return nil
}

// hold makes the KV cache hold n positions, keeping those cached; the
// caller holds the session, with no run.
func (s *Session) hold(n int) error {
	c := &s.e.Model.Config
	kvd, keep := c.KVDim(), s.Pos()*c.KVDim()
	k, v := make([]backend.Tensor, c.Layers), make([]backend.Tensor, c.Layers)
	free := func() {
		for l := range c.Layers {
			st := s.tiers[s.e.place.Layers[l]].st
			for _, t := range []backend.Tensor{k[l], v[l]} {
				if t != nil {
					st.Free(t)
				}
			}
		}
	}
	for l := range c.Layers {
		st := s.tiers[s.e.place.Layers[l]].st
		var err error
		if k[l], err = st.Alloc(trace.LayerPoint(l, trace.AttnCacheK), n*kvd); err == nil {
			v[l], err = st.Alloc(trace.LayerPoint(l, trace.AttnCacheV), n*kvd)
		}
		if err != nil {
			free()
			return err
		}
		if keep > 0 {
			st.Copy(k[l], 0, s.cacheK[l], 0, keep)
			st.Copy(v[l], 0, s.cacheV[l], 0, keep)
		}
	}
	for i := range s.tiers {
		if err := s.tiers[i].st.Sync(); err != nil {
			free()
			return err
		}
	}
	k, s.cacheK = s.cacheK, k
	v, s.cacheV = s.cacheV, v
	free() // the old caches
	s.held = n
	return nil
}

// Rewind moves the position back to pos, as when a speculative draft is rejected.
func (s *Session) Rewind(pos int) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	if now := s.Pos(); pos < 0 || pos > now {
		return fmt.Errorf("engine: cannot rewind to position %d (session is at %d)", pos, now)
	}
	s.pos.Store(int64(pos))
	return nil
}

// Prefill runs tokens through every layer in one go, at the session's
// position: after an earlier prefill it continues that prompt (its keys and
// values are in the cache). Reset first to start a new one.
func (s *Session) Prefill(ctx context.Context, tokens []int32, o Options) (*trace.Trace, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.unlock()
	r, err := s.start(ctx, tokens, o)
	if err != nil {
		return nil, err
	}
	return r.finish()
}
