package trace

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// memSource stands in for a GPU: it holds captures and records each read.
type memSource struct {
	mu        sync.Mutex
	data      map[string][]float32
	reads     []Request
	calls     []int             // len(reads) after each Read
	bufs      map[*float32]bool // the host buffers reads were made into
	closed    bool
	failAfter int // Reads that succeed before they fail; 0: none fails
}

func (m *memSource) Read(reqs []Request) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.failAfter > 0 && len(m.calls) >= m.failAfter {
		return errors.New("the device went away")
	}
	defer func() { m.calls = append(m.calls, len(m.reads)) }()
	for _, q := range reqs {
		copy(q.Dst, m.data[q.Name][q.Off:])
		m.reads = append(m.reads, Request{Name: q.Name, Off: q.Off, Dst: q.Dst})
		if len(q.Dst) > 0 {
			m.bufs[unsafe.SliceData(q.Dst)] = true
		}
	}
	return nil
}

func (m *memSource) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
}

// lazyTwin returns a trace whose captures a memSource holds, and the same
// trace in host memory.
func lazyTwin() (*Trace, *Trace, *memSource) {
	src := &memSource{data: map[string][]float32{}, bufs: map[*float32]bool{}}
	lazy, eager := New(), New()
	for _, tr := range []*Trace{lazy, eager} {
		tr.Model = Model{Name: "m", Arch: "llama", Layers: 2, DModel: 4, Heads: 2}
		tr.Tokens, tr.Pieces = []int32{1, 2, 3}, []string{"<s>", " a", "b"}
	}
	for _, c := range []struct {
		name  string
		shape []int
	}{{"hook_embed", []int{3, 4}}, {"blocks.0.attn.hook_pattern", []int{2, 3, 3}}, {"blocks.1.hook_resid_post", []int{3, 4}}, {"logits", []int{3, 7}}} {
		data := seq(elements(c.shape))
		src.data[c.name] = data
		lazy.PutUnread(c.name, c.shape, src)
		eager.Put(c.name, &Tensor{Shape: c.shape, Data: data})
	}
	return lazy, eager, src
}

func TestRowsReadOnlyTheirRows(t *testing.T) {
	lazy, eager, src := lazyTwin()
	p, err := lazy.Pattern(0, 1)
	require.NoError(t, err)
	want, err := eager.Pattern(0, 1)
	require.NoError(t, err)
	require.Equal(t, want.Data, p.Data)
	require.Equal(t, []Request{{Name: "blocks.0.attn.hook_pattern", Off: 9, Dst: p.Data}}, src.reads, "one head, nothing else")

	rows, err := lazy.Rows("hook_embed", 1, 3)
	require.NoError(t, err)
	require.Equal(t, []int{2, 4}, rows.Shape)
	require.Equal(t, eager.Tensor("hook_embed").Data[4:], rows.Data)
	require.Len(t, src.reads, 2)
	require.Equal(t, 4, src.reads[1].Off)
	require.Len(t, src.reads[1].Dst, 8)

	_, err = lazy.Rows("hook_embed", 2, 4)
	require.EqualError(t, err, "trace: rows 2..4 of hook_embed [3 4] are out of range")
	_, err = lazy.Rows("hook_z", 0, 1)
	require.ErrorContains(t, err, "hook_z was not captured")

	require.Equal(t, []int{3, 7}, lazy.Shape("logits"))
	require.Len(t, src.reads, 2, "Shape reads nothing")
	x, err := lazy.Get("logits")
	require.NoError(t, err)
	require.Equal(t, eager.Tensor("logits").Data, x.Data)
	_, err = lazy.Get("logits")
	require.NoError(t, err)
	require.Len(t, src.reads, 3, "Get reads once and keeps it")
}

// A trace on the device saves the same files as one in host memory, and
// its captures pass through one buffer rather than all being read into
// host memory; none is kept.
func TestLazyTraceSavesWhatAHostTraceSaves(t *testing.T) {
	lazy, eager, src := lazyTwin()
	dirs := []string{filepath.Join(t.TempDir(), "lazy"), filepath.Join(t.TempDir(), "eager")}
	require.NoError(t, lazy.Save(dirs[0]))
	require.NoError(t, eager.Save(dirs[1]))
	for _, f := range []string{"trace.npz", "manifest.json"} {
		a, err := os.ReadFile(filepath.Join(dirs[0], f))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dirs[1], f))
		require.NoError(t, err)
		require.Equal(t, b, a, f)
	}
	require.Len(t, src.bufs, 2, "each pass over the captures (the folder's fingerprint, then the files) read them into one buffer")
	lazy.mu.Lock()
	require.Empty(t, lazy.tensors, "saving keeps nothing in host memory")
	lazy.mu.Unlock()

	back, err := Load(dirs[0])
	require.NoError(t, err)
	for _, name := range eager.Names {
		require.Equal(t, eager.Tensor(name), back.Tensor(name), name)
	}
}

