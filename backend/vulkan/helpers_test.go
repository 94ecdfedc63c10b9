package vulkan_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// One backend serves the package's tests: opening one with the validation
// layer takes a while. TestMain closes it and fails on what the layer
// reported last.
var shared struct {
	once       sync.Once
	b          *vulkan.Backend
	err        error
	validating bool
}

func testBackend(t testing.TB) *vulkan.Backend {
	t.Helper()
	shared.once.Do(func() {
		// STRATA_VULKAN_CLAMP=apple runs the tests as an Apple GPU would
		// choose its kernels (issue 47.14).
		var clamp vulkan.Clamp
		if clamp, shared.err = vulkan.ParseClamp(os.Getenv("STRATA_VULKAN_CLAMP")); shared.err != nil {
			return
		}
		shared.b, shared.err = vulkan.Open(vulkan.Options{Validation: true, Clamp: clamp})
		shared.validating = shared.err == nil
		if errors.Is(shared.err, vulkan.ErrNoValidationLayer) {
			shared.b, shared.err = vulkan.Open(vulkan.Options{Clamp: clamp})
		}
	})
	if errors.Is(shared.err, vulkan.ErrNoDevice) {
		t.Skipf("this machine has no Vulkan device: %v", shared.err)
	}
	require.NoError(t, shared.err)
	return shared.b
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.b != nil {
		if !shared.validating {
			fmt.Fprintln(os.Stderr, "vulkan tests ran without the validation layer (install Debian vulkan-validationlayers)")
		}
		if err := shared.b.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// relErr is max|got-want| / max|want| over finite entries; infinities must
// match exactly. ok is false on a length or infinity mismatch.
func relErr(got, want []float32) (rel float64, ok bool) {
	if len(got) != len(want) {
		return math.Inf(1), false
	}
	var maxDiff, maxRef float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) && math.IsNaN(float64(w)) { // both went non-finite alike
			continue
		}
		if math.IsInf(float64(w), 0) || math.IsInf(g, 0) || math.IsNaN(g) {
			if g != float64(w) {
				return math.Inf(1), false
			}
			continue
		}
		maxDiff = math.Max(maxDiff, math.Abs(g-float64(w)))
		maxRef = math.Max(maxRef, math.Abs(float64(w)))
	}
	if maxRef == 0 {
		return maxDiff, true
	}
	return maxDiff / maxRef, true
}

func requireClose(t testing.TB, got, want []float32, tol float64, what string) {
	t.Helper()
	rel, ok := relErr(got, want)
	require.True(t, ok, "%s: lengths or infinities differ", what)
	require.LessOrEqual(t, rel, tol, "%s: relative error", what)
}

// rig runs the same kernels on the CPU backend and the Vulkan one.
type rig struct {
	t      testing.TB
	cs, vs backend.Stream
	rng    *rand.Rand
}

// twin is one tensor on both backends.
type twin struct{ c, v backend.Tensor }

func newRig(t testing.TB, seed uint64) *rig {
	return &rig{t: t, cs: cpu.New(2).NewStream(), vs: testBackend(t).NewStream(), rng: rand.New(rand.NewPCG(seed, 1))}
}

func (r *rig) tensor(name string, data []float32) twin {
	r.t.Helper()
	c, err := r.cs.Alloc(name, len(data))
	require.NoError(r.t, err)
	v, err := r.vs.Alloc(name, len(data))
	require.NoError(r.t, err)
	r.cs.Write(c, 0, data)
	r.vs.Write(v, 0, data)
	return twin{c, v}
}

// random makes a tensor of n normal values times scale.
func (r *rig) random(name string, n int, scale float32) twin {
	return r.tensor(name, r.values(n, scale))
}

func (r *rig) values(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.rng.NormFloat64()) * scale
	}
	return v
}

func (r *rig) zeros(name string, n int) twin { return r.tensor(name, make([]float32, n)) }

// read returns a tensor's contents from both backends.
func (r *rig) read(x twin) (c, v []float32) {
	r.t.Helper()
	n := x.c.Len()
	c, v = make([]float32, n), make([]float32, n)
	require.NoError(r.t, r.cs.Read(x.c, 0, c))
	require.NoError(r.t, r.vs.Read(x.v, 0, v))
	return c, v
}

// quantized is a random rows x cols weight in typ.
func quantized(t testing.TB, r *rig, name string, rows, cols int, typ gguf.Type) *model.Weight {
	t.Helper()
	f, err := quant.For(typ)
	require.NoError(t, err)
	src := r.values(rows*cols, 0.5)
	rb, err := typ.RowBytes(int64(cols))
	require.NoError(t, err)
	rowBytes := int(rb)
	data := make([]byte, rowBytes*rows)
	for i := range rows {
		f.Quantize(data[i*rowBytes:(i+1)*rowBytes], src[i*cols:(i+1)*cols])
	}
	return &model.Weight{Name: name, Rows: rows, Cols: cols, Format: f, Data: data}
}

// matrix quantizes a random rows x cols weight to typ and uploads it to both.
func (r *rig) matrix(name string, rows, cols int, typ gguf.Type) (backend.Matrix, backend.Matrix) {
	r.t.Helper()
	w := quantized(r.t, r, name, rows, cols, typ)
	c, err := cpu.New(1).Upload(w)
	require.NoError(r.t, err)
	v, err := testBackend(r.t).Upload(w)
	require.NoError(r.t, err)
	return c, v
}

// genModel builds a random model of a named shape in memory.
func genModel(t testing.TB, shape string, typ gguf.Type, seed uint64) *model.Model {
	t.Helper()
	m, err := synth.Random(synth.Shapes[shape], typ, seed)
	require.NoError(t, err)
	return m
}

// gemmCount is how many matrix products a profiling backend timed since
// its stage times were last read.
func gemmCount(b *vulkan.Backend) int {
	n := 0
	for _, st := range b.StageTimes() {
		if st.Stage == "gemm" {
			n += st.Count
		}
	}
	return n
}
