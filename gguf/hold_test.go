package gguf

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Close while the mapping is held returns at once and leaves it mapped to
// the last release; a Hold after Close fails with ErrClosed. Holds and a
// Close from many goroutines race on nothing (run under -race).
func TestCloseWaitsForHoldsWithoutBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	w := NewWriter()
	require.NoError(t, w.AddTensor("w", F32, []int64{2, 2}, filled(16, 1)))
	require.NoError(t, w.WriteFile(path))
	f, err := Open(path)
	require.NoError(t, err)
	ti, _ := f.Tensor("w")
	data := f.Data(ti)
	a, err := f.Hold()
	require.NoError(t, err)
	b, err := f.Hold()
	require.NoError(t, err)
	require.NoError(t, f.Close(), "returns at once")
	require.NoError(t, f.Close(), "again: nothing")
	_, err = f.Hold()
	require.ErrorIs(t, err, ErrClosed)
	a()
	a() // twice is once
	require.Equal(t, filled(16, 1), data, "mapped while b holds it")
	b()
	require.Nil(t, f.Data(ti), "unmapped by the last release")

	f, err = Open(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				release, err := f.Hold()
				if err != nil {
					return
				}
				if got := f.Data(ti); len(got) != 16 || got[0] != filled(16, 1)[0] {
					t.Error("a held mapping reads its data")
				}
				release()
			}
		})
	}
	require.NoError(t, f.Close())
	wg.Wait()
	require.Nil(t, f.Data(ti))
}
