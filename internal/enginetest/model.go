package enginetest

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// MappedModel writes a small random llama (Q8_0) to a file and opens it
// mapped, for tests that change the file underneath; it is closed with t.
func MappedModel(t *testing.T) (string, *model.Model) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.Q8_0, 1)
	require.NoError(t, err)
	require.NoError(t, w.WriteFile(path))
	m, err := model.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return path, m
}
