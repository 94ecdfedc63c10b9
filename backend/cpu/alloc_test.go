package cpu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
)

// A request no machine of this size could hold (a KV cache sized by a
// crafted context length, say) is an error: Go cannot recover from failing
// to map a huge slice, and the process would die.
func TestAllocBeyondMemoryIsAnError(t *testing.T) {
	st := cpu.New(1).NewStream()
	_, err := st.Alloc("blocks.0.attn.cache_k", 1<<50)
	if err == nil {
		t.Skip("this machine's memory is unknown or larger than 4 PiB")
	}
	require.ErrorContains(t, err, "cpu: allocating blocks.0.attn.cache_k: 4194304.00 GiB is more")
	require.ErrorContains(t, err, "more than this machine's")
	_, err = st.Alloc("x", -1)
	require.ErrorContains(t, err, "negative size -1")
	x, err := st.Alloc("x", 16)
	require.NoError(t, err)
	require.Equal(t, 16, x.Len())
}

// Offsets near the top of int wrapped off+n to a negative number and passed
// the bounds checks, then panicked in the slice expression.
func TestWriteReadCopyOffsetsDoNotWrap(t *testing.T) {
	st := cpu.New(1).NewStream()
	x, err := st.Alloc("x", 8)
	require.NoError(t, err)
	const huge = int(^uint(0) >> 1) // MaxInt
	require.NotPanics(t, func() { st.Write(x, huge, make([]float32, 4)) })
	require.ErrorContains(t, st.Sync(), "write of 4 elements at")
	require.NotPanics(t, func() { st.Copy(x, huge, x, 0, 4) })
	require.ErrorContains(t, st.Sync(), "copy of 4 elements")
	require.NotPanics(t, func() { st.Copy(x, 0, x, 4, -2) })
	require.ErrorContains(t, st.Sync(), "copy of -2 elements")
	require.NotPanics(t, func() { _ = st.Read(x, huge, make([]float32, 4)) })
	require.ErrorContains(t, st.Read(x, huge, make([]float32, 4)), "read of 4 elements at")
}

// A closed backend refuses work, as a GPU backend does: no new memory, and
// a stream's work fails at its Sync.
func TestClosedBackendRefusesWork(t *testing.T) {
	b := cpu.New(1)
	s := b.NewStream()
	x, err := s.Alloc("x", 4)
	require.NoError(t, err)
	s.Write(x, 0, []float32{1, 2, 3, 4})
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "closing twice is harmless")
	s.Copy(x, 0, x, 2, 2)
	require.ErrorContains(t, s.Sync(), "cpu: the backend is closed")
	_, err = b.NewStream().Alloc("y", 4)
	require.ErrorContains(t, err, "cpu: the backend is closed")
}
