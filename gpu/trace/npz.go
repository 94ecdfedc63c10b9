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
	"strings"

	"github.com/sbinet/npyio/npz"
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
	m := t.manifest()
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
// temporary file.
func WriteAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
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
	if err := f.Chmod(0o644); err != nil {
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
	return os.Rename(tmp, path)
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

// Load reads a trace saved by Save.
func Load(dir string) (*Trace, error) {
	path := filepath.Join(dir, "trace.npz")
	r, err := npz.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer r.Close()
	mr, err := r.Open("manifest.json")
	if err != nil {
		return nil, fmt.Errorf("trace: %s has no manifest.json: not a Strata trace", path)
	}
	raw, err := io.ReadAll(mr)
	mr.Close()
	if err != nil {
		return nil, fmt.Errorf("trace: %s: %w", path, err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("trace: %s: manifest.json: %w", path, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("trace: %s: manifest has format %q, want %q", path, m.Format, manifestFormat)
	}
	t := New()
	t.Model, t.Backend, t.Tokens, t.Pieces, t.Pos0, t.Predicted, t.Lens = m.Model, m.Backend, m.Tokens, m.Pieces, m.Pos0, m.Predicted, m.Lens
	for _, e := range m.Tensors {
		h := r.Header(e.Name + ".npy")
		if h == nil {
			return nil, fmt.Errorf("trace: %s has no array %s listed in the manifest", path, e.Name)
		}
		if fmt.Sprint(h.Descr.Shape) != fmt.Sprint(e.Shape) {
			return nil, fmt.Errorf("trace: %s: array %s has shape %v, the manifest says %v", path, e.Name, h.Descr.Shape, e.Shape)
		}
		var data []float32
		if err := r.Read(e.Name+".npy", &data); err != nil {
			return nil, fmt.Errorf("trace: %s: %w", path, err)
		}
		t.Put(e.Name, &Tensor{Shape: e.Shape, Data: data})
	}
	return t, nil
}