func TestReadAfterCloseIsNamed(t *testing.T) {
	lazy, _, _ := lazyTwin()
	require.NoError(t, lazy.Load("hook_embed"))
	require.NoError(t, lazy.Close())
	require.NotNil(t, lazy.Tensor("hook_embed"), "what was read stays")
	_, err := lazy.Get("logits")
	require.ErrorIs(t, err, ErrClosed)
	require.EqualError(t, err, "trace: reading logits: "+ErrClosed.Error())
	require.ErrorContains(t, lazy.Load(), "freed")
	require.ErrorContains(t, lazy.Save(t.TempDir()), "freed")
	require.NoError(t, New().Close(), "a host trace has nothing to free")
}

// Goroutines read one trace at once: each capture is read once and all
// see the same values.
func TestConcurrentReadsOfOneTrace(t *testing.T) {
	lazy, eager, src := lazyTwin()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, name := range eager.Names {
				x, err := lazy.Get(name)
				if err != nil || len(x.Data) != len(eager.Tensor(name).Data) {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, src.reads, len(eager.Names))
}

// Head scores of a trace still on the device read only the pattern entries
// they average (one per query and head for induction and previous-token),
// and equal the scores of the same trace in host memory.
func TestHeadScoresReadOnlyWhatTheyAverage(t *testing.T) {
	src := &memSource{data: map[string][]float32{}, bufs: map[*float32]bool{}}
	lazy, eager := New(), New()
	const heads, T = 3, 8
	for _, tr := range []*Trace{lazy, eager} {
		tr.Model = Model{Name: "m", Arch: "llama", Layers: 2, Heads: heads}
		tr.Tokens = []int32{5, 6, 1, 2, 3, 1, 2, 3} // period 3; 1, 2, 3 occur twice
	}
	for l := range 2 {
		name := LayerPoint(l, "attn.hook_pattern")
		data := make([]float32, heads*T*T)
		for i := range data {
			data[i] = float32((i*7919+l*31)%97) / 97
		}
		src.data[name] = data
		lazy.PutUnread(name, []int{heads, T, T}, src)
		eager.Put(name, &Tensor{Shape: []int{heads, T, T}, Data: data})
	}
	for kind, perHead := range map[HeadKind]int{Induction: 3, PrevToken: T - 1, DuplicateToken: 3} {
		src.reads = nil
		got, err := HeadScores(lazy, kind)
		require.NoError(t, err, kind)
		want, err := HeadScores(eager, kind)
		require.NoError(t, err, kind)
		require.Equal(t, want, got, kind)
		read := 0
		for _, q := range src.reads {
			read += len(q.Dst)
		}
		require.Equal(t, 2*heads*perHead, read, "%s: the entries averaged, nothing more", kind)
		require.Empty(t, lazy.tensors, "nothing kept")
	}
}

// normSource is a memSource that reduces rows itself, as a GPU trace does.
type normSource struct {
	*memSource
	reduced []string
}

func (n *normSource) RowNorms(name string, dst []float32) error {
	x := n.data[name]
	width := len(x) / len(dst)
	for r := range dst {
		sum := 0.0
		for _, v := range x[r*width : (r+1)*width] {
			sum += float64(v) * float64(v)
		}
		dst[r] = float32(math.Sqrt(sum))
	}
	n.reduced = append(n.reduced, name)
	return nil
}

func TestRowNormsAreTheSameWhereverTheCaptureIs(t *testing.T) {
	lazy, eager, src := lazyTwin()
	reducing := New()
	ns := &normSource{memSource: src}
	for _, name := range eager.Names {
		reducing.PutUnread(name, eager.Shape(name), ns)
	}
	for _, c := range []struct {
		name        string
		rows, width int
	}{{"hook_embed", 3, 4}, {"blocks.0.attn.hook_pattern", 2, 9}, {"logits", 3, 7}} {
		x := src.data[c.name]
		want := make([]float64, c.rows) // written out: seq data, so each norm differs
		for r := range want {
			for i := range c.width {
				v := float64(x[r*c.width+i])
				want[r] += v * v
			}
			want[r] = math.Sqrt(want[r])
		}
		for _, tr := range []*Trace{eager, lazy, reducing} {
			got, err := tr.RowNorms(c.name)
			require.NoError(t, err)
			require.InDeltaSlice(t, want, got, 1e-5*want[len(want)-1], c.name) // float32 norms from the reducing source
		}
	}
	require.Equal(t, []string{"hook_embed", "blocks.0.attn.hook_pattern", "logits"}, ns.reduced)
	require.NotContains(t, lazy.tensors, "hook_embed", "norms read in blocks are not kept")

	_, err := eager.RowNorms("blocks.9.hook_resid_post")
	require.ErrorContains(t, err, "blocks.9.hook_resid_post")
	lazy.Close()
	_, err = lazy.RowNorms("logits")
	require.ErrorIs(t, err, ErrClosed)
}

// A load of more than a group reads group by group, each into memory made
// while the one before was read, and ends with the same tensors; a read
// that fails stops it cleanly.
func TestLoadInGroupsEqualsTheHostTrace(t *testing.T) {
	defer func(old int) { loadGroup = old }(loadGroup)
	loadGroup = 64 // bytes: a group takes captures until it holds 64 or more
	lazy, eager, src := lazyTwin()
	require.NoError(t, lazy.Load())
	for _, name := range eager.Names {
		require.Equal(t, eager.Tensor(name), lazy.Tensor(name), name)
	}
	require.Len(t, src.reads, 4)
	require.Equal(t, []int{2, 4}, src.calls, "one Read per group: embed and pattern (48+72 bytes), then resid and logits (48+84)")

	lazy, _, src = lazyTwin()
	src.failAfter = 1
	require.ErrorContains(t, lazy.Load(), "trace: reading blocks.1.hook_resid_post: the device went away")
}

// lendingSource is a memSource that lends host memory, as a GPU session does.
type lendingSource struct {
	*memSource
	spare    map[int][][]float32
	returned []uintptr // addresses: testify compares pointers by what they point at
}

func (l *lendingSource) Lend(sizes []int) [][]float32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	data := make([][]float32, len(sizes))
	for i, n := range sizes {
		if k := len(l.spare[n]); k > 0 {
			data[i], l.spare[n] = l.spare[n][k-1], l.spare[n][:k-1]
		}
	}
	return data
}

