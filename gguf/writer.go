package gguf

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Writer builds a GGUF v3 file from KVs and tensors, written in the order added.
type Writer struct {
	kvs       []KV
	keys      map[string]bool
	tensors   []TensorInfo
	data      [][]byte                 // a tensor's bytes, or nil when fill makes them
	fill      []func(dst []byte) error // makes a tensor's bytes as it is written
	names     map[string]bool
	alignment int64
}

// NewWriter returns a Writer for version 3 with alignment 32; setting
// general.alignment through AddKV changes the alignment.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}, alignment: defaultAlignment}
}

// AddKV adds a metadata key. v is a Go value ValueOf accepts: uint8..int64,
// float32/64, bool, string, a slice of those, or a Value.
func (w *Writer) AddKV(key string, v any) error {
	if w.keys[key] {
		return fmt.Errorf("gguf: duplicate key %q", key)
	}
	val, err := ValueOf(v)
	if err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if err := checkValue(val, 0); err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if key == alignmentKey {
		a, ok := val.v.(uint32)
		if !ok {
			return fmt.Errorf("gguf: key %s is %s, want UINT32", key, val.typ)
		}
		if a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("gguf: key %s is %d, want a nonzero power of two", key, a)
		}
		if len(w.tensors) > 0 {
			return fmt.Errorf("gguf: key %s must be set before adding tensors", key)
		}
		w.alignment = int64(a)
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{Key: key, Value: val})
	return nil
}

