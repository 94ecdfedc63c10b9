// Package gguf reads and writes GGUF model files (versions 2 and 3, as
// llama.cpp's ggml/docs/gguf.md defines them).
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/edsrzf/mmap-go"
)

const (
	magic            = "GGUF"
	defaultAlignment = 32
	alignmentKey     = "general.alignment"
	maxDims          = 4 // GGML_MAX_DIMS
	maxArrayDepth    = 8
	// Fewest bytes a KV (empty key, type, 1-byte value) and a tensor info
	// (empty name, n_dims, one dim, type, offset) can take.
	minKVBytes     = 8 + 4 + 1
	minTensorBytes = 8 + 4 + 8 + 4 + 8
)

// KV is one metadata key and its value.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name   string
	Dims   []int64 // ggml order: Dims[0] is the row length
	Type   Type
	Offset int64 // relative to the data section
	Size   int64 // bytes by the type's geometry (Type.RowBytes of the element count)
}

// Elements is the tensor's element count.
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file. Tensor data stays in the mapping (or the
// bytes given to Parse) and is read through Data and Extent.
type File struct {
	Path       string // "" for in-memory
	Version    uint32
	Alignment  int64
	DataOffset int64        // absolute file offset of the data section
	KVs        []KV         // file order
	Tensors    []TensorInfo // file order

	name    string // for errors: Path, or the name given to Parse
	data    []byte
	mapped  bool
	fh      *os.File       // kept open while mapped, to see the mapped file change
	opened  os.FileInfo    // what Open saw
	keys    map[string]int // key -> index in KVs
	names   map[string]int // tensor name -> index in Tensors
	offsets []int64        // tensor offsets, ascending, for Extent

	// Under useMu: the holds on the mapping (Hold), and whether Close was
	// called; the last hold's release then unmaps.
	useMu  sync.Mutex
	users  int
	closed bool
}

// ErrClosed is wrapped by the error of a Hold on a file that was closed.
var ErrClosed = errors.New("the file is closed (Model.Close or File.Close)")

// Open maps the file read-only and parses it. Tensor data is not read until
// used. Close unmaps it; slices from Data and Extent are invalid after that.
func Open(path string) (*File, error) {
	// Opening a FIFO or device blocks or reads forever: refuse it first.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := mapFile(fh, st, path)
	if err != nil {
		fh.Close()
		return nil, err
	}
	return f, nil
}

func mapFile(fh *os.File, st os.FileInfo, path string) (*File, error) {
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	size := st.Size()
	if size == 0 {
		return nil, fmt.Errorf("gguf: %s: empty file", path)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: size %d too large to map", path, size)
	}
	m, err := mmap.Map(fh, mmap.RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: mmap: %w", path, err)
	}
	data := []byte(m)
	f, err := Parse(data, path)
	if err != nil {
		_ = m.Unmap()
		return nil, err
	}
	f.Path = path
	f.mapped = true
	f.fh, f.opened = fh, st
	return f, nil
}

// Changed reports, as an error, whether the mapped file was modified in
// place since Open: its size or modification time differ. Reading a mapping
// whose file shrank faults, and a rewritten one gives other weights, so
// callers check before using the data. A file replaced by a new one (renamed
// over the path) leaves the mapping intact and is not a change.
func (f *File) Changed() error {
	if f == nil || !f.mapped || f.fh == nil {
		return nil
	}
	now, err := f.fh.Stat()
	if err != nil {
		return fmt.Errorf("gguf: %s: %w", f.name, err)
	}
	if now.Size() != f.opened.Size() || !now.ModTime().Equal(f.opened.ModTime()) {
		return fmt.Errorf("gguf: %s changed on disk since it was opened (size %d, now %d; modified %s, now %s): open it again",
			f.name, f.opened.Size(), now.Size(), f.opened.ModTime().Format(time.RFC3339Nano), now.ModTime().Format(time.RFC3339Nano))
	}
	return nil
}

// Parse parses a GGUF file held in data; name is used in errors. The File
// refers to data (it is not copied), so data must not change while in use.
func Parse(data []byte, name string) (*File, error) {
	p := &parser{data: data, name: name}
	f := &File{name: name, data: data, Alignment: defaultAlignment}
	if err := p.parse(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Close releases the mapping made by Open; it is a no-op for parsed bytes.
// Called while a Hold is held (an engine's call in progress on another
// goroutine), it returns at once and the last release unmaps; later Holds
// fail with ErrClosed.
func (f *File) Close() error {
	if f == nil || !f.mapped {
		return nil
	}
	f.useMu.Lock()
	defer f.useMu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.users > 0 {
		return nil
	}
	return f.unmap()
}

// Hold keeps the mapping for a use of its data until release is called:
// a Close meanwhile leaves the unmapping to the last release, so no read of
// the data faults, or reads what was mapped there after. It fails once
// Close was called; parsed bytes and a nil file hold nothing.
func (f *File) Hold() (release func(), err error) {
	if f == nil || !f.mapped {
		return func() {}, nil
	}
	f.useMu.Lock()
	defer f.useMu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("gguf: %s: %w", f.name, ErrClosed)
	}
	f.users++
	return sync.OnceFunc(func() {
		f.useMu.Lock()
		defer f.useMu.Unlock()
		if f.users--; f.users == 0 && f.closed {
			_ = f.unmap() // the Close that deferred it returned already: an munmap of our own mapping does not fail
		}
	}), nil
}

// unmap releases the mapping; f.useMu is held.
func (f *File) unmap() error {
	if f.data == nil {
		return nil
	}
	data := mmap.MMap(f.data)
	f.data = nil
	f.fh.Close()
	if err := data.Unmap(); err != nil {
		return fmt.Errorf("gguf: %s: munmap: %w", f.name, err)
	}
	return nil
}

// Lookup returns the value of a metadata key.
func (f *File) Lookup(key string) (Value, bool) {
	if f == nil {
		return Value{}, false
	}
	i, ok := f.keys[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Tensor returns the named tensor's info.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	if f == nil {
		return nil, false
	}
	i, ok := f.names[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Data returns the tensor's t.Size bytes (a slice of the mapping or of the
// parsed bytes, not a copy). It is nil if the range is not inside the file,
// as after Close, or f or t is nil.
func (f *File) Data(t *TensorInfo) []byte {
	if f == nil || t == nil {
		return nil
	}
	return f.section(t.Offset, t.Size)
}

// Extent returns the bytes from the tensor's offset to the next tensor's
// offset or the end of the file, so format code can recognise a layout whose
// true size differs from Size. Nil if t's offset is not inside the file,
// or f or t is nil.
func (f *File) Extent(t *TensorInfo) []byte {
	if f == nil || t == nil {
		return nil
	}
	end := int64(len(f.data)) - f.DataOffset
	if i := sort.Search(len(f.offsets), func(i int) bool { return f.offsets[i] > t.Offset }); i < len(f.offsets) {
		end = f.offsets[i]
	}
	return f.section(t.Offset, end-t.Offset)
}

func (f *File) section(off, n int64) []byte {
	avail := int64(len(f.data)) - f.DataOffset
	if off < 0 || n < 0 || off > avail || n > avail-off {
		return nil
	}
	start := f.DataOffset + off
	// Full slice expression: an append must copy, never write into the mapping.
	return f.data[start : start+n : start+n]
}

type parser struct {
	data []byte
	pos  int
	name string
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("gguf: %s: offset %d: %s", p.name, p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) left() int { return len(p.data) - p.pos }

func (p *parser) take(n int, what string) ([]byte, error) {
	if n > p.left() {
		return nil, p.errorf("truncated reading %s: need %d bytes, %d left", what, n, p.left())
	}
	b := p.data[p.pos : p.pos+n]
	p.pos += n
	return b, nil
}

func (p *parser) u32(what string) (uint32, error) {
	b, err := p.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (p *parser) u64(what string) (uint64, error) {
	b, err := p.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a u64 count of items each at least minSize bytes and checks
// they can fit in the bytes left, so nothing is sized by an unchecked count.
func (p *parser) count(what string, minSize int) (int, error) {
	n, err := p.u64(what)
	if err != nil {
		return 0, err
	}
	if limit := uint64(p.left() / minSize); n > limit {
		return 0, p.errorf("%s %d exceeds the %d that fit in the %d bytes left", what, n, limit, p.left())
	}
	return int(n), nil
}

func (p *parser) str(what string) (string, error) {
	n, err := p.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	b, err := p.take(n, what)
	return string(b), err
}

func (p *parser) parse(f *File) error {
	b, err := p.take(4, "magic")
	if err != nil {
		return err
	}
	if string(b) != magic {
		return fmt.Errorf("gguf: %s: bad magic %q, want %q: not a GGUF file", p.name, b, magic)
	}
	if f.Version, err = p.u32("version"); err != nil {
		return err
	}
	switch v := f.Version; {
	case v == 2 || v == 3:
	case v == 1:
		return fmt.Errorf("gguf: %s: GGUF version 1 is not supported (only 2 and 3)", p.name)
	case bits.ReverseBytes32(v) <= 3:
		return fmt.Errorf("gguf: %s: big-endian GGUF (version %d byte-swapped) is not supported", p.name, bits.ReverseBytes32(v))
	default:
		return fmt.Errorf("gguf: %s: unsupported GGUF version %d (only 2 and 3)", p.name, v)
	}
	tensorCount, err := p.count("tensor count", minTensorBytes)
	if err != nil {
		return err
	}
	kvCount, err := p.count("metadata KV count", minKVBytes)
	if err != nil {
		return err
	}
	if err := p.kvs(f, kvCount); err != nil {
		return err
	}
	if err := p.alignment(f); err != nil {
		return err
	}
	if err := p.tensorInfos(f, tensorCount); err != nil {
		return err
	}
	f.DataOffset = alignUp(int64(p.pos), f.Alignment)
	return p.placeTensors(f)
}

func (p *parser) kvs(f *File, n int) error {
	f.KVs = make([]KV, 0, min(n, 1024))
	f.keys = make(map[string]int, min(n, 1024))
	for i := range n {
		key, err := p.str(fmt.Sprintf("key of KV %d", i))
		if err != nil {
			return err
		}
		if _, dup := f.keys[key]; dup {
			return p.errorf("duplicate key %q", key)
		}
		t, err := p.u32(fmt.Sprintf("value type of key %q", key))
		if err != nil {
			return err
		}
		v, err := p.value(ValueType(t), 0, key)
		if err != nil {
			return err
		}
		f.keys[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	return nil
}

func (p *parser) value(t ValueType, depth int, key string) (Value, error) {
	what := fmt.Sprintf("%s value of key %q", t, key)
	switch t {
	case ValueString:
		s, err := p.str(what)
		return Value{typ: t, v: s}, err
	case ValueArray:
		return p.array(depth, key)
	}
	if !t.known() {
		return Value{}, p.errorf("key %q has unknown value type %d", key, uint32(t))
	}
	b, err := p.take(t.size(), what)
	if err != nil {
		return Value{}, err
	}
	v, err := scalar(t, b)
	if err != nil {
		return Value{}, p.errorf("key %q: %v", key, err)
	}
	return Value{typ: t, v: v}, nil
}

func scalar(t ValueType, b []byte) (any, error) {
	le := binary.LittleEndian
	switch t {
	case ValueUint8:
		return b[0], nil
	case ValueInt8:
		return int8(b[0]), nil
	case ValueUint16:
		return le.Uint16(b), nil
	case ValueInt16:
		return int16(le.Uint16(b)), nil
	case ValueUint32:
		return le.Uint32(b), nil
	case ValueInt32:
		return int32(le.Uint32(b)), nil
	case ValueFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case ValueBool:
		if b[0] > 1 {
			return nil, fmt.Errorf("BOOL byte is %d, want 0 or 1", b[0])
		}
		return b[0] == 1, nil
	case ValueUint64:
		return le.Uint64(b), nil
	case ValueInt64:
		return int64(le.Uint64(b)), nil
	case ValueFloat64:
		return math.Float64frombits(le.Uint64(b)), nil
	}
	return nil, fmt.Errorf("%s is not a scalar type", t)
}

func (p *parser) array(depth int, key string) (Value, error) {
	et, err := p.u32(fmt.Sprintf("array element type of key %q", key))
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.known() {
		return Value{}, p.errorf("key %q: array has unknown element type %d", key, et)
	}
	if elem == ValueArray && depth+1 >= maxArrayDepth {
		return Value{}, p.errorf("key %q: arrays nested deeper than %d", key, maxArrayDepth)
	}
	n, err := p.count(fmt.Sprintf("%s array count of key %q", elem, key), elem.minSize())
	if err != nil {
		return Value{}, err
	}
	switch elem {
	case ValueString:
		a := make([]string, n)
		for i := range a {
			if a[i], err = p.str(fmt.Sprintf("element %d of key %q", i, key)); err != nil {
				return Value{}, err
			}
		}
		return array(elem, a), nil
	case ValueArray:
		a := make([]Value, n)
		for i := range a {
			if a[i], err = p.array(depth+1, key); err != nil {
				return Value{}, err
			}
		}
		return array(elem, a), nil
	}
	b, err := p.take(n*elem.size(), fmt.Sprintf("%s array of key %q", elem, key))
	if err != nil {
		return Value{}, err
	}
	v, err := scalars(elem, n, b)
	if err != nil {
		return Value{}, p.errorf("key %q: %v", key, err)
	}
	return array(elem, v), nil
}

// scalars decodes n fixed-size elements of type t from b.
func scalars(t ValueType, n int, b []byte) (any, error) {
	le := binary.LittleEndian
	switch t {
	case ValueUint8:
		return clone(b), nil
	case ValueInt8:
		return decode(n, 1, b, func(b []byte) int8 { return int8(b[0]) }), nil
	case ValueUint16:
		return decode(n, 2, b, le.Uint16), nil
	case ValueInt16:
		return decode(n, 2, b, func(b []byte) int16 { return int16(le.Uint16(b)) }), nil
	case ValueUint32:
		return decode(n, 4, b, le.Uint32), nil
	case ValueInt32:
		return decode(n, 4, b, func(b []byte) int32 { return int32(le.Uint32(b)) }), nil
	case ValueFloat32:
		return decode(n, 4, b, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) }), nil
	case ValueBool:
		for i, c := range b {
			if c > 1 {
				return nil, fmt.Errorf("BOOL element %d is %d, want 0 or 1", i, c)
			}
		}
		return decode(n, 1, b, func(b []byte) bool { return b[0] == 1 }), nil
	case ValueUint64:
		return decode(n, 8, b, le.Uint64), nil
	case ValueInt64:
		return decode(n, 8, b, func(b []byte) int64 { return int64(le.Uint64(b)) }), nil
	case ValueFloat64:
		return decode(n, 8, b, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }), nil
	}
	return nil, fmt.Errorf("%s is not a scalar type", t)
}

func decode[T any](n, size int, b []byte, get func([]byte) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = get(b[i*size:])
	}
	return out
}

func (p *parser) alignment(f *File) error {
	i, ok := f.keys[alignmentKey]
	if !ok {
		return nil
	}
	v := f.KVs[i].Value
	if v.typ != ValueUint32 {
		return fmt.Errorf("gguf: %s: key %s is %s, want UINT32", p.name, alignmentKey, v.typ)
	}
	a := v.v.(uint32)
	if a == 0 || a&(a-1) != 0 {
		return fmt.Errorf("gguf: %s: key %s is %d, want a nonzero power of two", p.name, alignmentKey, a)
	}
	f.Alignment = int64(a)
	return nil
}

func (p *parser) tensorInfos(f *File, n int) error {
	if limit := p.left() / minTensorBytes; n > limit {
		return p.errorf("tensor count %d exceeds the %d that fit in the %d bytes left", n, limit, p.left())
	}
	f.Tensors = make([]TensorInfo, 0, min(n, 1024))
	f.names = make(map[string]int, min(n, 1024))
	for i := range n {
		t, err := p.tensorInfo(f, i)
		if err != nil {
			return err
		}
		if _, dup := f.names[t.Name]; dup {
			return p.errorf("duplicate tensor name %q", t.Name)
		}
		f.names[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	return nil
}

func (p *parser) tensorInfo(f *File, i int) (TensorInfo, error) {
	var t TensorInfo
	var err error
	if t.Name, err = p.str(fmt.Sprintf("name of tensor %d", i)); err != nil {
		return t, err
	}
	nDims, err := p.u32(fmt.Sprintf("n_dims of tensor %q", t.Name))
	if err != nil {
		return t, err
	}
	if nDims < 1 || nDims > maxDims {
		return t, p.errorf("tensor %q has %d dims, want 1..%d", t.Name, nDims, maxDims)
	}
	t.Dims = make([]int64, nDims)
	elements := int64(1)
	for d := range t.Dims {
		v, err := p.u64(fmt.Sprintf("dim %d of tensor %q", d, t.Name))
		if err != nil {
			return t, err
		}
		if v < 1 || v > math.MaxInt64 {
			return t, p.errorf("tensor %q dim %d is %d, want 1..%d", t.Name, d, v, int64(math.MaxInt64))
		}
		t.Dims[d] = int64(v)
		if elements > math.MaxInt64/t.Dims[d] {
			return t, p.errorf("tensor %q element count of dims %v overflows int64", t.Name, t.Dims[:d+1])
		}
		elements *= t.Dims[d]
	}
	typ, err := p.u32(fmt.Sprintf("type of tensor %q", t.Name))
	if err != nil {
		return t, err
	}
	t.Type = Type(typ)
	if t.Size, err = tensorSize(t.Type, t.Dims, elements); err != nil {
		return t, p.errorf("tensor %q: %v", t.Name, err)
	}
	off, err := p.u64(fmt.Sprintf("offset of tensor %q", t.Name))
	if err != nil {
		return t, err
	}
	if off > math.MaxInt64 || int64(off)%f.Alignment != 0 {
		return t, p.errorf("tensor %q offset %d is not a multiple of the alignment %d", t.Name, off, f.Alignment)
	}
	t.Offset = int64(off)
	return t, nil
}

// tensorSize checks the type and that rows are whole blocks, and returns
// the data size in bytes.
func tensorSize(typ Type, dims []int64, elements int64) (int64, error) {
	ti, ok := typ.Info()
	if !ok {
		return 0, fmt.Errorf("unknown tensor type id %d", uint32(typ))
	}
	if dims[0]%int64(ti.BlockSize) != 0 {
		return 0, fmt.Errorf("row length %d of %s is not a multiple of its block size %d", dims[0], ti.Name, ti.BlockSize)
	}
	if elements/int64(ti.BlockSize) > math.MaxInt64/int64(ti.BlockBytes) {
		return 0, fmt.Errorf("%d elements of %s overflow int64 bytes", elements, ti.Name)
	}
	return typ.RowBytes(elements)
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// placeTensors checks every tensor's data lies in the file and that no two
// overlap, and records the sorted offsets Extent needs.
func (p *parser) placeTensors(f *File) error {
	size := int64(len(p.data))
	avail := size - f.DataOffset
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset > avail || t.Size > avail-t.Offset {
			return fmt.Errorf("gguf: %s: tensor %q data [%d, %d) ends past the end of the file (size %d)",
				p.name, t.Name, satAdd(f.DataOffset, t.Offset), satAdd(satAdd(f.DataOffset, t.Offset), t.Size), size)
		}
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return f.Tensors[order[a]].Offset < f.Tensors[order[b]].Offset })
	f.offsets = make([]int64, len(order))
	for k, i := range order {
		t := &f.Tensors[i]
		f.offsets[k] = t.Offset
		if k == 0 {
			continue
		}
		prev := &f.Tensors[order[k-1]]
		if prev.Offset+prev.Size > t.Offset {
			return fmt.Errorf("gguf: %s: tensors %q [%d, %d) and %q [%d, %d) overlap (offsets relative to the data section)",
				p.name, prev.Name, prev.Offset, prev.Offset+prev.Size, t.Name, t.Offset, t.Offset+t.Size)
		}
	}
	return nil
}

// satAdd adds without wrapping, for reporting ranges of bogus tensors.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
