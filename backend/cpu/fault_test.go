package cpu_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/enginetest"
)

func TestModelFileChangedOnDiskIsAnError(t *testing.T) {
	path, m := enginetest.MappedModel(t)
	e, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	_, err = s.Prefill(context.Background(), []int32{1, 2, 3}, engine.Options{})
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, st.Size()/2))
	_, err = s.Prefill(context.Background(), []int32{1, 2, 3}, engine.Options{})
	require.ErrorContains(t, err, "changed on disk since it was opened")
}

// A kernel reading weights past the end of a truncated file faults; the
// stream reports it instead of crashing the process.
func TestFaultInAKernelBecomesAnError(t *testing.T) {
	path, m := enginetest.MappedModel(t)
	b := cpu.New(0)
	w := m.Blocks[1].Down
	mat, err := b.Upload(w)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, 4096))
	st := b.NewStream()
	x, err := st.Alloc("x", 4*w.Cols)
	require.NoError(t, err)
	y, err := st.Alloc("y", 4*w.Rows)
	require.NoError(t, err)
	st.MatMul(x, 4, backend.Proj{W: mat, Dst: y})
	require.ErrorContains(t, st.Sync(), "memory fault")
}

// A stream's error is the request's: Sync hands it over once, and the
// stream works again afterwards.
func TestStreamErrorEndsWithSync(t *testing.T) {
	st := cpu.New(1).NewStream()
	x, err := st.Alloc("x", 8)
	require.NoError(t, err)
	st.Write(x, 5, make([]float32, 10))
	require.EqualError(t, st.Sync(), "cpu: write of 10 elements at 5 into a tensor of 8")
	data := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	st.Write(x, 0, data)
	out := make([]float32, len(data))
	require.NoError(t, st.Read(x, 0, out))
	require.Equal(t, data, out)
}
