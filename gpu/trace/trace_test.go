package trace

import (
	"archive/zip"
	"bytes"
	"math"
	"os"
	"os/exec"
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
	require.Equal(t, float32(1*24+2*8+5), got.Tensor("blocks.0.attn.hook_pattern").At(1, 2, 5))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{folderIndex, "manifest.json", "trace.npz"}, names, "no temporary files are left behind")
}

func TestLoadNamesTheProblem(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	require.ErrorContains(t, err, "trace.npz")
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	w, err := z.Create("manifest.json")
	require.NoError(t, err)
	_, err = w.Write([]byte(`{"format":"strata-trace/9"}`))
	require.NoError(t, err)
	require.NoError(t, z.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trace.npz"), buf.Bytes(), 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, `manifest has format "strata-trace/9"`)

	buf.Reset()
	z = zip.NewWriter(&buf)
	require.NoError(t, z.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trace.npz"), buf.Bytes(), 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, "has no manifest.json: not a Strata trace")
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

// NumPy, the reader Python users have, opens the arrays with their shapes.
func TestNumpyReadsTheTrace(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3-numpy is not installed: scripts/setup.sh should have installed it")
		}
		t.Skip("Debian's python3-numpy is not installed (scripts/setup.sh installs it)")
	}
	tr := New()
	tr.Put("blocks.0.attn.hook_pattern", &Tensor{Shape: []int{2, 3, 4}, Data: seq(24)})
	tr.Put("logits", &Tensor{Shape: []int{5}, Data: seq(5)})
	dir := t.TempDir()
	require.NoError(t, tr.Save(dir))
	out, err := exec.Command(py, "-c", `
import json, numpy as np, sys
z = np.load(sys.argv[1])
p = z["blocks.0.attn.hook_pattern"]
print(p.dtype, p.shape, p[1, 2, 3], z["logits"].shape, json.loads(z["manifest.json"])["format"])
`, filepath.Join(dir, "trace.npz")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "float32 (2, 3, 4) 23.0 (5,) strata-trace/1\n", string(out))
}

// Close hands back a host trace's memory that Get never handed out (once,
// however often it is called); what it handed out, and the rest of its
// memory, stays readable, the rest reads as ErrClosed.
func TestClosingAHostTraceHandsBackWhatGetDidNot(t *testing.T) {
	tr := New()
	var recycled []string
	a := &Arena{Recycle: func() { recycled = append(recycled, "a") }}
	b := &Arena{Recycle: func() { recycled = append(recycled, "b") }}
	tr.PutView("x", &Tensor{Shape: []int{2}, Data: []float32{1, 2}}, a)
	tr.PutView("y", &Tensor{Shape: []int{2}, Data: []float32{3, 4}}, a)
	tr.PutView("z", &Tensor{Shape: []int{1, 1}, Data: []float32{5}}, b)
	x, err := tr.Get("x")
	require.NoError(t, err)
	norms, err := tr.RowNorms("z")
	require.NoError(t, err)
	require.Equal(t, []float64{5}, norms)
	require.Equal(t, NonFinite{}, tr.NonFiniteIn("z"))
	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close())
	require.Equal(t, []string{"b"}, recycled)
	require.Equal(t, []float32{1, 2}, x.Data)
	y, err := tr.Get("y")
	require.NoError(t, err)
	require.Equal(t, []float32{3, 4}, y.Data)
	_, err = tr.Get("z")
	require.ErrorIs(t, err, ErrClosed)
	_, err = tr.Rows("z", 0, 1)
	require.ErrorIs(t, err, ErrClosed)
	require.True(t, tr.Has("z"), "a closed capture is still named")
}

// The analyses copy what they read under the trace's lock and hand nothing
// out: Close still gives back the memory of a trace they read (a sweep
// computing a metric from each prefill then reuses its arenas), and what
// they returned stays as it was.
func TestAnalysesHandNothingOut(t *testing.T) {
	tr := New()
	tr.Tokens = []int32{1, 2}
	recycled := 0
	a := &Arena{Recycle: func() { recycled++ }}
	tr.PutView("logits", &Tensor{Shape: []int{2, 3}, Data: []float32{1, 2, 3, 3, 2, 1}}, a)
	tr.PutView("blocks.0.attn.hook_z", &Tensor{Shape: []int{2, 1, 2}, Data: []float32{1, 0, 0, 1}}, a)
	lp, err := tr.LogProbs()
	require.NoError(t, err)
	tok, err := tr.TokenLogProbs()
	require.NoError(t, err)
	p, err := tr.Point("blocks.0.attn.hook_z")
	require.NoError(t, err)
	h, err := tr.Head("z", 0, 0)
	require.NoError(t, err)
	res, err := tr.HeadResults(0, []float32{1, 2, 3, 4}) // W_O [2 rows, 2 cols]
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	require.Equal(t, 1, recycled, "the arena went back: nothing was handed out")

	lse := math.Log(math.Exp(1) + math.Exp(2) + math.Exp(3))
	require.InDeltaSlice(t, []float64{1 - lse, 2 - lse, 3 - lse}, lp[0], 1e-12)
	require.InDeltaSlice(t, []float64{3 - lse}, tok, 1e-12, "row 0 scores token 2")
	require.Equal(t, []float32{1, 0, 0, 1}, p.Data)
	require.Equal(t, []float32{1, 0, 0, 1}, h.Data)
	require.Equal(t, []float32{1, 3, 2, 4}, res.Data, "z[p] @ W_O^T")
	_, err = tr.Point("logits")
	require.ErrorIs(t, err, ErrClosed, "after Close, the memory is the next prefill's")
}
