package trace

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Manifest is manifest.json: what the trace holds, readable without numpy.
// Non-finite numbers are written as the strings "NaN", "Infinity" and
// "-Infinity", which JSON readers accept (numpy turns them into floats).
type Manifest struct {
	Format    string        `json:"format"`
	Model     Model         `json:"model"`
	Backend   string        `json:"backend"`
	Tokens    []int32       `json:"tokens"`
	Pieces    []string      `json:"pieces"`
	Pos0      int           `json:"pos_start"`
	Predicted []int32       `json:"predicted,omitempty"`
	Tensors   []TensorEntry `json:"tensors"`
	Lens      *Lens         `json:"logit_lens,omitempty"`
	// FirstNonFinite is the first capture, in the order the prefill reached
	// them, that holds NaN or Inf; absent when every value is finite.
	FirstNonFinite *FirstNonFinite `json:"first_non_finite,omitempty"`
}

// TensorEntry describes one array of trace.npz.
type TensorEntry struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	DType string `json:"dtype"`
	NonFinite
}

// FirstNonFinite names where a trace first went non-finite.
type FirstNonFinite struct {
	Capture string `json:"capture"`
	Layer   int    `json:"layer"` // -1 for hook_embed, ln_final.hook_normalized and logits
	NonFinite
}

const manifestFormat = "strata-trace/1"

func (t *Trace) manifest() Manifest {
	return Manifest{Format: manifestFormat, Model: t.Model, Backend: t.Backend, Tokens: t.Tokens,
		Pieces: t.Pieces, Pos0: t.Pos0, Predicted: t.Predicted, Lens: t.Lens, Tensors: []TensorEntry{}}
}

// add lists a capture in the manifest, with its non-finite counts.
func (m *Manifest) add(name string, x *Tensor) {
	nf := m.Model.nonFinite(name, x)
	m.Tensors = append(m.Tensors, TensorEntry{Name: name, Shape: x.Shape, DType: "float32", NonFinite: nf})
	if nf.Any() && m.FirstNonFinite == nil {
		m.FirstNonFinite = &FirstNonFinite{Capture: name, Layer: LayerOf(name), NonFinite: nf}
	}
}

// Save writes the trace folder dir: trace.npz and manifest.json. The
// folder is replaced as a whole (see ReplaceFolder): a reader, or a save
// that was killed, never leaves files of two traces side by side. A
// report of this same trace already in dir is kept.
func (t *Trace) Save(dir string) error {
	return t.ReplaceFolder(dir, t.WriteFiles)
}

// WriteFiles writes trace.npz and manifest.json into dir as they are,
// with no swap: for filling the new folder of ReplaceFolder. Captures
// still on the device stream through one buffer, never all at once. The
// archive holds its own copy of the manifest, last (it counts the
// non-finite values of every array), which Load reads.
func (t *Trace) WriteFiles(dir string) error {
	if t == nil {
		return errNilTrace
	}
	m := t.manifest()
	if err := m.check(); err != nil { // what Load would refuse
		return fmt.Errorf("trace: cannot save: %w", err)
	}
	for _, name := range t.Names {
		if err := checkArrayName(name); err != nil {
			return fmt.Errorf("trace: cannot save: %w", err)
		}
	}
	var manifest []byte
	err := writeFile(filepath.Join(dir, "trace.npz"), func(w io.Writer) error {
		z := zip.NewWriter(w)
		err := t.each(func(name string, x *Tensor) error {
			m.add(name, x)
			return writeNpy(z, name, x.Shape, x.Data)
		})
		if err != nil {
			return err
		}
		if manifest, err = json.MarshalIndent(m, "", " "); err != nil {
			return fmt.Errorf("trace: manifest: %w", err)
		}
		mw, err := z.Create("manifest.json")
		if err != nil {
			return err
		}
		if _, err := mw.Write(manifest); err != nil {
			return err
		}
		return z.Close()
	})
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "manifest.json"), func(w io.Writer) error {
		_, err := w.Write(append(manifest, '\n'))
		return err
	})
}

