// Package trace holds what a prefill captured: tokens, model facts and named
// tensors, saved as a NumPy .npz with a JSON manifest so Python can read it.
package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Tensor is a captured float32 array in row-major order.
type Tensor struct {
	Shape []int
	Data  []float32
}

// At returns the element at the given index, one coordinate per dimension;
// it panics, naming the dimension, for a wrong count or a coordinate out of
// range (either would otherwise read some other element), Data shorter
// than Shape says, or a nil tensor.
func (t *Tensor) At(idx ...int) float32 {
	if t == nil {
		panic("trace: At of a nil *Tensor")
	}
	// The panics format a copy: formatting idx itself would move every
	// call's coordinates to the heap (viz reads patterns through At).
	if len(idx) != len(t.Shape) {
		panic(outOfRange(slices.Clone(idx), t.Shape))
	}
	off := 0
	for i, d := range t.Shape {
		if idx[i] < 0 || idx[i] >= d {
			panic(outOfRange(slices.Clone(idx), t.Shape))
		}
		off = off*d + idx[i]
	}
	if off >= len(t.Data) {
		panic(fmt.Sprintf("trace: At%v on a tensor of shape %v that holds %d values", slices.Clone(idx), t.Shape, len(t.Data)))
	}
	return t.Data[off]
}

func outOfRange(idx, shape []int) string {
	if len(idx) != len(shape) {
		return fmt.Sprintf("trace: At%v on a tensor of shape %v: want %d coordinates, one per dimension", idx, shape, len(shape))
	}
	for i, d := range shape {
		if idx[i] < 0 || idx[i] >= d {
			return fmt.Sprintf("trace: At%v on a tensor of shape %v: coordinate %d is %d, out of range 0..%d", idx, shape, i, idx[i], d-1)
		}
	}
	return ""
}

// ErrOtherModel is the error of an analysis given a trace that another
// model made: its numbers would index the wrong weights.
var ErrOtherModel = errors.New("the trace is from another model")

