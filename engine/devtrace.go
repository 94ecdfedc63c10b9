package engine

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/trace"
)

// deviceTrace is where a GPU trace's captures stay until they are read: the
// run's capture arenas, handed over as the prefill ends. Reads go through
// the session's reader stream, not its prefill stream, so that reading a
// trace never waits for (or fails against) a prefill running on the session.
type deviceTrace struct {
	s      *Session
	mu     sync.Mutex
	arenas []backend.Tensor
	tiers  []int // each arena's tier
	slots  map[string]slot
	bytes  int64
	freed  bool
}

var (
	_ trace.NormSource = (*deviceTrace)(nil) // Trace.RowNorms reduces on the device
	_ trace.Lender     = (*deviceTrace)(nil) // a sweep's whole-trace reads reuse host memory
)

// hostSpare is the host memory of one closed trace's reads, by length, for
// the session's next traces to read into. It holds one trace's at most: a
// trace's Return replaces what another gave back, as the device arenas'
// spares do; a read that fits none of it lets it go (another layout), so
// that it is not held beside the new memory.
type hostSpare struct {
	mu     sync.Mutex
	from   *deviceTrace
	spare  map[int][][]float32
	closed bool // the session closed: nothing is kept
}

// Lend implements trace.Lender. A freed trace's read fails: it takes nothing.
func (d *deviceTrace) Lend(sizes []int) [][]float32 {
	data := make([][]float32, len(sizes))
	if d.isFreed() {
		return data
	}
	h := &d.s.host
	h.mu.Lock()
	defer h.mu.Unlock()
	lent := false
	for i, n := range sizes {
		if k := len(h.spare[n]); k > 0 {
			data[i] = h.spare[n][k-1]
			h.spare[n][k-1] = nil // the pool's array no longer keeps it
			h.spare[n] = h.spare[n][:k-1]
			lent = true
		}
	}
	if !lent {
		h.from, h.spare = nil, nil
	}
	return data
}

// Return implements trace.Lender. Close gives back before it frees the
// trace; what comes back from a freed one (a failed read of it, or a Close
// after its session closed) is not kept.
func (d *deviceTrace) Return(data []float32) {
	if d.isFreed() {
		return
	}
	h := &d.s.host
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.from != d {
		h.from, h.spare = d, map[int][][]float32{}
	}
	h.spare[len(data)] = append(h.spare[len(data)], data)
}

func onDevice(b backend.Backend) bool { return b.Capabilities().DeviceMemory }

func (d *deviceTrace) isFreed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.freed
}

// Read implements trace.Source.
func (d *deviceTrace) Read(reqs []trace.Request) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.freed {
		return trace.ErrClosed
	}
	batches := make([][]backend.ReadRequest, len(d.s.tiers)) // one per tier
	for _, q := range reqs {
		s, ok := d.slots[q.Name]
		if !ok {
			return fmt.Errorf("engine: %s is not in this trace", q.Name)
		}
		if n := elements(s.shape); q.Off < 0 || q.Off > n || len(q.Dst) > n-q.Off {
			return fmt.Errorf("engine: read of %d elements at %d from %s of %d", len(q.Dst), q.Off, q.Name, n)
		}
		t := d.tiers[s.arena]
		batches[t] = append(batches[t], backend.ReadRequest{Src: d.arenas[s.arena], Off: s.off + q.Off, Dst: q.Dst})
	}
	s := d.s
	s.readMu.Lock()
	defer s.readMu.Unlock()
	for t, batch := range batches {
		if len(batch) == 0 {
			continue
		}
		if err := s.reader(t).ReadBatch(batch); err != nil {
			return closedIfGone(err)
		}
	}
	return nil
}

// reader is the stream that reads tier's traces; s.readMu is held.
func (s *Session) reader(tier int) backend.Stream {
	if s.tiers[tier].reader == nil {
		s.tiers[tier].reader = s.e.tiers[tier].NewStream()
	}
	return s.tiers[tier].reader
}

