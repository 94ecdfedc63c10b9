package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/stratalab/strata/gpu/trace"
)

// deviceTrace is where a GPU trace's captures stay until they are read: the
// run's capture arenas, handed over as the prefill ends. Reads go through
// the session's reader stream, not its prefill stream, so that reading a
// trace never waits for (or fails against) a prefill running on the session.
type deviceTrace struct {
	s      *Session
	mu     sync.Mutex
	arenas []Tensor
	slots  map[string]slot
	bytes  int64
	freed  bool
}

var _ trace.NormSource = (*deviceTrace)(nil) // Trace.RowNorms reduces on the device

func onDevice(b Backend) bool {
	d, ok := b.(DeviceMemory)
	return ok && d.DeviceMemory()
}

// Read implements trace.Source.
func (d *deviceTrace) Read(reqs []trace.Request) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.freed {
		return trace.ErrClosed
	}
	batch := make([]ReadRequest, len(reqs))
	for i, q := range reqs {
		s, ok := d.slots[q.Name]
		if !ok {
			return fmt.Errorf("engine: %s is not in this trace", q.Name)
		}
		if n := elements(s.shape); q.Off < 0 || q.Off > n || len(q.Dst) > n-q.Off {
			return fmt.Errorf("engine: read of %d elements at %d from %s of %d", len(q.Dst), q.Off, q.Name, n)
		}
		batch[i] = ReadRequest{Src: d.arenas[s.arena], Off: s.off + q.Off, Dst: q.Dst}
	}
	s := d.s
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if s.reader == nil {
		s.reader = s.e.Backend.NewStream()
	}
	return closedIfGone(s.reader.ReadBatch(batch))
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
	if s.reader == nil {
		s.reader = s.e.Backend.NewStream()
	}
	norms, err := s.reader.Alloc("row norms of "+name, rows)
	if err != nil {
		return closedIfGone(err)
	}
	defer s.reader.Free(norms)
	s.reader.RowNorms(norms, d.arenas[sl.arena], sl.off, rows, width)
	return closedIfGone(s.reader.ReadBatch([]ReadRequest{{Src: norms, Dst: dst}}))
}

// closedIfGone makes a backend closed under a trace read as trace.ErrClosed.
func closedIfGone(err error) error {
	if errors.Is(err, ErrBackendClosed) {
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
	old := s.spare
	s.spare, d.arenas = d.arenas, nil
	s.freeOnReader(old)
}

// freeOnReader frees device buffers through the reader stream; s.readMu is held.
func (s *Session) freeOnReader(ts []Tensor) {
	if len(ts) == 0 {
		return
	}
	if s.reader == nil {
		s.reader = s.e.Backend.NewStream()
	}
	for _, t := range ts {
		s.reader.Free(t)
	}
	_ = s.reader.Sync()
}

// keep hands the run's arenas to a trace that reads them lazily.
func (r *Run) keep(tr *trace.Trace) {
	s := r.s
	d := &deviceTrace{s: s, arenas: r.arenas, slots: r.l.slots, bytes: 4 * int64(r.l.captureElements)}
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
// unread captures then read as trace.ErrClosed) and its spare arenas.
func (s *Session) freeTraces() {
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
	s.freeOnReader(s.spare)
	s.spare = nil
	if s.reader != nil {
		s.reader.Close()
		s.reader = nil
	}
	s.readMu.Unlock()
}

// takeSpare hands the run the session's spare arenas; s.readMu is not held.
func (s *Session) takeSpare() []Tensor {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	spare := s.spare
	s.spare = nil
	return spare
}

// allocArenas makes a device run's capture arenas, reusing the spare ones
// of a closed trace where their sizes match: every slot of an arena is
// written by a finished run, so a reused arena needs no clearing. When the
// device is full and traces are alive that nobody references any more, it
// collects them (their cleanups free their memory) and tries once more.
func (r *Run) allocArenas() error {
	spare := r.s.takeSpare()
	err := r.tryArenas(&spare)
	r.freeTensors(spare)
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
	spare = r.s.takeSpare()
	r.freeTensors(spare) // collected traces' arenas: freed, so that a different layout fits
	return r.tryArenas(nil)
}

// tryArenas takes each arena from *spare when one of its size is there, and
// allocates the others. On failure it frees what it took and the spares.
func (r *Run) tryArenas(spare *[]Tensor) error {
	r.arenas = make([]Tensor, len(r.l.arenas))
	for i, n := range r.l.arenas {
		if spare != nil {
			if j := slices.IndexFunc(*spare, func(t Tensor) bool { return t.Len() == n }); j >= 0 {
				r.arenas[i] = (*spare)[j]
				*spare = slices.Delete(*spare, j, j+1)
				continue
			}
		}
		t, err := r.st.Alloc(fmt.Sprintf("capture arena %d", i), n)
		if err != nil {
			r.freeArenas()
			if spare != nil {
				r.freeTensors(*spare)
				*spare = nil
			}
			_ = r.st.Sync()
			return err
		}
		r.arenas[i] = t
	}
	return nil
}

func (r *Run) freeArenas() {
	r.freeTensors(r.arenas)
	r.arenas = nil
}

func (r *Run) freeTensors(ts []Tensor) {
	for _, t := range ts {
		if t != nil {
			r.st.Free(t)
		}
	}
}