// checkArrayName refuses a capture name that is not one plain file name
// in trace.npz: "../../evil" would be a path out of the folder of whoever
// unzips the archive.
func checkArrayName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\:`) || !filepath.IsLocal(name+".npy") ||
		strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("capture name %q is not a plain file name, which trace.npz needs for its array", name)
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// WriteAtomic writes path through write into a temporary file in the same
// directory, syncs it and renames it over path. Errors name path, not the
// temporary file. A path that is a symbolic link has its target replaced,
// and a file replaced keeps its permissions (a private file stays private).
func WriteAtomic(path string, write func(io.Writer) error) (err error) {
	if write == nil {
		return fmt.Errorf("writing %s: no write function (nil)", path)
	}
	mode := fs.FileMode(0o644)
	target := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		target = real
		if st, err := os.Stat(real); err == nil {
			mode = st.Mode().Perm()
		}
	}
	f, err := os.CreateTemp(filepath.Dir(target), stem(filepath.Base(target))+".tmp-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("writing %s: %w", path, pe.Err)
		}
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	defer func() {
		if err != nil {
			err = &scrubbed{msg: strings.ReplaceAll(err.Error(), tmp, path), err: err}
		}
	}()
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, target)
}

// writeNpy stores one float32 array as NAME.npy (format 1.0, C order).
// npyio writes only 1-D or 2-D float64 shapes, so the header is written here.
func writeNpy(z *zip.Writer, name string, shape []int, data []float32) error {
	w, err := z.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Store})
	if err != nil {
		return err
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", tuple)
	// Magic (6) + version (2) + length (2) + dict + newline, padded to 64.
	pad := 63 - (10+len(dict))%64
	header := dict + strings.Repeat(" ", pad) + "\n"
	if len(header) > math.MaxUint16 {
		return fmt.Errorf("npy header for %s too long", name)
	}
	head := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(head[8:], uint16(len(header)))
	if _, err := w.Write(append(head, header...)); err != nil {
		return err
	}
	// In pieces, so that a large array is not copied whole once more.
	var buf [64 << 10]byte
	for len(data) > 0 {
		n := min(len(data), len(buf)/4)
		for i, v := range data[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		if _, err := w.Write(buf[:4*n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Load reads a trace saved by Save. Nothing is sized by what the files
// claim before the bytes are there: an array's shape must match its data,
// and the manifest's positions and model its arrays.
func Load(dir string) (*Trace, error) {
	path := filepath.Join(dir, "trace.npz")
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if !st.Mode().IsRegular() { // a FIFO would hang the read
		return nil, fmt.Errorf("trace: %s is not a regular file (%v)", path, st.Mode().Type())
	}
	z, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %s: %w", path, err)
	}
	defer z.Close()
	fileSize := st.Size()
	entries := map[string]*zip.File{}
	for _, f := range z.File {
		entries[f.Name] = f
	}
	mf := entries["manifest.json"]
	if mf == nil {
		return nil, fmt.Errorf("trace: %s has no manifest.json: not a Strata trace", path)
	}
	mr, err := mf.Open()
	if err != nil {
		return nil, fmt.Errorf("trace: %s: %w", path, err)
	}
	raw, err := io.ReadAll(io.LimitReader(mr, maxManifest+1))
	mr.Close()
	switch {
	case err != nil:
		return nil, fmt.Errorf("trace: %s: %w", path, err)
	case len(raw) > maxManifest:
		return nil, fmt.Errorf("trace: %s: manifest.json is over %d bytes", path, maxManifest)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("trace: %s: manifest.json: %w", path, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("trace: %s: manifest has format %q, want %q", path, m.Format, manifestFormat)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("trace: %s: manifest.json: %w", path, err)
	}
	t := New()
	t.Model, t.Backend, t.Tokens, t.Pieces, t.Pos0, t.Predicted, t.Lens = m.Model, m.Backend, m.Tokens, m.Pieces, m.Pos0, m.Predicted, m.Lens
	for _, e := range m.Tensors {
		f := entries[e.Name+".npy"]
		if f == nil {
			return nil, fmt.Errorf("trace: %s has no array %s listed in the manifest", path, e.Name)
		}
		shape, data, err := readNpy(f, fileSize)
		if err != nil {
			return nil, fmt.Errorf("trace: %s: array %s: %w", path, e.Name, err)
		}
		if fmt.Sprint(shape) != fmt.Sprint(e.Shape) {
			return nil, fmt.Errorf("trace: %s: array %s has shape %v, the manifest says %v", path, e.Name, shape, e.Shape)
		}
		if err := m.fits(e.Name, shape); err != nil {
			return nil, fmt.Errorf("trace: %s: array %s: %w", path, e.Name, err)
		}
		t.Put(e.Name, &Tensor{Shape: shape, Data: data})
	}
	return t, nil
}

// Bounds on what a saved trace may claim: far past any model, well short of
// what would exhaust memory when a figure sizes itself by them.
const (
	maxManifest  = 1 << 30
	maxDim       = 1 << 24 // model widths, vocabulary, positions
	maxCount     = 1 << 16 // layers, heads, experts
	maxNpyHeader = 1 << 16
)

// check refuses a manifest whose numbers no trace has: what the figures and
// analyses size their memory by, and pieces and predictions that must line
// up with the tokens.
func (m *Manifest) check() error {
	md := m.Model
	for _, c := range []struct {
		name     string
		v, limit int
	}{{"model.layers", md.Layers, maxCount}, {"model.heads", md.Heads, maxCount}, {"model.kv_heads", md.KVHeads, maxCount},
		{"model.experts", md.Experts, maxCount}, {"model.d_model", md.DModel, maxDim}, {"model.ffn", md.FFN, maxDim},
		{"model.head_dim", md.HeadDim, maxDim}, {"model.vocab", md.Vocab, maxDim}, {"pos_start", m.Pos0, maxDim}, {"tokens", len(m.Tokens), maxDim}} {
		if c.v < 0 || c.v > c.limit {
			return fmt.Errorf("%s is %d, outside 0..%d", c.name, c.v, c.limit)
		}
	}
	if len(m.Pieces) != len(m.Tokens) {
		return fmt.Errorf("%d pieces for %d tokens", len(m.Pieces), len(m.Tokens))
	}
	if len(m.Predicted) > len(m.Tokens) {
		return fmt.Errorf("%d predictions for %d tokens", len(m.Predicted), len(m.Tokens))
	}
	if len(md.Windows) > md.Layers {
		return fmt.Errorf("%d attention windows for %d layers", len(md.Windows), md.Layers)
	}
	return nil
}

// fits checks an array against the manifest: its first axis is the tokens
// (the keys of a pattern or cache are the positions up to the last token).
func (m *Manifest) fits(name string, shape []int) error {
	keys := m.Pos0 + len(m.Tokens)
	switch {
	case IsAttentionMap(name):
		if len(shape) != 3 || shape[1] != len(m.Tokens) || shape[2] != keys {
			return fmt.Errorf("shape %v is not [heads, %d tokens, %d keys]", shape, len(m.Tokens), keys)
		}
	case strings.HasSuffix(name, "cache_k") || strings.HasSuffix(name, "cache_v"):
		if len(shape) < 1 || shape[0] != keys {
			return fmt.Errorf("shape %v does not start with the %d positions cached", shape, keys)
		}
	case (name == "logits" || strings.HasPrefix(name, "ln_final.")) && len(shape) == 2:
		if shape[0] != 1 && shape[0] != len(m.Tokens) {
			return fmt.Errorf("shape %v does not start with the last position or all %d", shape, len(m.Tokens))
		}
	case strings.HasPrefix(name, "blocks.") || strings.HasPrefix(name, "hook_"): // a row per token
		if len(shape) < 1 || shape[0] != len(m.Tokens) {
			return fmt.Errorf("shape %v does not start with the %d tokens", shape, len(m.Tokens))
		}
	}
	return nil
}

// readNpy reads one array written by writeNpy: float32, little-endian, C
// order, stored (not compressed, so no array takes more memory than its
// bytes in the archive of fileSize bytes). Memory follows the bytes in the
// file, not the shape its header claims. The zip's checksum is checked at
// the end.
func readNpy(f *zip.File, fileSize int64) ([]int, []float32, error) {
	if f.Method != zip.Store {
		return nil, nil, fmt.Errorf("the array is compressed (zip method %d): Strata reads the uncompressed arrays it writes (numpy.savez, not savez_compressed), whose memory is bounded by the file", f.Method)
	}
	r, err := f.Open()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	br := bufio.NewReader(r)
	var head [10]byte
	if _, err := io.ReadFull(br, head[:8]); err != nil || string(head[:6]) != "\x93NUMPY" {
		return nil, nil, errors.New("not a .npy array")
	}
	var hlen int
	switch head[6] {
	case 1:
		if _, err := io.ReadFull(br, head[8:10]); err != nil {
			return nil, nil, errors.New("truncated .npy header")
		}
		hlen = int(binary.LittleEndian.Uint16(head[8:10]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return nil, nil, errors.New("truncated .npy header")
		}
		hlen = int(binary.LittleEndian.Uint32(l[:]))
	default:
		return nil, nil, fmt.Errorf(".npy version %d.%d", head[6], head[7])
	}
	if hlen > maxNpyHeader {
		return nil, nil, fmt.Errorf(".npy header of %d bytes, over %d", hlen, maxNpyHeader)
	}
	header := make([]byte, hlen)
	if _, err := io.ReadFull(br, header); err != nil {
		return nil, nil, errors.New("truncated .npy header")
	}
	shape, err := npyShape(string(header))
	if err != nil {
		return nil, nil, err
	}
	count := 1
	for _, d := range shape {
		if d > 0 && count > math.MaxInt/4/d {
			return nil, nil, fmt.Errorf("shape %v has more elements than memory can address", shape)
		}
		count *= d
	}
	data := make([]float32, 0, min(int64(count), int64(min(f.UncompressedSize64, uint64(fileSize)))/4))
	var buf [64 << 10]byte
	for len(data) < count {
		n, err := io.ReadFull(br, buf[:4*min(count-len(data), len(buf)/4)])
		for i := 0; i+4 <= n; i += 4 {
			data = append(data, math.Float32frombits(binary.LittleEndian.Uint32(buf[i:])))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("shape %v needs %d values, the file holds %d", shape, count, len(data))
		}
	}
	switch _, err := io.ReadFull(br, buf[:1]); {
	case err == nil:
		return nil, nil, fmt.Errorf("shape %v needs %d values, the file holds more", shape, count)
	case err != io.EOF:
		return nil, nil, err // zip.ErrChecksum: the data is not what was written
	}
	return shape, data, nil
}

// npyShape reads the shape of a .npy header dictionary that stores
// float32 in C order, the only kind Save writes.
func npyShape(dict string) ([]int, error) {
	field := func(key string) (string, bool) {
		_, rest, ok := strings.Cut(dict, "'"+key+"':")
		return strings.TrimSpace(rest), ok
	}
	descr, ok := field("descr")
	if !ok || !strings.HasPrefix(descr, "'<f4'") {
		return nil, errors.New("not little-endian float32 ('<f4')")
	}
	order, ok := field("fortran_order")
	if !ok || !strings.HasPrefix(order, "False") {
		return nil, errors.New("in Fortran order, or with none given: Strata writes C order")
	}
	tuple, ok := field("shape")
	if !ok || !strings.HasPrefix(tuple, "(") || !strings.Contains(tuple, ")") {
		return nil, errors.New("the header has no shape")
	}
	tuple = tuple[1:strings.Index(tuple, ")")]
	shape := []int{}
	for _, d := range strings.Split(tuple, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("shape (%s) is not of counts", tuple)
		}
		shape = append(shape, n)
	}
	return shape, nil
}
