package gguf

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/sharedtest"
)

// filled returns n bytes of a position-dependent pattern, so misplaced
// data cannot compare equal by accident.
func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// copyFile rebuilds f with a Writer: every KV, then every tensor in file order.
func copyFile(t testing.TB, f *File) *Writer {
	w := NewWriter()
	for _, kv := range f.KVs {
		require.NoError(t, w.AddKV(kv.Key, kv.Value), kv.Key)
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		require.NoError(t, w.AddTensor(ti.Name, ti.Type, ti.Dims, f.Data(ti)), ti.Name)
	}
	return w
}

func TestWriterRoundTrip(t *testing.T) {
	inner, err := ValueOf([]int16{-5, 6})
	require.NoError(t, err)
	empty, err := ValueOf([]string{})
	require.NoError(t, err)
	nested, err := ValueOf([]Value{inner, empty})
	require.NoError(t, err)
	kvs := []struct {
		key string
		val any
		typ ValueType
	}{
		{"general.alignment", uint32(64), ValueUint32},
		{"u8", uint8(255), ValueUint8},
		{"i8", int8(-128), ValueInt8},
		{"u16", uint16(65535), ValueUint16},
		{"i16", int16(-32768), ValueInt16},
		{"i32", int32(math.MinInt32), ValueInt32},
		{"f32", float32(math.Pi), ValueFloat32},
		{"f32inf", float32(math.Inf(-1)), ValueFloat32},
		{"t", true, ValueBool},
		{"f", false, ValueBool},
		{"s", "héllo\x00world", ValueString},
		{"u64", uint64(math.MaxUint64), ValueUint64},
		{"i64", int64(math.MinInt64), ValueInt64},
		{"f64", math.SmallestNonzeroFloat64, ValueFloat64},
		{"bytes", []uint8{0, 1, 255}, ValueArray},
		{"i8s", []int8{-1, 1}, ValueArray},
		{"u16s", []uint16{1, 65535}, ValueArray},
		{"i16s", []int16{-2}, ValueArray},
		{"u32s", []uint32{}, ValueArray},
		{"i32s", []int32{math.MaxInt32, -7}, ValueArray},
		{"f32s", []float32{1.5, -0.0}, ValueArray},
		{"bools", []bool{true, false, true}, ValueArray},
		{"strs", []string{"a", "", "ccc"}, ValueArray},
		{"u64s", []uint64{1 << 63}, ValueArray},
		{"i64s", []int64{-1 << 40}, ValueArray},
		{"f64s", []float64{1e300, -2}, ValueArray},
		{"nested", nested, ValueArray},
	}
	tensors := []struct {
		name string
		typ  Type
		dims []int64
		size int
	}{
		{"f32", F32, []int64{3, 5}, 60},
		{"q4", Q4_0, []int64{64, 2}, 4 * 18},
		{"q8", Q8_0, []int64{32, 1, 1, 3}, 3 * 34},
		{"f16", F16, []int64{7}, 14},
		{"q6k", Q6_K, []int64{256}, 210},
	}
	w := NewWriter()
	for _, kv := range kvs {
		require.NoError(t, w.AddKV(kv.key, kv.val), kv.key)
	}
	for i, tc := range tensors {
		require.NoError(t, w.AddTensor(tc.name, tc.typ, tc.dims, filled(tc.size, byte(i))), tc.name)
	}
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	require.NoError(t, err)
	assert.Equal(t, int64(buf.Len()), n)
	assert.Zero(t, n%64, "the file ends padded to the alignment")

	f, err := Parse(buf.Bytes(), "roundtrip.gguf")
	require.NoError(t, err)
	assert.Equal(t, uint32(3), f.Version)
	assert.Equal(t, int64(64), f.Alignment)
	require.Len(t, f.KVs, len(kvs))
	for i, kv := range kvs {
		got := f.KVs[i]
		assert.Equal(t, kv.key, got.Key)
		assert.Equal(t, kv.typ, got.Value.Type(), kv.key)
		want := kv.val
		if v, ok := want.(Value); ok {
			want = v.Any()
		}
		assert.Equal(t, want, got.Value.Any(), kv.key)
	}
	nv, _ := f.Lookup("nested")
	assert.Equal(t, ValueArray, nv.ElemType())
	assert.Equal(t, []any{[]int16{-5, 6}, []string{}}, nv.Any())
	require.Len(t, f.Tensors, len(tensors))
	for i, tc := range tensors {
		ti := f.Tensors[i]
		assert.Equal(t, tc.name, ti.Name)
		assert.Equal(t, tc.typ, ti.Type, tc.name)
		assert.Equal(t, tc.dims, ti.Dims, tc.name)
		assert.Equal(t, int64(tc.size), ti.Size, tc.name)
		assert.Zero(t, ti.Offset%64, tc.name)
		assert.Equal(t, filled(tc.size, byte(i)), f.Data(&ti), tc.name)
	}
	// Tensors are packed in order, each at the next 64-byte boundary.
	assert.Equal(t, []int64{0, 64, 192, 320, 384}, []int64{
		f.Tensors[0].Offset, f.Tensors[1].Offset, f.Tensors[2].Offset, f.Tensors[3].Offset, f.Tensors[4].Offset})

	// Writing the parsed file again reproduces the same bytes.
	var again bytes.Buffer
	_, err = copyFile(t, f).WriteTo(&again)
	require.NoError(t, err)
	assert.Equal(t, buf.Bytes(), again.Bytes())
}

