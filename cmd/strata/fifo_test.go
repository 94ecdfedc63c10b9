//go:build unix

package main

import (
	"context"
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

// bench --cpuprofile truncated any file, the model being benchmarked
// included, and a missing folder failed only after the model loaded. Every
// output file flag is now checked before any work: the model given here is
// not one, so a check after loading would fail on it instead.
func TestEveryOutputFileFlagIsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("precious"), 0o644))
	notModel := filepath.Join(dir, "m.gguf")
	require.NoError(t, os.WriteFile(notModel, []byte("not a model"), 0o644))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	missing := filepath.Join(dir, "no", "f")
	bench := []string{"bench", "--model", notModel, "--tokens", "4", "--iters", "1"}
	gen := []string{"gen", "--shape", "tiny-llama"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(bench, "--cpuprofile", notModel), "--cpuprofile " + notModel + ": is the file of --model; write elsewhere"},
		{append(bench, "--json", notModel), "--json " + notModel + ": is the file of --model; write elsewhere"},
		{append(bench, "--cpuprofile", notes), "--cpuprofile " + notes + ": the file exists and is not a CPU profile"},
		{append(bench, "--cpuprofile", missing), "--cpuprofile " + missing + ": the folder " + filepath.Dir(missing) + " does not exist"},
		{append(bench, "--cpuprofile", dir), "--cpuprofile " + dir + ": is a folder; give a file name"},
		{append(bench, "--cpuprofile", fifo), "--cpuprofile " + fifo + ": exists and is not a regular file"},
		{append(bench, "--cpuprofile", "/dev/null"), "--cpuprofile /dev/null: exists and is not a regular file"},
		{append(bench, "--json", fifo), "--json " + fifo + ": exists and is not a regular file"},
		{append(bench, "--json", filepath.Join(dir, "b"), "--cpuprofile", filepath.Join(dir, "b")), "--cpuprofile " + filepath.Join(dir, "b") + ": is the file of --json"},
		{append(gen, "--out", fifo), "--out " + fifo + ": exists and is not a regular file"},
		{[]string{"trace", "--model", notModel, "--out", notModel}, "--out " + notModel + ": exists and is not a folder"},
		{[]string{"trace", "--model", notModel, "--out", dir}, "--out " + dir + ": holds "},
		{[]string{"trace", "--model", notModel, "--out", fifo}, "--out " + fifo + ": exists and is not a folder"},
	} {
		done := make(chan error, 1)
		go func() { _, err := strata(t, c.args...); done <- err }()
		select {
		case err := <-done:
			require.ErrorContains(t, err, c.want, "%v", c.args)
		case <-time.After(20 * time.Second):
			t.Fatalf("%v hangs", c.args)
		}
	}
	b, err := os.ReadFile(notModel)
	require.NoError(t, err)
	require.Equal(t, "not a model", string(b))

	// Its own profile it writes, and writes over.
	profile := filepath.Join(dir, "cpu.pprof")
	for range 2 {
		_, err := strata(t, "bench", "--shape", "tiny-llama", "--type", "F32", "--tokens", "4", "--iters", "1", "--warmup", "0s", "--cpuprofile", profile)
		require.NoError(t, err)
		require.True(t, cpuProfileFile(profile))
	}
	require.False(t, cpuProfileFile(notes))
}

// --prompts from a FIFO no one writes to blocked in open past Ctrl-C and
// SIGTERM; the command's context now ends the wait.
func TestReadPromptsFromASilentFIFOEndsOnInterrupt(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "prompts.txt")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	// Unblock the open left behind so that it does not outlive the test.
	defer func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := readPrompts(ctx, fifo)
	require.EqualError(t, err, "interrupted while reading --prompts "+fifo)
	require.Less(t, time.Since(start), 5*time.Second)
}