// Model is what a reader of a trace needs to know about the model.
type Model struct {
	Name    string `json:"name"`
	Arch    string `json:"architecture"`
	Layers  int    `json:"layers"`
	DModel  int    `json:"d_model"`
	FFN     int    `json:"ffn"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	HeadDim int    `json:"head_dim"`
	Vocab   int    `json:"vocab"`
	// LearnedPos says the model adds a learned position embedding
	// (hook_pos_embed) to the token embedding, as GPT-2 does.
	LearnedPos bool `json:"learned_positions,omitempty"`
	// Windows is each layer's sliding attention window, 0 for a global
	// layer; nil when no layer has one.
	Windows []int `json:"windows,omitempty"`
	// Experts is a mixture's number of experts, 0 for a dense model.
	Experts int `json:"experts,omitempty"`
}

// Trace is the result of one prefill. A trace made on a GPU keeps its
// captures in device memory until they are read: Get reads one capture and
// keeps it, Rows reads a slice and Load several captures in one go; only
// what is read takes host memory. Close frees the device memory (so does
// closing the session or engine). A trace made on the CPU is Go memory from
// the start. Either way Close hands the host memory of what Get never
// handed out back to the backend, for the next trace (the CPU's next
// prefill writes it while it is still in cache; a GPU session's next trace
// reads into it, its pages already made); those captures then read as
// ErrClosed, and what Get handed out stays readable. A capture whose
// values are an earlier one's (the residual stream entering a layer and
// the one leaving the layer before it; a KV cache filled from position 0
// and its keys or values) may share its memory, as in TransformerLens's
// cache: change a copy. A trace may be read from several goroutines.
type Trace struct {
	Model   Model
	Backend string
	Tokens  []int32  // this prefill's tokens
	Pieces  []string // their display strings
	Pos0    int      // position of Tokens[0]
	// Predicted holds the argmax token of each computed logit row, when
	// asked for; -1 for a row holding a NaN.
	Predicted []int32
	Names     []string // capture order
	// Lens is the logit lens, when computed (engine.Engine.LogitLens).
	Lens *Lens

	mu      sync.Mutex
	tensors map[string]*Tensor // read so far (every capture, for a host trace)
	shapes  map[string][]int   // every capture's shape
	src     Source             // where the unread captures are; nil when all are read
	arenas  map[string]*Arena  // the memory each capture in host memory is a view of
}

// Arena is Go memory that captures are views of: a host trace's (PutView),
// or what a Lender lent a read of a GPU trace's capture into.
// Close calls Recycle unless Get handed out one of those views, which the
// caller may keep: what Rows, Elements, RowNorms, NonFiniteIn, Save and the
// analyses (Point, Head, HeadResults, ExpertUsage, the log-probabilities
// and losses) read is copied or used under the trace's lock, never handed
// out.
type Arena struct {
	Recycle   func()
	handedOut bool
}

// Source holds a trace's unread captures, in a GPU's memory.
type Source interface {
	// Read fills each request's Dst from its capture, starting at element
	// Off, in as few device submissions as it can.
	Read(reqs []Request) error
	// Free releases the captures; later Reads fail with an error wrapping ErrClosed.
	Free()
}

// Lender is a Source that lends the host memory whole captures are read
// into and takes it back when the trace closes. A sweep that reads each
// trace whole then reads into memory whose pages are made: making fresh
// memory is slower than the H200's host link brings a trace back.
type Lender interface {
	Source
	// Lend returns a slice of each size that it has, nil where it has none.
	Lend(sizes []int) [][]float32
	// Return takes back a slice Lend may hand out again.
	Return(data []float32)
}

// NormSource is a Source that takes each row's L2 norm where the capture
// lies, so that only the norms travel (Trace.RowNorms).
type NormSource interface {
	Source
	// RowNorms fills dst with the norm of each of len(dst) rows of the capture.
	RowNorms(name string, dst []float32) error
}

// Request is one read from a Source.
type Request struct {
	Name string
	Off  int
	Dst  []float32
}

// ErrNotCaptured is wrapped by the error of a read or analysis that needs a
// capture point the trace does not have.
var ErrNotCaptured = errors.New("not captured")

// ErrClosed is wrapped by the error of a read of a capture whose device
// memory was freed (Trace.Close, or the session or engine closed) before
// it was read, or whose host memory Close handed back (all but what Get
// returned).
var ErrClosed = errors.New("its memory was freed (the trace, its session or its engine was closed) and Get had not returned this capture")

// Lens is the logit lens: the final norm and unembedding applied to each
// layer's resid_post. Prob[l][t] is the top token's probability at layer l
// and position t, Token its id and Piece its display string; where the
// logits hold a NaN, Prob is NaN, Token -1 and Piece "NaN".
type Lens struct {
	Prob  [][]float32 `json:"prob"`
	Token [][]int32   `json:"token"`
	Piece [][]string  `json:"piece"`
}

// New returns an empty trace.
func New() *Trace { return &Trace{tensors: map[string]*Tensor{}, shapes: map[string][]int{}} }

// errNilTrace is the error of a call on a nil *Trace: most often the
// trace of a call that failed, its error unchecked.
var errNilTrace = errors.New("trace: a nil *Trace (did the call that made it fail?)")

// Put stores a tensor under name, keeping capture order. It panics on a
// nil trace or tensor, as a write to a nil map does.
func (t *Trace) Put(name string, x *Tensor) {
	t.PutView(name, x, nil)
}

// PutView stores a capture that is a view of a, which Close may hand back
// (Put when a is nil). It panics on a nil trace or tensor.
func (t *Trace) PutView(name string, x *Tensor, a *Arena) {
	if x == nil {
		panic(fmt.Errorf("trace: Put of %s: a nil *Tensor", name))
	}
	t.lock()
	defer t.mu.Unlock()
	t.add(name, x.Shape)
	t.tensors[name] = x
	delete(t.arenas, name)
	if a != nil {
		if t.arenas == nil {
			t.arenas = map[string]*Arena{}
		}
		t.arenas[name] = a
	}
}

// PutUnread names a capture that src holds until it is read. It panics on
// a nil trace or source.
func (t *Trace) PutUnread(name string, shape []int, src Source) {
	if src == nil {
		panic(fmt.Errorf("trace: PutUnread of %s: a nil Source", name))
	}
	t.lock()
	defer t.mu.Unlock()
	t.add(name, shape)
	delete(t.tensors, name)
	delete(t.arenas, name)
	t.src = src
}

// lock locks a trace that a Put is given; a nil one panics with what it is.
func (t *Trace) lock() {
	if t == nil {
		panic(errNilTrace)
	}
	t.mu.Lock()
}

func (t *Trace) add(name string, shape []int) {
	if _, ok := t.shapes[name]; !ok {
		t.Names = append(t.Names, name)
	}
	t.shapes[name] = shape
}

// Get returns a captured tensor, reading it from the device the first time;
// the error lists what was captured.
func (t *Trace) Get(name string) (*Tensor, error) {
	if t == nil {
		return nil, errNilTrace
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	x, err := t.read(name)
	if a := t.arenas[name]; err == nil && a != nil {
		a.handedOut = true
	}
	return x, err
}

// read returns the named capture, reading it from the device the first
// time; t.mu is held.
func (t *Trace) read(name string) (*Tensor, error) {
	if x, ok := t.tensors[name]; ok {
		return x, nil
	}
	if _, ok := t.shapes[name]; !ok {
		return nil, t.notCaptured(name)
	}
	if err := t.load([]string{name}); err != nil {
		return nil, err
	}
	return t.tensors[name], nil
}

// with calls fn with the named capture under the trace's lock, reading it
// from the device first if need be; readErr, unless nil, adds to the error
// of a capture that is missing or cannot be read. fn copies what it keeps
// and calls no method of t that locks it: the capture is not handed out,
// so Close can still give its memory to the next prefill (a sweep that
// computes a metric from each trace then reuses its arenas), and no Close
// takes it while fn reads.
func (t *Trace) with(name string, readErr func(error) error, fn func(x *Tensor) error) error {
	if t == nil {
		return errNilTrace
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	x, err := t.read(name)
	switch {
	case err != nil && readErr != nil:
		return readErr(err)
	case err != nil:
		return err
	}
	return fn(x)
}

// Tensor is Get for callers that have checked the name: nil when it was
// not captured or could not be read (Get says why).
func (t *Trace) Tensor(name string) *Tensor {
	x, _ := t.Get(name)
	return x
}

func (t *Trace) notCaptured(name string) error {
	if err := t.Model.layerRange(name); err != nil {
		return err
	}
	have := slices.Clone(t.Names)
	if len(have) > 8 {
		have = append(have[:8], fmt.Sprintf("... (%d in all)", len(t.Names)))
	}
	return fmt.Errorf("trace: %s was %w (captured: %s)", name, ErrNotCaptured, strings.Join(have, ", "))
}

// Has reports whether name was captured (false in a nil trace).
func (t *Trace) Has(name string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.shapes[name]
	return ok
}

// Shape is a capture's shape, known without reading it; nil when name was
// not captured (or the trace is nil).
func (t *Trace) Shape(name string) []int {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.shapes[name])
}

// Load reads the named captures (every one when none is named) that are
// still on the device, in one batch, and keeps them until Close.
func (t *Trace) Load(names ...string) error {
	if t == nil {
		return errNilTrace
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(names) == 0 {
		names = t.Names
	}
	var unread []string
	for _, name := range names {
		if _, ok := t.shapes[name]; !ok {
			return t.notCaptured(name)
		}
		if _, ok := t.tensors[name]; !ok {
			unread = append(unread, name)
		}
	}
	return t.load(unread)
}

// load reads unread captures; t.mu is held. The captures are read in
// groups of about loadGroup bytes, and the next group's host memory is made
// (allocated and its pages faulted in, as fast as filling it) while this
// group is read, so that the two overlap rather than add up.
func (t *Trace) load(names []string) error {
	if len(names) == 0 {
		return nil
	}
	var groups [][]string
	var bytes int
	for _, name := range names {
		if len(groups) == 0 || bytes >= loadGroup {
			groups, bytes = append(groups, nil), 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], name)
		bytes += 4 * elements(t.shapes[name])
	}
	lender, _ := t.src.(Lender)
	made := make(chan [][]float32, 1)
	makeGroup := func(g []string) {
		sizes := make([]int, len(g))
		for i, name := range g {
			sizes[i] = elements(t.shapes[name])
		}
		if lender == nil {
			made <- MakeData(sizes)
			return
		}
		data := lender.Lend(sizes)
		missing := slices.Clone(sizes)
		for i := range data {
			if data[i] != nil {
				missing[i] = 0
			}
		}
		for i, d := range MakeData(missing) {
			if d != nil {
				data[i] = d
			}
		}
		made <- data
	}
	go makeGroup(groups[0])
	for k, g := range groups {
		data := <-made
		if k+1 < len(groups) {
			go makeGroup(groups[k+1])
		}
		reqs := make([]Request, len(g))
		for i, name := range g {
			reqs[i] = Request{Name: name, Dst: data[i]}
		}
		if err := t.src.Read(reqs); err != nil {
			if k+1 < len(groups) {
				data = append(data, <-made...) // the group being made
			}
			for _, d := range data {
				if lender != nil && d != nil {
					lender.Return(d) // what a read into it left there is no one's
				}
			}
			return fmt.Errorf("trace: reading %s: %w", g[0], err)
		}
		for i, name := range g {
			data := reqs[i].Dst
			t.tensors[name] = &Tensor{Shape: t.shapes[name], Data: data}
			if lender != nil {
				if t.arenas == nil {
					t.arenas = map[string]*Arena{}
				}
				t.arenas[name] = &Arena{Recycle: func() { lender.Return(data) }}
			}
		}
	}
	return nil
}

// loadGroup is how many bytes of captures load reads at a time.
var loadGroup = 512 << 20 // a variable for the tests

// MakeData makes a slice of each size (nil for 0) on every core, its pages
// made ready for writing. Go zeroes a large allocation on the goroutine that
// makes it, and a capture-all trace is gigabytes: on the H200 that zeroing
// on one core took a third of a bonsai-8b capture-all prefill.
func MakeData(sizes []int) [][]float32 {
	data := make([][]float32, len(sizes))
	parallel(len(sizes), func(i int) {
		if sizes[i] > 0 {
			data[i] = make([]float32, sizes[i])
		}
	})
	const piece = 8 << 20 // elements: a share of work for one core
	var pieces [][]float32
	for _, d := range data {
		for len(d) > 0 {
			n := min(len(d), piece)
			pieces, d = append(pieces, d[:n]), d[n:]
		}
	}
	parallel(len(pieces), func(i int) { prefault(pieces[i]) })
	return data
}

// parallel calls fn(i) for every i in [0, n) on every core.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// Rows returns rows [from, to) of a capture's first dimension (positions of
// [T, ...] points, heads of [heads, T, keys] patterns). A capture still on
// the device has only those rows read, and they are not kept.
func (t *Trace) Rows(name string, from, to int) (*Tensor, error) {
	if t == nil {
		return nil, errNilTrace
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	shape, ok := t.shapes[name]
	if !ok {
		return nil, t.notCaptured(name)
	}
	if len(shape) == 0 || from < 0 || to > shape[0] || from > to {
		return nil, fmt.Errorf("trace: rows %d..%d of %s %v are out of range", from, to, name, shape)
	}
	row := elements(shape[1:])
	out := &Tensor{Shape: append([]int{to - from}, shape[1:]...), Data: make([]float32, (to-from)*row)}
	if x, ok := t.tensors[name]; ok {
		copy(out.Data, x.Data[from*row:to*row])
		return out, nil
	}
	if err := t.src.Read([]Request{{Name: name, Off: from * row, Dst: out.Data}}); err != nil {
		return nil, fmt.Errorf("trace: reading rows %d..%d of %s: %w", from, to, name, err)
	}
	return out, nil
}

// Elements returns a capture's elements at the given flat (row-major)
// indices. A capture still on the device has only those elements read, in
// one batch (runs of consecutive indices as one range), and not kept: head
// scores read a pattern's few diagonals this way, not the whole pattern.
func (t *Trace) Elements(name string, idx []int) ([]float32, error) {
	if t == nil {
		return nil, errNilTrace
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	shape, ok := t.shapes[name]
	if !ok {
		return nil, t.notCaptured(name)
	}
	n := elements(shape)
	for _, i := range idx {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("trace: element %d of %s %v is out of range", i, name, shape)
		}
	}
	out := make([]float32, len(idx))
	if x, ok := t.tensors[name]; ok {
		for k, i := range idx {
			out[k] = x.Data[i]
		}
		return out, nil
	}
	var reqs []Request
	for k := 0; k < len(idx); {
		run := 1
		for k+run < len(idx) && idx[k+run] == idx[k]+run {
			run++
		}
		reqs = append(reqs, Request{Name: name, Off: idx[k], Dst: out[k : k+run]})
		k += run
	}
	if err := t.src.Read(reqs); err != nil {
		return nil, fmt.Errorf("trace: reading %d elements of %s: %w", len(idx), name, err)
	}
	return out, nil
}

// RowNorms returns the L2 norm of each row of a capture's first dimension
// (each position of a [T, ...] point). A capture still on a device that
// can reduce (NormSource) is reduced there and only the norms are read;
// otherwise the rows are read a block at a time and not kept.
func (t *Trace) RowNorms(name string) ([]float64, error) {
	if t == nil {
		return nil, errNilTrace
	}
	t.mu.Lock()
	shape, ok := t.shapes[name]
	x, kept := t.tensors[name]
	ns, reduces := t.src.(NormSource)
	var err error
	switch {
	case !ok:
		err = t.notCaptured(name)
	case len(shape) == 0:
		err = fmt.Errorf("trace: %s is a scalar; it has no rows", name)
	}
	var out []float64
	if err == nil && kept { // under the lock: Close may hand x's memory back
		out = make([]float64, shape[0])
		hostNorms(out, x.Data, elements(shape[1:]))
	}
	t.mu.Unlock()
	if err != nil || kept {
		return out, err
	}
	rows, width := shape[0], elements(shape[1:])
	out = make([]float64, rows)
	switch {
	case reduces:
		n := make([]float32, rows)
		if err := ns.RowNorms(name, n); err != nil {
			return nil, fmt.Errorf("trace: norms of %s: %w", name, err)
		}
		for i, v := range n {
			out[i] = float64(v)
		}
	default:
		block := max(1, (1<<20)/max(1, width)) // rows per read: about 4 MiB
		for from := 0; from < rows; from += block {
			to := min(rows, from+block)
			x, err := t.Rows(name, from, to)
			if err != nil {
				return nil, err
			}
			hostNorms(out[from:to], x.Data, width)
		}
	}
	return out, nil
}

// hostNorms writes the norm of each width-wide row of x; float64, because a
// float32 sum of squares loses digits over wide rows.
func hostNorms(out []float64, x []float32, width int) {
	for r := range out {
		sum := 0.0
		for _, v := range x[r*width : (r+1)*width] {
			sum += float64(v) * float64(v)
		}
		out[r] = math.Sqrt(sum)
	}
}

// each calls fn with every capture in order without keeping the ones it
// reads: they pass through one buffer, the size of the largest, so a
// trace is written or scanned with at most one capture extra in host
// memory. fn must not keep x.
func (t *Trace) each(fn func(name string, x *Tensor) error) error {
	if t == nil {
		return errNilTrace
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	largest := 0
	for _, name := range t.Names {
		if _, ok := t.tensors[name]; !ok {
			largest = max(largest, elements(t.shapes[name]))
		}
	}
	buf := make([]float32, largest)
	for _, name := range t.Names {
		x, ok := t.tensors[name]
		if !ok {
			n := elements(t.shapes[name])
			if err := t.src.Read([]Request{{Name: name, Dst: buf[:n]}}); err != nil {
				return fmt.Errorf("trace: reading %s: %w", name, err)
			}
			x = &Tensor{Shape: t.shapes[name], Data: buf[:n]}
		}
		if err := fn(name, x); err != nil {
			return err
		}
	}
	return nil
}

// Close frees the device memory of the captures not read yet and hands back
// the host memory of the captures Get never handed out, which then read as
// ErrClosed; those Get handed out (and the others in their memory) stay.
// Closing a nil trace does nothing.
func (t *Trace) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	src := t.src
	if src == nil && len(t.arenas) > 0 {
		src = closedSource{}
		t.src = src
	}
	var recycle []func()
	for _, name := range t.Names {
		a := t.arenas[name]
		if a == nil || a.handedOut {
			continue
		}
		delete(t.tensors, name)
		delete(t.arenas, name)
		if a.Recycle != nil {
			recycle, a.Recycle = append(recycle, a.Recycle), nil
		}
	}
	t.mu.Unlock()
	// Last first: a backend that hands back the last arena it took back
	// first gives the next prefill of this layout each arena in the place
	// it had here.
	for _, r := range slices.Backward(recycle) {
		r()
	}
	if src != nil {
		src.Free()
	}
	return nil
}

// closedSource is a closed host trace's: what Close handed back is gone.
type closedSource struct{}

func (closedSource) Read([]Request) error { return ErrClosed }
func (closedSource) Free()                {}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// NonFinite counts the NaN and infinite values of a capture.
type NonFinite struct {
	NaN    int `json:"nan,omitempty"`
	PosInf int `json:"pos_inf,omitempty"`
	NegInf int `json:"neg_inf,omitempty"`
}

// Any reports whether there is any non-finite value.
func (n NonFinite) Any() bool { return n.NaN+n.PosInf+n.NegInf > 0 }

func (n NonFinite) String() string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{n.NaN, "NaN"}, {n.PosInf, "+Inf"}, {n.NegInf, "-Inf"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "finite"
	}
	return strings.Join(parts, ", ")
}

// NonFiniteIn counts the non-finite values of the named capture. The -Inf
// that masks attention scores above the diagonal (and outside a sliding
// window) is not counted: it is how the attention works, not a fault; nor
// is a -Inf router logit, which is how an expert is ablated.
func (t *Trace) NonFiniteIn(name string) NonFinite {
	var n NonFinite
	_ = t.with(name, nil, func(x *Tensor) error {
		n = t.Model.nonFinite(name, x)
		return nil
	})
	return n
}

func (m *Model) nonFinite(name string, x *Tensor) NonFinite {
	var n NonFinite
	masked := func(int) bool { return false }
	layer, p := SplitPoint(name)
	if p == AttnScores && len(x.Shape) == 3 {
		q, k := x.Shape[1], x.Shape[2] // [heads, T, Pos0+T]
		pos0, window := k-q, 0
		if layer >= 0 && layer < len(m.Windows) {
			window = m.Windows[layer]
		}
		masked = func(i int) bool {
			p, j := pos0+(i/k)%q, i%k
			return j > p || (window > 0 && p-j >= window)
		}
	}
	if p == MLPRouterLogits {
		masked = func(int) bool { return true }
	}
	for i, v := range x.Data {
		switch {
		case v != v:
			n.NaN++
		case math.IsInf(float64(v), 1):
			n.PosInf++
		case math.IsInf(float64(v), -1) && !masked(i):
			n.NegInf++
		}
	}
	return n
}

// FirstNonFinite returns the first capture, in capture order (the order
// the prefill reached them), that holds NaN or Inf, and its counts; ""
// when every value is finite. Captures on the device are scanned, not kept.
func (t *Trace) FirstNonFinite() (string, NonFinite, error) {
	var first string
	var count NonFinite
	stop := errors.New("found")
	err := t.each(func(name string, x *Tensor) error {
		if n := t.Model.nonFinite(name, x); n.Any() {
			first, count = name, n
			return stop
		}
		return nil
	})
	if err != nil && err != stop {
		return "", NonFinite{}, err
	}
	return first, count, nil
}

// LayerOf is the layer of a per-layer capture name ("blocks.N. ..."), or
// -1 for hook_embed, ln_final.hook_normalized and logits.
func LayerOf(name string) int {
	l, _ := SplitPoint(name)
	return l
}

// jsonFloat writes a non-finite float as a string, which encoding/json
// refuses to write as a number.
type jsonFloat float32

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Infinity"`), nil
	}
	return json.Marshal(float32(f))
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "NaN":
			*f = jsonFloat(math.NaN())
		case "Infinity":
			*f = jsonFloat(math.Inf(1))
		case "-Infinity":
			*f = jsonFloat(math.Inf(-1))
		default:
			return fmt.Errorf("trace: %q is not a number", s)
		}
		return nil
	}
	var v float32
	err := json.Unmarshal(b, &v)
	*f = jsonFloat(v)
	return err
}