func TestWriterMatchesLlamaCpp(t *testing.T) {
	// stories260K.gguf was written by llama.cpp; rebuilding it from its
	// parsed contents must give the identical file.
	path := sharedtest.Stories(t)
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := Parse(orig, path)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = copyFile(t, f).WriteTo(&buf)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(orig, buf.Bytes()), "rebuilt file differs from the original (%d vs %d bytes)", buf.Len(), len(orig))
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.gguf")
	require.NoError(t, os.WriteFile(path, []byte("old contents"), 0o644))
	w := NewWriter()
	require.NoError(t, w.AddKV("general.architecture", "llama"))
	require.NoError(t, w.AddTensor("w", F32, []int64{2, 2}, filled(16, 1)))
	require.NoError(t, w.WriteFile(path))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left behind")
	assert.Equal(t, "out.gguf", entries[0].Name())
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	arch, err := f.String("general.architecture")
	require.NoError(t, err)
	assert.Equal(t, "llama", arch)
	ti, ok := f.Tensor("w")
	require.True(t, ok)
	assert.Equal(t, filled(16, 1), f.Data(ti))

	err = w.WriteFile(filepath.Join(dir, "missing-dir", "x.gguf"))
	assert.ErrorContains(t, err, "missing-dir")
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter()
	require.NoError(t, w.AddKV("k", uint32(1)))
	assert.ErrorContains(t, w.AddKV("k", uint32(2)), `duplicate key "k"`)
	assert.ErrorContains(t, w.AddKV("n", 5), "use a sized type")
	assert.ErrorContains(t, w.AddKV("m", map[string]int{}), "cannot store a Go map[string]int")
	assert.ErrorContains(t, w.AddKV("z", Value{}), `key "z": zero Value`)
	assert.ErrorContains(t, w.AddKV("general.alignment", uint64(64)), "general.alignment is UINT64, want UINT32")
	assert.ErrorContains(t, w.AddKV("general.alignment", uint32(24)), "general.alignment is 24, want a nonzero power of two")
	_, err := ValueOf([]Value{{}})
	assert.ErrorContains(t, err, "element 0 of an array of arrays is UINT8, want ARRAY")
	deep, err := ValueOf([]uint8{})
	require.NoError(t, err)
	for range 8 {
		deep, err = ValueOf([]Value{deep})
		require.NoError(t, err)
	}
	assert.ErrorContains(t, w.AddKV("deep", deep), "nested deeper than 8")

	assert.ErrorContains(t, w.AddTensor("t", F32, []int64{4}, make([]byte, 15)), `tensor "t": 15 bytes of data, want 16 for F32 [4]`)
	assert.ErrorContains(t, w.AddTensor("t", F32, nil, nil), `tensor "t" has 0 dims`)
	assert.ErrorContains(t, w.AddTensor("t", F32, []int64{1, 1, 1, 1, 1}, make([]byte, 4)), "has 5 dims")
	assert.ErrorContains(t, w.AddTensor("t", F32, []int64{4, 0}, nil), "dim 1 is 0")
	assert.ErrorContains(t, w.AddTensor("t", F32, []int64{1 << 32, 1 << 32}, nil), "overflows int64")
	assert.ErrorContains(t, w.AddTensor("t", Type(99), []int64{4}, nil), "unknown tensor type id 99")
	assert.ErrorContains(t, w.AddTensor("t", Q4_0, []int64{16, 2}, make([]byte, 18)), "row length 16 of Q4_0")
	require.NoError(t, w.AddTensor("t", F32, []int64{1}, make([]byte, 4)))
	assert.ErrorContains(t, w.AddTensor("t", F32, []int64{1}, make([]byte, 4)), `duplicate tensor name "t"`)
	assert.ErrorContains(t, w.AddKV("general.alignment", uint32(64)), "before adding tensors")
}

