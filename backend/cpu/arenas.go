package cpu

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/stratalab/strata/backend"
)

// A capture arena becomes its prefill's trace, which a caller may keep as
// long as it likes: its tensors are Go slices. Made afresh for each prefill,
// an arena's memory was zeroed by the runtime first, a quarter of a
// capture-all prefill at T=512, although a finished run writes every element
// of it. So an arena the collector finds unreachable (nothing refers to its
// trace or to any slice of it) comes back, through a finalizer on its first
// element, to be a later prefill's arena of the same size. What comes back
// is kept for one or two collector cycles, and only in sizes prefills asked
// for in the last two, so that a workload of ever-changing sizes holds
// no more than it did (sync.Pool ages its items alike, but its
// per-processor caches hid what a finalizer put back from the prefill's
// goroutine).
type arenaPool struct {
	mu sync.Mutex
	// fresh came back since the last cycle, old in the one before; asked
	// and askedBefore are the sizes get was called for in the same cycles.
	fresh, old         map[int][]pooled
	asked, askedBefore map[int]bool
	// observe, when tests set it, is told of each arena's comings and goings.
	observe atomic.Pointer[func(arenaEvent)]
}

// arenaEvent is something that happens to an arena, for tests to observe.
type arenaEvent int

const (
	arenaReturned  arenaEvent = iota // back from the collector
	arenaRecycled                    // back from a closed trace
	arenaReused                      // given out again
	arenaMasksKept                   // its masked attention entries were not written again
)

func (p *arenaPool) note(e arenaEvent) {
	if f := p.observe.Load(); f != nil {
		(*f)(e)
	}
}

// minPooled is the smallest arena kept (64 KiB): zeroing less costs little.
// Its finalizer is set on &d[0], the start of an allocation of its own (a
// large object), which runtime.SetFinalizer accepts.
const minPooled = 16 << 10

func newArenaPool() *arenaPool {
	p := &arenaPool{}
	w := weak.Make(p)
	var arm func()
	arm = func() {
		// A cleanup runs once its object is collected: on the next cycle.
		runtime.AddCleanup(&struct{ _ *byte }{}, func(struct{}) {
			if p := w.Value(); p != nil {
				p.cycle()
				arm()
			}
		}, struct{}{})
	}
	arm()
	return p
}

// cycle lets go of what waited a whole cycle untaken, and of what came
// back in sizes no prefill asked for.
func (p *arenaPool) cycle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := range p.fresh {
		if !p.asked[n] && !p.askedBefore[n] {
			delete(p.fresh, n)
		}
	}
	p.old, p.fresh = p.fresh, nil
	p.askedBefore, p.asked = p.asked, nil
}

// pooled is an arena waiting in the pool, and what its masked attention
// entries hold (nothing known, unless a closed trace gave it back).
type pooled struct {
	first *float32
	masks maskLayout
}

func (p *arenaPool) put(a pooled, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fresh == nil {
		p.fresh = map[int][]pooled{}
	}
	p.fresh[n] = append(p.fresh[n], a)
}

func (p *arenaPool) take(n int) (pooled, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asked == nil {
		p.asked = map[int]bool{}
	}
	p.asked[n] = true
	for _, m := range []map[int][]pooled{p.fresh, p.old} {
		if k := len(m[n]); k > 0 {
			a := m[n][k-1]
			m[n][k-1] = pooled{}
			m[n] = m[n][:k-1]
			return a, true
		}
	}
	return pooled{}, false
}

// get returns an arena of n elements, a collected or recycled one's when
// one of that size waits: its values are then that arena's, not zeros.
func (p *arenaPool) get(n int) *tensor {
	if n < minPooled {
		return &tensor{data: make([]float32, n)}
	}
	a, ok := p.take(n)
	var d []float32
	if ok {
		d = unsafe.Slice(a.first, n)
		p.note(arenaReused)
		if poisonReused.Load() {
			for i := range d {
				d[i] = float32(math.NaN())
			}
			a.masks = maskLayout{}
		}
	} else {
		d = make([]float32, n)
	}
	runtime.SetFinalizer(&d[0], func(first *float32) {
		p.note(arenaReturned)
		p.put(pooled{first: first}, n) // someone may have changed it
	})
	return &tensor{data: d, arena: &arenaMasks{whole: d, had: a.masks}}
}

// recycle takes back an arena before the collector would: a closed trace's
// that no slice given out refers to. The next prefill then writes memory
// still in cache, and none is made and zeroed for it: the collector gives
// arenas back cycles later, cold, and a new one is made whenever none has
// come back yet (2 to 5 of 17 per capture-all prefill of the default model's
// shape in a loop, 8 MiB each at T=512).
func (p *arenaPool) recycle(t *tensor) {
	d := t.data
	if len(d) < minPooled {
		return
	}
	runtime.SetFinalizer(&d[0], nil)
	p.note(arenaRecycled)
	p.put(pooled{first: &d[0], masks: t.arena.wrote}, len(d))
}

// poisonReused fills reused arenas with NaN (tests: an element a run leaves
// unwritten then shows in its trace).
var poisonReused atomic.Bool

// RecycleArena implements backend.HostTensors.
func (s *stream) RecycleArena(t backend.Tensor) { s.b.arenas.recycle(t.(*tensor)) }

// AllocArena implements backend.HostTensors.
func (s *stream) AllocArena(name string, n int) (backend.Tensor, error) {
	if s.b.closed.Load() {
		return nil, errClosed
	}
	if err := checkAlloc(name, n); err != nil {
		return nil, err
	}
	return s.b.arenas.get(n), nil
}
