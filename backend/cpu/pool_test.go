package cpu

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// workers runs every item once, each chunk on one thread index below the
// backend's count, whatever the sizes; calls follow each other faster than
// the pool's threads go to sleep, and after they have (spinWait).
func TestWorkersRunEveryItemOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		s := New(threads).NewStream().(*stream)
		for _, n := range []int{1, 2, 7, 64, 1000} {
			for _, per := range []int{1, 100, grain, 10 * grain} {
				t.Run(fmt.Sprintf("threads=%d/n=%d/per=%d", threads, n, per), func(t *testing.T) {
					for call := range 50 {
						if call == 25 {
							time.Sleep(2 * spinWait)
						}
						seen := make([]atomic.Int32, n)
						var bad atomic.Int32
						s.workers(n, per, func(worker, lo, hi int) {
							if worker < 0 || worker >= threads || lo >= hi {
								bad.Add(1)
							}
							for i := lo; i < hi; i++ {
								seen[i].Add(1)
							}
						})
						require.Zero(t, bad.Load(), "chunks with a bad thread index or empty")
						for i := range seen {
							require.EqualValues(t, 1, seen[i].Load(), "item %d of %d, call %d", i, n, call)
						}
					}
				})
			}
		}
		s.Close()
	}
}

// Small work runs on the caller alone; large work is cut into chunks for
// every thread.
func TestWorkersCutBySize(t *testing.T) {
	s := New(4).NewStream().(*stream)
	defer s.Close()
	chunks := func(n, per int) int {
		var c atomic.Int32
		s.workers(n, per, func(_, _, _ int) { c.Add(1) })
		return int(c.Load())
	}
	require.Equal(t, 1, chunks(64, 32), "64 rows of 32: two thousand elements")
	require.Equal(t, 4, chunks(64, 256), "64 rows of 256: four grains")
	require.Equal(t, 4*chunksPerThread, chunks(1000, grain))
	require.Equal(t, 3, chunks(3, 10*grain))
}

// The pool's goroutines end when the stream is closed, and when it is
// collected unclosed. Earlier tests' pools may still be ending: the count
// is taken once it holds still.
func TestPoolGoroutinesEnd(t *testing.T) {
	steady := func() int {
		n, same := runtime.NumGoroutine(), 0
		for i := 0; same < 10 && i < 1000; i++ {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
			if m := runtime.NumGoroutine(); m != n {
				n, same = m, 0
				continue
			}
			same++
		}
		return n
	}
	settled := func(want int) bool {
		for range 200 {
			runtime.GC()
			if runtime.NumGoroutine() <= want {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	before := steady()
	b := New(6)
	s := b.NewStream().(*stream)
	s.workers(100, grain, func(_, _, _ int) {})
	require.Equal(t, before+5, runtime.NumGoroutine(), "five goroutines beside the caller")
	s.Close()
	require.True(t, settled(before), "goroutines left after Close: %d, %d before", runtime.NumGoroutine(), before)

	func() {
		s := b.NewStream().(*stream)
		s.workers(100, grain, func(_, _, _ int) {})
	}()
	require.True(t, settled(before), "goroutines left after the stream was dropped: %d, %d before", runtime.NumGoroutine(), before)
}

// BenchmarkHandOff times a call cut into a chunk for each of GOMAXPROCS
// threads, each chunk doing nothing: what a kernel's call pays before any
// work.
func BenchmarkHandOff(b *testing.B) {
	s := New(0).NewStream().(*stream)
	defer s.Close()
	n := s.b.threads
	for b.Loop() {
		s.workers(n, grain, func(_, _, _ int) {})
	}
}