// RowNorms implements trace.NormSource: the norms are taken on the device
// by the reader stream, and only they are read back.
func (d *deviceTrace) RowNorms(name string, dst []float32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.freed {
		return trace.ErrClosed
	}
	sl, ok := d.slots[name]
	if !ok {
		return fmt.Errorf("engine: %s is not in this trace", name)
	}
	if len(sl.shape) == 0 || len(dst) != sl.shape[0] {
		return fmt.Errorf("engine: %d norms of %s %v", len(dst), name, sl.shape)
	}
	rows, width := sl.shape[0], elements(sl.shape[1:])
	s := d.s
	s.readMu.Lock()
	defer s.readMu.Unlock()
	reader := s.reader(d.tiers[sl.arena])
	norms, err := reader.Alloc("row norms of "+name, rows)
	if err != nil {
		return closedIfGone(err)
	}
	defer reader.Free(norms)
	reader.RowNorms(norms, d.arenas[sl.arena], sl.off, rows, width)
	return closedIfGone(reader.ReadBatch([]backend.ReadRequest{{Src: norms, Dst: dst}}))
}

// closedIfGone makes a backend closed under a trace read as trace.ErrClosed.
func closedIfGone(err error) error {
	if errors.Is(err, backend.ErrBackendClosed) {
		return fmt.Errorf("%w: %w", trace.ErrClosed, err)
	}
	return err
}

// Free implements trace.Source. The arenas are kept for the session's next
// run: a sweep closes each trace and starts another of the same layout, and
// allocating (and the driver's zeroing of) gigabytes per prefill cost more
// than the prefill itself.
func (d *deviceTrace) Free() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.freed {
		return
	}
	d.freed = true
	s := d.s
	s.readMu.Lock()
	defer s.readMu.Unlock()
	delete(s.traces, d)
	s.e.traceBytes.Add(-d.bytes)
	for t := range s.tiers {
		old := s.tiers[t].spare
		s.tiers[t].spare = nil
		for i, a := range d.arenas {
			if d.tiers[i] == t {
				s.tiers[t].spare = append(s.tiers[t].spare, a)
			}
		}
		s.freeOnReader(t, old)
	}
	d.arenas = nil
}

// freeOnReader frees tier's device buffers through its reader stream;
// s.readMu is held.
func (s *Session) freeOnReader(tier int, ts []backend.Tensor) {
	if len(ts) == 0 {
		return
	}
	reader := s.reader(tier)
	for _, t := range ts {
		reader.Free(t)
	}
	_ = reader.Sync()
}

// keep hands the run's arenas to a trace that reads them lazily.
func (r *Run) keep(tr *trace.Trace) {
	s := r.s
	d := &deviceTrace{s: s, arenas: r.arenas, slots: r.l.slots, bytes: 4 * int64(r.l.captureElements)}
	for i := range r.arenas {
		d.tiers = append(d.tiers, r.arenaTier(i))
	}
	r.arenas = nil
	s.readMu.Lock()
	if s.traces == nil {
		s.traces = map[*deviceTrace]struct{}{}
	}
	s.traces[d] = struct{}{}
	s.readMu.Unlock()
	s.e.traceBytes.Add(d.bytes)
	for _, name := range r.l.order {
		tr.PutUnread(name, slices.Clone(r.l.slots[name].shape), d)
	}
	// A trace dropped without Close gives its memory back when collected.
	runtime.AddCleanup(tr, func(d *deviceTrace) { d.Free() }, d)
}

// freeTraces frees the device memory of the session's live traces (their
// unread captures then read as trace.ErrClosed), its spare arenas and its
// spare host memory.
func (s *Session) freeTraces() {
	s.host.drop(true)
	s.readMu.Lock()
	live := make([]*deviceTrace, 0, len(s.traces))
	for d := range s.traces {
		live = append(live, d)
	}
	s.readMu.Unlock()
	for _, d := range live {
		d.Free()
	}
	s.readMu.Lock()
	for t := range s.tiers {
		s.freeOnReader(t, s.tiers[t].spare)
		s.tiers[t].spare = nil
		if s.tiers[t].reader != nil {
			s.tiers[t].reader.Close()
			s.tiers[t].reader = nil
		}
	}
	s.readMu.Unlock()
}

