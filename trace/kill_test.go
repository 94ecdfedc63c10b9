package trace

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stamped is a trace of n values labelled by its backend.
func stamped(label string, n int) *Trace {
	tr := New()
	tr.Backend, tr.Tokens, tr.Pieces = label, []int32{int32(label[0])}, []string{label}
	data := make([]float32, n)
	data[0] = float32(label[0])
	tr.Put("x", &Tensor{Shape: []int{n}, Data: data})
	return tr
}

// reportFiles stand for a report: every one says which trace it shows.
var reportFiles = []string{"index.html", "attention_grid.png", "attention_grid.svg"}

// saveStamped writes a whole trace folder, as `strata trace` does: the
// trace's files and a report's, in one replacement.
func saveStamped(tr *Trace, dir string) error {
	return tr.ReplaceFolder(dir, func(tmp string) error {
		if err := tr.WriteFiles(tmp); err != nil {
			return err
		}
		for _, f := range reportFiles {
			if err := os.WriteFile(filepath.Join(tmp, f), []byte(tr.Backend), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
}

// folderLabel reads every file of the folder through one handle on it,
// as a reader that opened the folder sees it, and returns the label all of
// them agree on; an error says which file disagrees or is missing.
func folderLabel(dir string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return "", err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := append([]string{folderIndex, "manifest.json", "trace.npz"}, reportFiles...)
	if !sameSet(names, want) {
		for _, n := range names {
			if !slices.Contains(want, n) {
				return "", fmt.Errorf("the folder holds %v, want %v", names, want)
			}
		}
		return "", errRemoved
	}
	labels := map[string]string{}
	for _, name := range reportFiles {
		b, err := root.ReadFile(name)
		if err != nil {
			return "", err
		}
		labels[name] = string(b)
	}
	raw, err := root.ReadFile("manifest.json")
	if err != nil {
		return "", err
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("manifest.json: %w", err)
	}
	labels["manifest.json"] = m.Backend
	f, err := root.Open("trace.npz")
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	z, err := zip.NewReader(f, st.Size())
	if err != nil {
		return "", fmt.Errorf("trace.npz: %w", err)
	}
	mr, err := z.Open("manifest.json")
	if err != nil {
		return "", fmt.Errorf("trace.npz: %w", err)
	}
	raw, err = io.ReadAll(mr)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("trace.npz: manifest.json: %w", err)
	}
	labels["trace.npz"] = m.Backend
	for name, l := range labels {
		if l != m.Backend {
			return "", fmt.Errorf("mixed folder: %s is from trace %q, trace.npz from %q", name, l, m.Backend)
		}
	}
	return m.Backend, nil
}

// errRemoved: the folder looked at was being removed, replaced by a newer one.
var errRemoved = errors.New("folder being removed")

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// TestKilledExportLeavesAWholeFolder kills a process at random moments
// while it saves large traces with their reports over an earlier folder:
// after every kill, every file of the folder is from one trace, the old
// one or the new one, and the next save clears what the killed one left.
func TestKilledExportLeavesAWholeFolder(t *testing.T) {
	if dir := os.Getenv("STRATA_EXPORT_CHILD"); dir != "" {
		// Stop on its own should the parent die without killing it.
		deadline := time.Now().Add(30 * time.Second)
		b, c := stamped("B", 1<<20), stamped("C", 1<<20)
		for i := 0; time.Now().Before(deadline); i++ {
			_ = saveStamped([]*Trace{b, c}[i%2], dir) // killed somewhere in here
		}
		os.Exit(0)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	require.NoError(t, saveStamped(stamped("A", 3), dir))
	seen := map[string]int{}
	for kill := range 8 {
		stale, _ := filepath.Glob(filepath.Join(parent, ".out.new-*"))
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledExportLeavesAWholeFolder$")
		cmd.Env = append(os.Environ(), "STRATA_EXPORT_CHILD="+dir)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		// Wait until the child is writing, then kill it a moment later:
		// while writing, syncing, swapping or removing the old folder.
		deadline := time.Now().Add(30 * time.Second)
		for {
			news, _ := filepath.Glob(filepath.Join(parent, ".out.new-*"))
			if slices.ContainsFunc(news, func(n string) bool { return !slices.Contains(stale, n) }) {
				break
			}
			require.True(t, time.Now().Before(deadline), "the child never started writing")
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(100*(kill+1))) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		label, err := folderLabel(dir)
		require.NoError(t, err, "kill %d: the folder is one whole trace", kill)
		seen[label]++
	}
	t.Logf("folders after the kills: %v", seen)

	require.NoError(t, saveStamped(stamped("A", 3), dir))
	label, err := folderLabel(dir)
	require.NoError(t, err)
	require.Equal(t, "A", label)
	got, err := Load(dir)
	require.NoError(t, err)
	require.Equal(t, "A", got.Backend)
	left, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, left, 1, "the next save removed what the killed ones left: %v", left)
}

// A crash between the two renames of the fallback swap (no atomic
// exchange) leaves the old folder aside; the next save puts it back
// before anything else, and never shows a mix.
func TestFallbackSwapRecoversFromACrashBetweenRenames(t *testing.T) {
	exchange = func(string, string) error { return errors.ErrUnsupported }
	t.Cleanup(func() { exchange = exchangeDirs })
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	require.NoError(t, saveStamped(stamped("A", 3), dir))
	require.NoError(t, saveStamped(stamped("B", 3), dir))
	label, err := folderLabel(dir)
	require.NoError(t, err)
	require.Equal(t, "B", label)

	// What a kill after the first rename leaves: no folder, the old one
	// aside, the new one complete beside it.
	require.NoError(t, os.Rename(dir, filepath.Join(parent, ".out.old-00000000000000000001-abcd")))
	require.NoError(t, os.Mkdir(filepath.Join(parent, ".out.new-123"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(parent, ".out.new-123", "trace.npz"), []byte("C"), 0o644))
	err = stamped("D", 3).ReplaceFolder(dir, func(string) error { return errors.New("disk full") })
	require.ErrorContains(t, err, "disk full")
	label, err = folderLabel(dir)
	require.NoError(t, err, "the folder set aside is back")
	require.Equal(t, "B", label)
	left, err := filepath.Glob(filepath.Join(parent, ".out.*"))
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestConcurrentWritersNeverMix has writers save different traces to one
// folder at once while readers look: every look sees one whole trace, each
// writer either succeeds or is refused with ErrBusy, and the folder ends
// as one writer's trace.
func TestConcurrentWritersNeverMix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, saveStamped(stamped("A", 3), dir))
	var wg sync.WaitGroup
	var mu sync.Mutex
	saved, busy := map[string]int{}, 0
	stop := make(chan struct{})
	for w := range 4 {
		tr := stamped(string(rune('P'+w)), 1<<18)
		wg.Go(func() {
			for range 10 {
				err := saveStamped(tr, dir)
				mu.Lock()
				if err == nil {
					saved[tr.Backend]++
				} else {
					assert.ErrorIs(t, err, ErrBusy)
					assert.ErrorContains(t, err, dir)
					busy++
				}
				mu.Unlock()
			}
		})
	}
	looks := 0
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			label, err := folderLabel(dir)
			if err == nil {
				assert.Contains(t, "APQRS", label)
				looks++
				continue
			}
			// A look fails only when the folder it opened was replaced and is
			// being removed under it, never by seeing a mix.
			if !errors.Is(err, errRemoved) && !errors.Is(err, fs.ErrNotExist) {
				assert.NoError(t, err)
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	t.Logf("saves %v, refused %d, whole looks %d", saved, busy, looks)
	require.NotEmpty(t, saved)
	require.Equal(t, 40, busy+func() int {
		n := 0
		for _, v := range saved {
			n += v
		}
		return n
	}())
	label, err := folderLabel(dir)
	require.NoError(t, err)
	require.Contains(t, saved, label)
	left, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, left, 1, "no lock file or half-made folder is left: %v", left)
}
