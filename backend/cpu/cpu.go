// Package cpu is the pure-Go backend: the reference every GPU backend is
// tested against, and the default where no GPU is. It runs each kernel as it
// is recorded, on every core, straight from the packed weight formats.
package cpu

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
)

// Backend runs kernels on the host's cores.
type Backend struct {
	threads int
	arenas  *arenaPool
	closed  atomic.Bool
	// widest is the most columns of any weight uploaded: the products'
	// packed x is sized for it at once, so that it is not grown (leaving
	// the narrower copy as garbage) within a prefill.
	widest atomic.Int64
}

// New returns a CPU backend whose streams each run kernels on threads
// threads, the calling goroutine and threads-1 kept by the stream (0:
// GOMAXPROCS's count, taken now).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Backend{threads: threads, arenas: newArenaPool()}
}

func (b *Backend) Name() string { return "cpu (" + human.Count(b.threads, "thread") + ")" }

// Close makes later work fail, as a GPU backend's does; traces already
// made are host memory and stay readable.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}

var errClosed = fmt.Errorf("cpu: %w", backend.ErrBackendClosed)

// tensor is host memory.
type tensor struct {
	data []float32
	// arena is set on a capture arena and the views of it (nil elsewhere).
	arena *arenaMasks
}

// arenaMasks is what a capture arena's masked attention entries held when
// it was handed out (had), and what a run then wrote there (wrote), when
// known: a recycled arena whose masked entries already hold what this run
// would write there is not written there again, half of what the capture
// of scores and patterns writes.
type arenaMasks struct {
	whole      []float32
	had, wrote maskLayout
}

// maskLayout says which entries of an attention scores (or pattern)
// capture are masked, holding -Inf (or 0); the zero value, nothing known.
type maskLayout struct {
	pattern                      bool
	heads, t, pos0, keys, window int
}

// masks is the arena record of t when t is the whole of a capture arena.
func masks(t backend.Tensor) *arenaMasks {
	x := t.(*tensor)
	if x.arena == nil || len(x.data) == 0 || len(x.data) != len(x.arena.whole) || &x.data[0] != &x.arena.whole[0] {
		return nil
	}
	return x.arena
}

func (t *tensor) Len() int { return len(t.data) }

// matrix is a weight in its file format, aliasing the file's mapping.
type matrix struct {
	w *model.Weight
	// f32 views the data directly when it is already float32.
	f32 []float32
	// int8 is the weight packed for the int8 GEMM (gemm8.go), made once.
	int8Once sync.Once
	int8     *int8Packed
}

func (m *matrix) Rows() int { return m.w.Rows }
func (m *matrix) Cols() int { return m.w.Cols }

func (b *Backend) Upload(w *model.Weight) (backend.Matrix, error) {
	if w == nil {
		return nil, fmt.Errorf("cpu: nil weight")
	}
	m := &matrix{w: w}
	for cols := int64(w.Cols); ; {
		if old := b.widest.Load(); cols <= old || b.widest.CompareAndSwap(old, cols) {
			break
		}
	}
	if w.Type() == gguf.F32 && len(w.Data) > 0 && uintptr(unsafe.Pointer(&w.Data[0]))%4 == 0 {
		m.f32 = unsafe.Slice((*float32)(unsafe.Pointer(&w.Data[0])), w.Rows*w.Cols)
	}
	return m, nil
}

