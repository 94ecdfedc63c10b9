package trace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A folder of trace folders (strata trace --prompts) is replaced whole:
// again by another (none of the old one kept), or by a trace; a failed
// write leaves it as it was; a file Strata did not write, beside its
// traces or in one, is refused.
func TestReplaceFoldersReplacesAFolderOfTracesWhole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	fill := func(labels ...string) func(string) error {
		return func(tmp string) error {
			for i, l := range labels {
				if err := stamped(l, 4).Save(filepath.Join(tmp, string(rune('0'+i)))); err != nil {
					return err
				}
			}
			return nil
		}
	}
	require.NoError(t, ReplaceFolders(dir, fill("A", "B", "C")))
	tr, err := Load(filepath.Join(dir, "2"))
	require.NoError(t, err)
	require.Equal(t, "C", tr.Backend)
	require.NoError(t, CheckFolder(dir))

	require.NoError(t, ReplaceFolders(dir, fill("D")), "its own folder, again")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "one trace and the index: none of the old kept")

	require.ErrorContains(t, ReplaceFolders(dir, func(string) error { return errors.New("disk full") }), "disk full")
	tr, err = Load(filepath.Join(dir, "0"))
	require.NoError(t, err)
	require.Equal(t, "D", tr.Backend, "a failed write leaves it as it was")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "0", "notes.txt"), []byte("mine"), 0o644))
	require.ErrorContains(t, CheckFolder(dir), "in 0: holds notes.txt, which Strata did not write")
	require.ErrorContains(t, ReplaceFolders(dir, fill("E")), "in 0: holds notes.txt, which Strata did not write")
	require.NoError(t, os.Remove(filepath.Join(dir, "0", "notes.txt")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "1"), 0o755))
	require.ErrorContains(t, CheckFolder(dir), "holds 1, which Strata did not write")
	require.NoError(t, os.Remove(filepath.Join(dir, "1")))

	require.NoError(t, stamped("F", 4).Save(dir), "a trace replaces the folder of traces")
	require.NoFileExists(t, filepath.Join(dir, "0", "trace.npz"))
	require.NoError(t, ReplaceFolders(dir, fill("G")), "and a folder of traces the trace")
	require.NoFileExists(t, filepath.Join(dir, "trace.npz"))
}
