//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Case 11: a FIFO as the model file is refused at once, not opened.
func TestInfoRefusesAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "model.gguf")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	done := make(chan error, 1)
	go func() {
		_, err := strata(t, "info", fifo)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, fifo+": not a regular file")
	case <-time.After(10 * time.Second):
		// Unblock the hung open so that the test process can end.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("strata info on a FIFO hangs")
	}
	_, err := strata(t, "run", "--model", filepath.Dir(fifo), "--prompt", "a", "-n", "1")
	require.ErrorContains(t, err, "not a regular file", "a folder as the model is refused the same way")
}