func (l *lendingSource) Return(data []float32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spare[len(data)] = append(l.spare[len(data)], data)
	l.returned = append(l.returned, uintptr(unsafe.Pointer(unsafe.SliceData(data))))
}

// A trace whose source lends host memory reads whole captures into it and
// gives back, on Close, what Get did not hand out; the next trace reads
// into that memory, its own values, and makes what was not lent.
func TestClosedTracesLendTheirReadsToTheNext(t *testing.T) {
	first, eager, src := lazyTwin()
	lender := &lendingSource{memSource: src, spare: map[int][][]float32{}}
	for _, name := range first.Names {
		first.PutUnread(name, first.Shape(name), lender)
	}
	require.NoError(t, first.Load())
	kept, err := first.Get("logits")
	require.NoError(t, err)
	read := map[string]uintptr{}
	for _, name := range first.Names {
		read[name] = uintptr(unsafe.Pointer(unsafe.SliceData(first.tensors[name].Data)))
	}
	require.NoError(t, first.Close())
	require.NoError(t, first.Close(), "once")
	require.Len(t, lender.returned, len(first.Names)-1, "all but what Get handed out")
	for _, name := range first.Names {
		if name != "logits" {
			require.Contains(t, lender.returned, read[name], name)
		}
	}
	_, err = first.Get("hook_embed")
	require.ErrorIs(t, err, ErrClosed, "given back, so no longer readable")
	require.Len(t, lender.spare[12], 2, "a failed read gives back what it was lent")
	require.Equal(t, eager.Tensor("logits").Data, kept.Data, "what Get handed out stays")

	// The source's next trace (another prefill's, other values) reads into
	// what came back; what was handed out is made afresh.
	src.closed = false
	want := map[string][]float32{}
	for name, d := range src.data {
		want[name] = make([]float32, len(d))
		for i := range d {
			want[name][i] = -d[i] - 1
		}
		src.data[name] = want[name]
	}
	second := New()
	for _, name := range first.Names {
		second.PutUnread(name, first.Shape(name), lender)
	}
	require.NoError(t, second.Load())
	require.Empty(t, lender.spare[12], "both captures of 12 took one each")
	for _, name := range second.Names {
		got := second.tensors[name].Data
		require.Equal(t, want[name], got, name)
		if name == "logits" {
			require.NotContains(t, lender.returned, uintptr(unsafe.Pointer(unsafe.SliceData(got))), "made, not lent")
		} else {
			require.Contains(t, lender.returned, uintptr(unsafe.Pointer(unsafe.SliceData(got))), "%s read into memory given back (of its size)", name)
		}
	}
	require.Equal(t, eager.Tensor("logits").Data, kept.Data, "and is untouched")
}
