package cpu

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/stratalab/strata/gpu"
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
	fresh, old         map[int][]*float32
	asked, askedBefore map[int]bool
	// returned and reused count arenas back from the collector and given
	// out again (tests).
	returned, reused atomic.Int64
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

func (p *arenaPool) put(first *float32, n int) {
	p.returned.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fresh == nil {
		p.fresh = map[int][]*float32{}
	}
	p.fresh[n] = append(p.fresh[n], first)
}

func (p *arenaPool) take(n int) *float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asked == nil {
		p.asked = map[int]bool{}
	}
	p.asked[n] = true
	for _, m := range []map[int][]*float32{p.fresh, p.old} {
		if k := len(m[n]); k > 0 {
			first := m[n][k-1]
			m[n][k-1] = nil
			m[n] = m[n][:k-1]
			return first
		}
	}
	return nil
}

// get returns n elements, a collected arena's when one of that size waits;
// their values are then that arena's, not zeros.
func (p *arenaPool) get(n int) []float32 {
	if n < minPooled {
		return make([]float32, n)
	}
	var d []float32
	if first := p.take(n); first != nil {
		d = unsafe.Slice(first, n)
		p.reused.Add(1)
		if poisonReused.Load() {
			for i := range d {
				d[i] = float32(math.NaN())
			}
		}
	} else {
		d = make([]float32, n)
	}
	runtime.SetFinalizer(&d[0], func(first *float32) { p.put(first, n) })
	return d
}

// poisonReused fills reused arenas with NaN (tests: an element a run leaves
// unwritten then shows in its trace).
var poisonReused atomic.Bool

// AllocArena implements gpu.HostTensors.
func (s *stream) AllocArena(name string, n int) (gpu.Tensor, error) {
	if err := checkAlloc(name, n); err != nil {
		return nil, err
	}
	return &tensor{data: s.b.arenas.get(n)}, nil
}
