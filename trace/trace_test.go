package trace

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// A read-only trace folder is refused before anything is written (the new
// trace was swapped in, then deleting the old one failed, and it stayed
// beside it for good).
func TestReadOnlyAndOddlyNamedFolders(t *testing.T) {
	tr := New()
	tr.Tokens, tr.Pieces = []int32{1}, []string{"a"}
	tr.Put("hook_embed", &Tensor{Shape: []int{1, 2}, Data: seq(2)})
	parent := t.TempDir()
	dir := filepath.Join(parent, "we*rd?")
	require.NoError(t, tr.Save(dir))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	other := New()
	other.Tokens, other.Pieces = []int32{2}, []string{"b"}
	err := other.Save(dir)
	require.ErrorContains(t, err, "the folder is read-only (-r-xr-xr-x)")
	got, err := Load(dir)
	require.NoError(t, err)
	require.Equal(t, []int32{1}, got.Tokens, "the old trace is as it was")
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	for _, e := range entries {
		require.True(t, e.Name() == "we*rd?" || strings.HasSuffix(e.Name(), ".lock"), "left behind: %s", e.Name())
	}
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, other.Save(dir))
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
	_, err = tr.Point("z")
	require.ErrorIs(t, err, ErrClosed)
	require.NotContains(t, err.Error(), "capture it", "it was captured: capturing it again is not the fix")
	_, err = tr.Point("w")
	require.ErrorContains(t, err, `capture it with nb.Capture("w")`)
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

// A saved trace is input like any file: a header claiming 2^28 x 64 values
// in a file of kilobytes ran out of memory, a short array loaded with
// garbage at its end, Fortran order loaded transposed, and manifests with
// a huge layer count or start position, or fewer pieces than tokens,
// crashed the figures that sized themselves by them.
func TestLoadRefusesWhatTheFilesCannotHold(t *testing.T) {
	npy := func(dict string, values int) []byte {
		header := dict + strings.Repeat(" ", 63-(10+len(dict))%64) + "\n"
		b := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)), byte(len(header)>>8))
		return append(append(b, header...), make([]byte, 4*values)...)
	}
	f4 := func(shape string) string {
		return "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }"
	}
	manifest := func(edit string) string {
		m := `{"format":"strata-trace/1","model":{"layers":2,"d_model":4},"tokens":[1,2,3],"pieces":["a","b","c"],"pos_start":0,` +
			`"tensors":[{"name":"x","shape":[3,4],"dtype":"float32"}]}`
		if edit != "" {
			m = strings.Replace(m, `"pos_start":0`, edit, 1)
		}
		return m
	}
	writeAs := func(m, array string, x []byte, method uint16) string {
		dir := t.TempDir()
		var buf bytes.Buffer
		z := zip.NewWriter(&buf)
		for name, data := range map[string][]byte{"manifest.json": []byte(m), array + ".npy": x} {
			w, err := z.CreateHeader(&zip.FileHeader{Name: name, Method: method})
			require.NoError(t, err)
			_, err = w.Write(data)
			require.NoError(t, err)
		}
		require.NoError(t, z.Close())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "trace.npz"), buf.Bytes(), 0o644))
		return dir
	}
	write := func(m string, x []byte) string { return writeAs(m, "x", x, zip.Store) }
	good := write(manifest(""), npy(f4("3, 4"), 12))
	_, err := Load(good)
	require.NoError(t, err, "the well-formed one")
	// One byte of the stored data flipped: the zip's checksum says so.
	raw, err := os.ReadFile(filepath.Join(good, "trace.npz"))
	require.NoError(t, err)
	at := bytes.Index(raw, []byte("\x93NUMPY"))
	require.Positive(t, at)
	raw[at+10+int(raw[at+8])+5] ^= 0x40
	require.NoError(t, os.WriteFile(filepath.Join(good, "trace.npz"), raw, 0o644))
	_, err = Load(good)
	require.ErrorIs(t, err, zip.ErrChecksum)
	v2 := append([]byte("\x93NUMPY\x02\x00"), 0xff, 0xff, 0xff, 0x7f)
	for want, dir := range map[string]string{
		"shape [268435456 64] needs 17179869184 values":       write(manifest(""), npy(f4("268435456, 64"), 12)),
		"shape [30 64] needs 1920 values, the file holds 192": write(manifest(""), npy(f4("30, 64"), 192)),
		"needs 12 values, the file holds more":                write(manifest(""), npy(f4("3, 4"), 13)),
		"in Fortran order":                                    write(manifest(""), npy("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }", 12)),
		"not little-endian float32":                           write(manifest(""), npy("{'descr': '>f8', 'fortran_order': False, 'shape': (3, 4), }", 24)),
		"shape (-3, 64) is not of counts":                     write(manifest(""), npy(f4("-3, 64"), 12)),
		".npy header of 2147483647 bytes, over 65536":         write(manifest(""), v2),
		"pos_start is -100, outside 0..16777216":              write(manifest(`"pos_start":-100`), npy(f4("3, 4"), 12)),
		"pos_start is 4294967296, outside 0..16777216":        write(manifest(`"pos_start":4294967296`), npy(f4("3, 4"), 12)),
		"model.layers is 1073741824, outside 0..65536":        write(strings.Replace(manifest(""), `"layers":2`, `"layers":1073741824`, 1), npy(f4("3, 4"), 12)),
		"2 pieces for 3 tokens":                               write(strings.Replace(manifest(""), `"pieces":["a","b","c"]`, `"pieces":["a","b"]`, 1), npy(f4("3, 4"), 12)),
		// Deflated zeros would make gigabytes of a small file.
		"array x: the array is compressed (zip method 8)": writeAs(manifest(""), "x", npy(f4("3, 4"), 12), zip.Deflate),
		"array hook_embed: shape [4 4] does not start with the 3 tokens": writeAs(strings.Replace(manifest(""), `"name":"x","shape":[3,4]`, `"name":"hook_embed","shape":[4,4]`, 1),
			"hook_embed", npy(f4("4, 4"), 16), zip.Store),
	} {
		_, err := Load(dir)
		require.ErrorContains(t, err, want)
	}
}