// FreeSpare lets go of the memory the session's closed traces gave back
// for its next ones: device arenas, and the host memory their captures were
// read into. A sweep wants it kept; a notebook done with a large trace may
// want it back without closing the session.
func (s *Session) FreeSpare() {
	if s == nil {
		return
	}
	s.host.drop(false)
	s.readMu.Lock()
	defer s.readMu.Unlock()
	for t := range s.tiers {
		s.freeOnReader(t, s.tiers[t].spare)
		s.tiers[t].spare = nil
	}
}

// takeSpare hands the run the session's spare arenas, tier by tier;
// s.readMu is not held.
func (s *Session) takeSpare() [][]backend.Tensor {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	spare := make([][]backend.Tensor, len(s.tiers))
	for t := range s.tiers {
		spare[t], s.tiers[t].spare = s.tiers[t].spare, nil
	}
	return spare
}

// allocArenas makes a device run's capture arenas, reusing the spare ones
// of a closed trace where their sizes match: every slot of an arena is
// written by a finished run, so a reused arena needs no clearing. When the
// device is full and traces are alive that nobody references any more, it
// collects them (their cleanups free their memory) and tries once more.
func (r *Run) allocArenas() error {
	spare := r.s.takeSpare()
	err := r.tryArenas(spare)
	r.freeSpare(spare)
	if err == nil || r.s.e.traceBytes.Load() == 0 {
		return err
	}
	runtime.GC()
	for last, waited := int64(-1), 0; waited < 50; waited++ {
		now := r.s.e.traceBytes.Load()
		if now == last {
			break
		}
		last = now
		time.Sleep(10 * time.Millisecond)
	}
	r.freeSpare(r.s.takeSpare()) // collected traces' arenas: freed, so that a different layout fits
	return r.tryArenas(nil)
}

// tryArenas takes each arena from its tier's spares when one of its size is
// there (taking it out of spare), and allocates the others. On failure it
// frees what it took and the spares.
func (r *Run) tryArenas(spare [][]backend.Tensor) error {
	r.arenas = make([]backend.Tensor, len(r.l.arenas))
	for i, n := range r.l.arenas {
		tier := r.arenaTier(i)
		if spare != nil {
			if j := slices.IndexFunc(spare[tier], func(t backend.Tensor) bool { return t.Len() == n }); j >= 0 {
				r.arenas[i] = spare[tier][j]
				spare[tier] = slices.Delete(spare[tier], j, j+1)
				continue
			}
		}
		st := r.s.tiers[tier].st
		t, err := st.Alloc(arenaName(i), n)
		if err != nil {
			r.freeArenas()
			r.freeSpare(spare)
			for t := range r.s.tiers {
				_ = r.s.tiers[t].st.Sync()
			}
			return err
		}
		r.arenas[i] = t
	}
	return nil
}

func (r *Run) freeArenas() {
	for i, t := range r.arenas {
		if t != nil {
			r.s.tiers[r.arenaTier(i)].st.Free(t)
		}
	}
	r.arenas = nil
}

// freeSpare frees the spare arenas left in spare, tier by tier, and empties it.
func (r *Run) freeSpare(spare [][]backend.Tensor) {
	for tier, ts := range spare {
		for _, t := range ts {
			r.s.tiers[tier].st.Free(t)
		}
		spare[tier] = nil
	}
}

// drop lets the spare host memory go, for the collector; after close,
// nothing given back is kept.
func (h *hostSpare) drop(close bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.from, h.spare = nil, nil
	h.closed = h.closed || close
}
