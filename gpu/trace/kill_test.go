package trace

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKilledExportLeavesNoHalfFile kills a process in the middle of saving a
// large trace over an earlier one: the final name keeps the complete earlier
// trace, never a half-written one.
func TestKilledExportLeavesNoHalfFile(t *testing.T) {
	if dir := os.Getenv("STRATA_EXPORT_CHILD"); dir != "" {
		big := New()
		big.Put("big", &Tensor{Shape: []int{64 << 20}, Data: make([]float32, 64<<20)})
		for {
			_ = big.Save(dir) // killed somewhere in here
		}
	}
	dir := t.TempDir()
	small := New()
	small.Put("x", &Tensor{Shape: []int{3}, Data: []float32{1, 2, 3}})
	require.NoError(t, small.Save(dir))

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledExportLeavesNoHalfFile$")
	cmd.Env = append(os.Environ(), "STRATA_EXPORT_CHILD="+dir)
	require.NoError(t, cmd.Start())
	// Wait until the child is writing its temporary file, then kill it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		tmps, _ := filepath.Glob(filepath.Join(dir, ".trace.npz.tmp-*"))
		if len(tmps) > 0 {
			if st, err := os.Stat(tmps[0]); err == nil && st.Size() > 1<<20 {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the child never started writing")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	got, err := Load(dir)
	require.NoError(t, err, "what is under the final names still loads")
	require.Equal(t, []float32{1, 2, 3}, got.Tensors["x"].Data)
	require.False(t, got.Has("big"))
}