// Replacing a file keeps its permissions (a private model written again was
// left readable by all), and a symbolic link keeps pointing where it did,
// at the new contents (it was replaced by a file of its own).
func TestWriteAtomicKeepsModesAndLinks(t *testing.T) {
	dir := t.TempDir()
	private := filepath.Join(dir, "private.bin")
	require.NoError(t, os.WriteFile(private, []byte("old"), 0o600))
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	require.NoError(t, WriteAtomic(private, write("new")))
	st, err := os.Stat(private)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	target, link := filepath.Join(dir, "target.json"), filepath.Join(dir, "link.json")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	require.NoError(t, os.Symlink(target, link))
	require.NoError(t, WriteAtomic(link, write("through the link")))
	lst, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, lst.Mode()&os.ModeSymlink, "still a link")
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "through the link", string(got))

	fresh := filepath.Join(dir, "fresh.png")
	require.NoError(t, WriteAtomic(fresh, write("x")))
	st, err = os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), st.Mode().Perm())
}

// Matches compares every fact of a model's shape that the trace recorded,
// skips those it did not (0: a manifest older than the fact), and not the
// name.
func TestMatchesComparesEveryRecordedFact(t *testing.T) {
	want := Model{Name: "m", Arch: "qwen3", Layers: 4, DModel: 256, FFN: 768, Heads: 8, KVHeads: 4, HeadDim: 32, Vocab: 2048}
	require.NoError(t, want.Matches(want))
	renamed := want
	renamed.Name = "a fine-tune"
	require.NoError(t, renamed.Matches(want), "a fine-tune keeps its base's shape")
	require.NoError(t, Model{Arch: "qwen3", Layers: 4}.Matches(want), "facts an old manifest lacks are not compared")
	for name, change := range map[string]func(*Model){
		"layers 5": func(m *Model) { m.Layers = 5 }, "d_model 128": func(m *Model) { m.DModel = 128 },
		"ffn 512": func(m *Model) { m.FFN = 512 }, "heads 4": func(m *Model) { m.Heads = 4 },
		"kv_heads 8": func(m *Model) { m.KVHeads = 8 }, "head_dim 64": func(m *Model) { m.HeadDim = 64 },
		"vocab 512": func(m *Model) { m.Vocab = 512 }, "experts 8": func(m *Model) { m.Experts = 8 },
	} {
		other := want
		change(&other)
		err := other.Matches(want)
		require.ErrorIs(t, err, ErrOtherModel, name)
		require.ErrorContains(t, err, "with "+name+", not by m (qwen3)", name)
	}
	llama := want
	llama.Arch = "llama"
	require.EqualError(t, llama.Matches(want), "the trace is from another model: it was made by m (llama), not by m (qwen3)")
}

// Issue 47.12: capture names went into trace.npz as they were: an array
// named ../../evil.npy is a zip-slip for whoever unzips the archive.
func TestSaveRefusesNamesThatArePaths(t *testing.T) {
	for _, name := range []string{"../../evil", "/etc/evil", `..\evil`, "a/b", "..", "", "c:evil", "new\nline"} {
		tr := New()
		tr.Tokens, tr.Pieces = []int32{1}, []string{"a"}
		tr.Put("hook_embed", &Tensor{Shape: []int{1, 1}, Data: []float32{1}})
		tr.Put(name, &Tensor{Shape: []int{1}, Data: []float32{1}})
		dir := filepath.Join(t.TempDir(), "out")
		require.ErrorContains(t, tr.Save(dir), fmt.Sprintf("capture name %q is not a plain file name", name))
		require.NoDirExists(t, dir, "nothing is written")
	}
}