// checkValue rejects Values the parser would refuse: the zero Value, and
// arrays nested deeper than maxArrayDepth.
func checkValue(v Value, depth int) error {
	if v.v == nil {
		return errors.New("zero Value")
	}
	if inner, ok := v.v.([]Value); ok {
		if depth+1 >= maxArrayDepth {
			return fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
		}
		for _, e := range inner {
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddTensor adds a tensor. dims are in ggml order (dims[0] is the row
// length); len(data) must equal the type's RowBytes of the element count.
// data is not copied and must not change until the file is written.
func (w *Writer) AddTensor(name string, typ Type, dims []int64, data []byte) error {
	size, err := w.addInfo(name, typ, dims)
	if err != nil {
		return err
	}
	if int64(len(data)) != size {
		w.unadd(name)
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, want %d for %s %v", name, len(data), size, typ, dims)
	}
	w.data = append(w.data, data)
	w.fill = append(w.fill, nil)
	return nil
}

// AddTensorFunc adds a tensor whose bytes fill writes into dst (of the
// tensor's size) when the file is written, so that a writer of generated
// weights holds one tensor at a time, not every one.
func (w *Writer) AddTensorFunc(name string, typ Type, dims []int64, fill func(dst []byte) error) error {
	if _, err := w.addInfo(name, typ, dims); err != nil {
		return err
	}
	w.data = append(w.data, nil)
	w.fill = append(w.fill, fill)
	return nil
}

// Size is the number of bytes WriteTo writes.
func (w *Writer) Size() int64 {
	e := &encoder{w: bufio.NewWriter(io.Discard)}
	w.header(e)
	if n := len(w.tensors); n > 0 {
		last := w.tensors[n-1]
		e.n += alignUp(last.Offset+last.Size, w.alignment)
	}
	return e.n
}

// unadd takes back the tensor addInfo just added.
func (w *Writer) unadd(name string) {
	delete(w.names, name)
	w.tensors = w.tensors[:len(w.tensors)-1]
}

// addInfo checks a tensor's name, dims and type and adds its info; it
// returns the tensor's size in bytes.
func (w *Writer) addInfo(name string, typ Type, dims []int64) (int64, error) {
	if w.names[name] {
		return 0, fmt.Errorf("gguf: duplicate tensor name %q", name)
	}
	if len(dims) < 1 || len(dims) > maxDims {
		return 0, fmt.Errorf("gguf: tensor %q has %d dims, want 1..%d", name, len(dims), maxDims)
	}
	elements := int64(1)
	for i, d := range dims {
		if d < 1 {
			return 0, fmt.Errorf("gguf: tensor %q dim %d is %d, want >= 1", name, i, d)
		}
		if elements > math.MaxInt64/d {
			return 0, fmt.Errorf("gguf: tensor %q element count of dims %v overflows int64", name, dims)
		}
		elements *= d
	}
	size, err := tensorSize(typ, dims, elements)
	if err != nil {
		return 0, fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	offset := int64(0)
	if n := len(w.tensors); n > 0 {
		last := w.tensors[n-1]
		offset = alignUp(last.Offset+last.Size, w.alignment)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{Name: name, Dims: clone(dims), Type: typ, Offset: offset, Size: size})
	return size, nil
}

// WriteTo writes the file: header, KVs, tensor infos, then each tensor's
// data padded to the alignment.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if out == nil {
		return 0, errors.New("gguf: WriteTo a nil io.Writer")
	}
	e := &encoder{w: bufio.NewWriterSize(out, 1<<20)}
	w.header(e)
	var scratch []byte // made tensors share one buffer: garbage per tensor would let the heap double
	for i, d := range w.data {
		if fill := w.fill[i]; fill != nil && e.err == nil {
			if size := int(w.tensors[i].Size); size > cap(scratch) {
				scratch = make([]byte, size)
			}
			d = scratch[:w.tensors[i].Size]
			clear(d)
			if err := fill(d); err != nil {
				e.err = fmt.Errorf("gguf: tensor %q: %w", w.tensors[i].Name, err)
			}
		}
		e.bytes(d)
		e.pad(w.alignment)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.n, e.err
}

// header writes the magic, version, KVs and tensor infos, padded to the
// alignment.
func (w *Writer) header(e *encoder) {
	e.bytes([]byte(magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	for _, t := range w.tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(uint64(d))
		}
		e.u32(uint32(t.Type))
		e.u64(uint64(t.Offset))
	}
	e.pad(w.alignment)
}

// WriteFile writes the file to a temporary name in path's directory, syncs
// it and renames it over path, so an interrupted write never leaves a
// partial file under path.
func (w *Writer) WriteFile(path string) error { return w.WriteFileContext(context.Background(), path) }

// WriteFileContext is WriteFile that ctx can stop: then path is as it was
// and no temporary file stays.
func (w *Writer) WriteFileContext(ctx context.Context, path string) (err error) {
	if ctx == nil {
		return errors.New("gguf: WriteFileContext with a nil context")
	}
	base := filepath.Base(path)
	if len(base) > 200 { // the temporary name must fit the 255-byte limit too
		sum := sha256.Sum256([]byte(base))
		base = strings.ToValidUTF8(base[:64], "") + "~" + hex.EncodeToString(sum[:8])
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), base+".tmp-*")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = w.WriteTo(ctxWriter{ctx, tmp}); err != nil {
		return fmt.Errorf("gguf: writing %s: %w", tmp.Name(), err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// ctxWriter stops writing once ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// encoder writes little-endian values, keeping the first error and the
// byte count.
type encoder struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += int64(n)
	e.err = err
}

func (e *encoder) u8(v uint8) { e.bytes([]byte{v}) }

func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.bytes(e.buf[:2])
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.bytes(e.buf[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.bytes(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

var zeros [256]byte

func (e *encoder) pad(alignment int64) {
	n := alignUp(e.n, alignment) - e.n
	for n > 0 {
		k := min(n, int64(len(zeros)))
		e.bytes(zeros[:k])
		n -= k
	}
}

func (e *encoder) value(v Value) {
	switch x := v.v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		e.u8(boolByte(x))
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	default:
		e.array(v)
	}
}

func (e *encoder) array(v Value) {
	e.u32(uint32(v.elem))
	switch a := v.v.(type) {
	case []uint8:
		e.u64(uint64(len(a)))
		e.bytes(a)
	case []Value:
		elems(e, a, func(x Value) { e.array(x) })
	case []int8:
		elems(e, a, func(x int8) { e.u8(uint8(x)) })
	case []uint16:
		elems(e, a, e.u16)
	case []int16:
		elems(e, a, func(x int16) { e.u16(uint16(x)) })
	case []uint32:
		elems(e, a, e.u32)
	case []int32:
		elems(e, a, func(x int32) { e.u32(uint32(x)) })
	case []float32:
		elems(e, a, func(x float32) { e.u32(math.Float32bits(x)) })
	case []bool:
		elems(e, a, func(x bool) { e.u8(boolByte(x)) })
	case []string:
		elems(e, a, e.str)
	case []uint64:
		elems(e, a, e.u64)
	case []int64:
		elems(e, a, func(x int64) { e.u64(uint64(x)) })
	case []float64:
		elems(e, a, func(x float64) { e.u64(math.Float64bits(x)) })
	}
}

func elems[T any](e *encoder, a []T, put func(T)) {
	e.u64(uint64(len(a)))
	for _, x := range a {
		put(x)
	}
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