// UploadGroup uploads each weight: the CPU reads them where they are.
func (b *Backend) UploadGroup(ws []*model.Weight) ([]backend.Matrix, error) {
	out := make([]backend.Matrix, len(ws))
	for i, w := range ws {
		m, err := b.Upload(w)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

func (b *Backend) NewStream() backend.Stream { return &stream{b: b} }

// Capabilities implements backend.Backend: tensors are Go memory, and
// flash attention captures its scores and pattern.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{HostTensors: true, AttentionCapture: true}
}

var (
	_ backend.HostTensors      = (*stream)(nil)
	_ backend.AttentionCapture = (*stream)(nil)
)

// stream runs kernels eagerly; it remembers the first error for Sync.
type stream struct {
	b   *Backend
	mu  sync.Mutex // guards err against workers failing together
	err error
	// The AVX-512 GEMM's packed x and per-thread scratch, kept from call to
	// call: made afresh, a prefill's garbage raised its peak memory by 60%.
	xpack  []float32
	gemm   []gemmScratch
	groups []gemmGroup // the current product's groups (gemmGroups)
	// Fast precision's int8 GEMM (gemm8.go): x quantized by code block
	// length, per-thread scratch.
	prec  backend.Precision
	int8x map[int]*int8X
	int8  []int8Scratch
	// Attention's packed values and per-thread blocks (attention.go).
	vpack  []float32
	attn   []attnScratch
	blocks []attnBlock // the current call's blocks (attnBlocks)
	// RoPE's cosines and sines by position, for each rope (see angles).
	rope map[*model.Rope]*ropeTable
	// pool runs work on the stream's threads (pool.go), made on its first
	// call with more than one chunk.
	pool *pool
}

func data(t backend.Tensor) []float32 { return t.(*tensor).data }

func (s *stream) Alloc(name string, n int) (backend.Tensor, error) {
	if s.b.closed.Load() {
		return nil, errClosed
	}
	if err := checkAlloc(name, n); err != nil {
		return nil, err
	}
	return &tensor{data: make([]float32, n)}, nil
}

func checkAlloc(name string, n int) error {
	if n < 0 {
		return fmt.Errorf("cpu: allocating %s: negative size %d", name, n)
	}
	// Go cannot recover from failing to map a huge slice (the process
	// dies), so a request no machine of this size could hold is an error.
	if ram := physicalMemory(); ram > 0 && uint64(n) > ram/4 {
		return fmt.Errorf("cpu: allocating %s: %s is more than this machine's %s of memory",
			name, human.Bytes(4*int64(min(n, math.MaxInt64/4))), human.Bytes(int64(min(ram, math.MaxInt64))))
	}
	return nil
}

func (s *stream) Free(backend.Tensor) {}

func (s *stream) Write(dst backend.Tensor, off int, src []float32) {
	d := data(dst)
	if off < 0 || off > len(d) || len(src) > len(d)-off { // no off+len: it could wrap
		s.fail(fmt.Errorf("cpu: write of %d elements at %d into a tensor of %d", len(src), off, len(d)))
		return
	}
	copy(d[off:], src)
}

func (s *stream) Read(src backend.Tensor, off int, dst []float32) error {
	d := data(src)
	if off < 0 || off > len(d) || len(dst) > len(d)-off {
		return fmt.Errorf("cpu: read of %d elements at %d from a tensor of %d", len(dst), off, len(d))
	}
	if err := s.Sync(); err != nil {
		return err
	}
	copy(dst, d[off:])
	return nil
}

func (s *stream) ReadBatch(reqs []backend.ReadRequest) error {
	for _, q := range reqs {
		if err := s.Read(q.Src, q.Off, q.Dst); err != nil {
			return err
		}
	}
	return nil
}

// Sync returns the request's first error and forgets it: the next request
// starts clean.
func (s *stream) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.err
	s.err = nil
	if err == nil && s.b.closed.Load() {
		err = errClosed
	}
	return err
}

// Flush has nothing to submit: kernels ran as they were recorded.
func (s *stream) Flush() {}

// Close stops the stream's threads (a later call starts them again); its
// tensors are Go memory.
func (s *stream) Close() {
	if s.pool != nil {
		s.pool.stop()
		s.pool = nil
	}
}

// Download has nothing to do: CPU tensors are host memory.
func (s *stream) Download(...backend.Tensor) {}

func (s *stream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// parallel runs fn over [0, n) in chunks on the stream's threads; per is
// an item's size in elements, which sets the smallest chunk (see grain).
func (s *stream) parallel(n, per int, fn func(lo, hi int)) {
	s.workers(n, per, func(_, lo, hi int) { fn(lo, hi) })
}

// grain is the fewest elements a chunk of parallel work holds: a call
// handed to the other threads costs 0.25 µs on 2 threads with nothing to
// do (BenchmarkHandOff), more with more threads and with the outputs'
// cache lines moving between cores; a row-wise kernel takes about a
// microsecond for a few thousand elements. Work of less than two grains
// runs on the calling goroutine alone.
const grain = 4096

// chunksPerThread is how many chunks a call is cut into per thread at
// most: enough for threads that start late or get slower chunks to even
// out, few enough that taking them costs little.
const chunksPerThread = 4

// workers is parallel that also tells fn the index of the thread running
// it, below the backend's thread count, for per-thread scratch. fn may run
// many times on one thread, and must give the same results however [0, n)
// is cut.
func (s *stream) workers(n, per int, fn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	chunks := min(n, s.b.threads*chunksPerThread, n*per/grain)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if chunks <= 1 || s.b.threads == 1 {
		defer s.recoverFault()
		fn(0, 0, n)
		return
	}
	if s.pool == nil {
		s.pool = newPool(s.b.threads)
		runtime.AddCleanup(s, (*pool).stop, s.pool)
	}
	s.pool.run(s, n, chunks, fn)
}

// recoverFault turns a memory fault into the stream's error. Weights are read
// from the model file's mapping, and a file truncated underneath it faults;
// a notebook kernel should get an error, not die. Other panics are bugs and
// go on.
func (s *stream) recoverFault() {
	r := recover()
	if r == nil {
		return
	}
	if f, ok := r.(interface{ Addr() uintptr }); ok {
		s.fail(fmt.Errorf("cpu: memory fault reading address %#x: was the model file changed on disk while in use? (%v)", f.Addr(), r))
		return
	}
	panic(r)
}

// HostData implements backend.HostTensors: a tensor is its Go slice.
func (s *stream) HostData(t backend.Tensor) []float32 { return data(t) }

func (s *stream) View(t backend.Tensor, off, n int) backend.Tensor {
	return &tensor{data: data(t)[off : off+n : off+n], arena: t.(*tensor).arena}
}