func TestWriterEmpty(t *testing.T) {
	var buf bytes.Buffer
	_, err := NewWriter().WriteTo(&buf)
	require.NoError(t, err)
	want := new(raw).header(3, 0, 0).padTo(32).Bytes()
	assert.Equal(t, want, buf.Bytes())
}

// A tensor made as it is written gives the same file as one handed over
// whole, Size says how long the file is before it is written, and a fill
// that fails names its tensor.
func TestTensorsMadeAsTheyAreWritten(t *testing.T) {
	data := make([]byte, 4*6)
	for i := range data {
		data[i] = byte(i * 7)
	}
	eager, lazy := NewWriter(), NewWriter()
	for _, w := range []*Writer{eager, lazy} {
		require.NoError(t, w.AddKV("general.architecture", "llama"))
		require.NoError(t, w.AddTensor("a", F32, []int64{3}, data[:12]))
	}
	require.NoError(t, eager.AddTensor("b", F32, []int64{3, 2}, data))
	calls := 0
	require.NoError(t, lazy.AddTensorFunc("b", F32, []int64{3, 2}, func(dst []byte) error {
		calls++
		require.Len(t, dst, 24)
		copy(dst, data)
		return nil
	}))
	var want, got bytes.Buffer
	_, err := eager.WriteTo(&want)
	require.NoError(t, err)
	require.Equal(t, int64(want.Len()), lazy.Size())
	require.Zero(t, calls, "Size makes nothing")
	n, err := lazy.WriteTo(&got)
	require.NoError(t, err)
	require.Equal(t, want.Bytes(), got.Bytes())
	require.Equal(t, int64(got.Len()), n)
	require.Equal(t, 1, calls)

	bad := NewWriter()
	require.NoError(t, bad.AddTensorFunc("w", F32, []int64{2}, func([]byte) error { return errors.New("no entropy") }))
	_, err = bad.WriteTo(io.Discard)
	require.EqualError(t, err, `gguf: tensor "w": no entropy`)
	require.ErrorContains(t, bad.AddTensorFunc("w", F32, []int64{2}, nil), "duplicate tensor name")
	require.ErrorContains(t, bad.AddTensor("x", F32, []int64{2}, make([]byte, 4)), "4 bytes of data, want 8")
	require.NoError(t, bad.AddTensor("x", F32, []int64{2}, make([]byte, 8)), "a refused tensor leaves its name free")
}
