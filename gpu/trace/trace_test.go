package trace

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	tr := New()
	tr.Model = Model{Name: "m", Arch: "llama", Layers: 2, DModel: 4}
	tr.Tokens, tr.Pieces, tr.Pos0, tr.Backend = []int32{1, 2, 3}, []string{"<s>", " a", "b"}, 5, "cpu (2 threads)"
	tr.Put("blocks.0.attn.hook_pattern", &Tensor{Shape: []int{2, 3, 8}, Data: seq(48)})
	tr.Put("hook_embed", &Tensor{Shape: []int{3, 4}, Data: seq(12)})
	tr.Put("logits", &Tensor{Shape: []int{7}, Data: seq(7)})
	dir := t.TempDir()
	require.NoError(t, tr.Save(dir))
	got, err := Load(dir)
	require.NoError(t, err)
	require.Equal(t, tr, got)
	require.Equal(t, float32(1*24+2*8+5), got.Tensors["blocks.0.attn.hook_pattern"].At(1, 2, 5))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary files are left behind")
}

func TestLoadNamesTheProblem(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	require.ErrorContains(t, err, "manifest.json")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"format":"other"}`), 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, `has format "other"`)
}

func TestGetListsWhatWasCaptured(t *testing.T) {
	tr := New()
	tr.Put("hook_embed", &Tensor{Shape: []int{1}, Data: []float32{1}})
	_, err := tr.Get("logits")
	require.ErrorContains(t, err, "logits was not captured (captured: hook_embed)")
}

func seq(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i)
	}
	return s
}
