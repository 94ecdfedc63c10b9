package trace

import (
	"archive/zip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbinet/npyio/npz"
)

// Manifest is manifest.json: what the trace holds, readable without numpy.
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
}

// TensorEntry describes one array of trace.npz.
type TensorEntry struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	DType string `json:"dtype"`
}

const manifestFormat = "strata-trace/1"

// Save writes dir/trace.npz and dir/manifest.json. Each file is written
// under a temporary name and renamed, so an interrupted save never leaves a
// half-written file under the final name. The archive holds its own copy of
// the manifest, which Load reads, so the pair cannot disagree either.
func (t *Trace) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m := Manifest{Format: manifestFormat, Model: t.Model, Backend: t.Backend, Tokens: t.Tokens,
		Pieces: t.Pieces, Pos0: t.Pos0, Predicted: t.Predicted, Lens: t.Lens}
	for _, name := range t.Names {
		m.Tensors = append(m.Tensors, TensorEntry{Name: name, Shape: t.Tensors[name].Shape, DType: "float32"})
	}
	manifest, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	err = WriteAtomic(filepath.Join(dir, "trace.npz"), func(w io.Writer) error {
		z := zip.NewWriter(w)
		mw, err := z.Create("manifest.json")
		if err != nil {
			return err
		}
		if _, err := mw.Write(manifest); err != nil {
			return err
		}
		for _, name := range t.Names {
			x := t.Tensors[name]
			if err := writeNpy(z, name, x.Shape, x.Data); err != nil {
				return err
			}
		}
		return z.Close()
	})
	if err != nil {
		return err
	}
	return WriteAtomic(filepath.Join(dir, "manifest.json"), func(w io.Writer) error {
		_, err := w.Write(append(manifest, '\n'))
		return err
	})
}

// WriteAtomic writes path through write into a temporary file in the same
// directory, syncs it and renames it over path.
func WriteAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
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
	buf := make([]byte, 0, 10+len(header)+4*len(data))
	buf = append(buf, "\x93NUMPY\x01\x00"...)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(header)))
	buf = append(buf, header...)
	for _, v := range data {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	_, err = w.Write(buf)
	return err
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