type lensJSON struct {
	Prob  [][]jsonFloat `json:"prob"`
	Token [][]int32     `json:"token"`
	Piece [][]string    `json:"piece"`
}

// MarshalJSON writes the lens; a NaN probability (from a model that went
// non-finite) is written as "NaN".
func (l Lens) MarshalJSON() ([]byte, error) {
	j := lensJSON{Token: l.Token, Piece: l.Piece}
	if l.Prob != nil {
		j.Prob = make([][]jsonFloat, len(l.Prob))
	}
	for i, row := range l.Prob {
		j.Prob[i] = make([]jsonFloat, len(row))
		for k, p := range row {
			j.Prob[i][k] = jsonFloat(p)
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *Lens) UnmarshalJSON(b []byte) error {
	var j lensJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = Lens{Token: j.Token, Piece: j.Piece}
	if j.Prob != nil {
		l.Prob = make([][]float32, len(j.Prob))
	}
	for i, row := range j.Prob {
		l.Prob[i] = make([]float32, len(row))
		for k, p := range row {
			l.Prob[i][k] = float32(p)
		}
	}
	return nil
}

// Matches says whether a trace made by model m can be read with the weights
// of model want: their shapes are the same. A fact that m does not record
// (0, as in a manifest written before it existed) is not compared; names are
// not either, as a fine-tune keeps its base's shape.
func (m Model) Matches(want Model) error {
	facts := []struct {
		what      string
		got, want int
	}{
		{"layers", m.Layers, want.Layers}, {"d_model", m.DModel, want.DModel}, {"ffn", m.FFN, want.FFN},
		{"heads", m.Heads, want.Heads}, {"kv_heads", m.KVHeads, want.KVHeads}, {"head_dim", m.HeadDim, want.HeadDim},
		{"vocab", m.Vocab, want.Vocab}, {"experts", m.Experts, want.Experts},
	}
	for _, f := range facts {
		if f.got != 0 && f.got != f.want {
			return fmt.Errorf("%w: it was made by %s, with %s %d, not by %s, with %d", ErrOtherModel, m.describe(), f.what, f.got, want.describe(), f.want)
		}
	}
	if m.Arch != "" && m.Arch != want.Arch {
		return fmt.Errorf("%w: it was made by %s, not by %s", ErrOtherModel, m.describe(), want.describe())
	}
	return nil
}

func (m Model) describe() string {
	if m.Name == "" {
		return fmt.Sprintf("a %s model", m.Arch)
	}
	return fmt.Sprintf("%s (%s)", m.Name, m.Arch)
}
