package cpu

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// pool runs a stream's parallel work on threads-1 goroutines kept from call
// to call, and on the calling goroutine. A call is cut into chunks that
// each thread takes from an atomic counter as it comes free: a thread that
// starts late takes fewer, and uneven chunks even out. Goroutines made per
// call (before, issue #52) started 13 µs after it (the two summed): 0.95 ms
// of a 2.8 ms tiny-qwen3 prefill (Q8_0, T=64, fast) of 71 calls on 2 threads.
type pool struct {
	gen    atomic.Uint64       // bumped for each job, and to quit
	job    atomic.Pointer[job] // the current job; nil between calls
	parked atomic.Int32        // goroutines asleep on wake
	quit   atomic.Bool
	spin   time.Duration // spinWait, or 0 with more threads than Ps
	mu     sync.Mutex
	wake   *sync.Cond
	done   chan struct{} // the last chunk's thread to a caller asleep
}

// spinWait is how long an idle goroutine of the pool (or a caller waiting
// for the last chunks) polls before it sleeps: the calls of a prefill come
// microseconds apart, and a goroutine woken from sleep is put on the
// waking one's P, where it waits until another P steals it. The polling
// never yields its P (runtime.Gosched every 256 polls made a tiny-qwen3
// prefill on 2 threads 2.5x slower: the yielded goroutine waited to run
// again, and then slept): with more threads than Ps, where polling would
// hold a P a busy thread needs, it polls only 256 times.
const spinWait = 100 * time.Microsecond

// newPool starts threads-1 goroutines. They hold the pool, not the stream,
// so the stream's cleanup can stop them.
func newPool(threads int) *pool {
	p := &pool{done: make(chan struct{}, 1)}
	if threads <= runtime.GOMAXPROCS(0) {
		p.spin = spinWait
	}
	p.wake = sync.NewCond(&p.mu)
	for w := 1; w < threads; w++ {
		go p.worker(w)
	}
	return p
}

// stop ends the pool's goroutines once they finish what they run.
func (p *pool) stop() {
	p.quit.Store(true)
	p.gen.Add(1)
	p.mu.Lock()
	p.wake.Broadcast()
	p.mu.Unlock()
}

func (p *pool) worker(w int) {
	debug.SetPanicOnFault(true) // see recoverFault
	var seen uint64
	for {
		g, ok := p.await(seen)
		if !ok {
			return
		}
		seen = g
		// A job ended and another began since g: this takes what is left
		// of the newer one, and finds nothing the next time round.
		if j := p.job.Load(); j != nil {
			j.run(w)
		}
	}
}

// await returns the generation once it is not seen: polling for p.spin,
// then asleep on wake. It reports false when the pool stops.
func (p *pool) await(seen uint64) (uint64, bool) {
	start := time.Now()
	for i := 1; ; i++ {
		if g := p.gen.Load(); g != seen {
			return g, !p.quit.Load()
		}
		if i%256 == 0 && time.Since(start) >= p.spin {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked.Add(1)
	for p.gen.Load() == seen {
		p.wake.Wait()
	}
	p.parked.Add(-1)
	return p.gen.Load(), !p.quit.Load()
}

// job is one call: n items in chunks; fn runs on items [lo, hi) with the
// index of the thread running it, for its scratch.
type job struct {
	s         *stream
	fn        func(worker, lo, hi int)
	n, chunks int
	next      atomic.Int64 // the next chunk to take
	left      atomic.Int64 // chunks not finished
	state     atomic.Int32 // jobRunning, jobWaited or jobDone
	done      chan struct{}
}

const (
	jobRunning = iota
	jobWaited  // the caller sleeps on done
	jobDone
)

// run takes chunks until none is left.
func (j *job) run(worker int) {
	for {
		c := int(j.next.Add(1) - 1)
		if c >= j.chunks {
			return
		}
		j.chunk(worker, c)
	}
}

func (j *job) chunk(worker, c int) {
	defer j.finished()
	defer j.s.recoverFault()
	j.fn(worker, j.n*c/j.chunks, j.n*(c+1)/j.chunks)
}

// finished counts a chunk done, and wakes the caller after the last one
// if it went to sleep.
func (j *job) finished() {
	if j.left.Add(-1) == 0 && j.state.Swap(jobDone) == jobWaited {
		j.done <- struct{}{}
	}
}

// run runs fn over n items in chunks on the pool and the calling goroutine
// (worker 0), and returns when every chunk has run.
func (p *pool) run(s *stream, n, chunks int, fn func(worker, lo, hi int)) {
	j := &job{s: s, fn: fn, n: n, chunks: chunks, done: p.done}
	j.left.Store(int64(chunks))
	p.job.Store(j)
	p.gen.Add(1)
	if p.parked.Load() > 0 {
		p.mu.Lock()
		p.wake.Broadcast()
		p.mu.Unlock()
	}
	j.run(0)
	start := time.Now()
	for i := 1; j.left.Load() > 0; i++ {
		if i%256 == 0 && time.Since(start) >= p.spin {
			if j.state.CompareAndSwap(jobRunning, jobWaited) {
				<-p.done
			}
			break
		}
	}
	p.job.Store(nil) // holds the stream and fn's captures no longer
}
