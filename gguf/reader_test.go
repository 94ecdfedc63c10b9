package gguf

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/sharedtest"
)

// handBuilt is a v3 file with one KV of every type, a nested array, and two
// F32 tensors with a gap between them (the second at offset 64).
func handBuilt() []byte {
	r := new(raw).header(3, 2, 15)
	r.str("u8").u32(uint32(ValueUint8)).u8(200)
	r.str("i8").u32(uint32(ValueInt8)).u8(0xfe)
	r.str("u16").u32(uint32(ValueUint16)).u8(0x34).u8(0x12)
	r.str("i16").u32(uint32(ValueInt16)).u8(0xff).u8(0xff)
	r.kvU32("u32", 4000000000)
	r.str("i32").u32(uint32(ValueInt32)).u32(uint32(0xfffffffd))
	r.str("f32").u32(uint32(ValueFloat32)).f32(1e-5)
	r.str("bool").u32(uint32(ValueBool)).u8(1)
	r.str("str").u32(uint32(ValueString)).str("llama")
	r.str("u64").u32(uint32(ValueUint64)).u64(1 << 40)
	r.str("i64").u32(uint32(ValueInt64)).u64(uint64(math.MaxUint64)) // -1
	r.str("f64").u32(uint32(ValueFloat64)).u64(math.Float64bits(0.1))
	r.str("tokens").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(3).str("a").str("").str("ccc")
	r.str("types").u32(uint32(ValueArray)).u32(uint32(ValueInt32)).u64(2).u32(1).u32(uint32(0xffffffff))
	r.str("nested").u32(uint32(ValueArray)).u32(uint32(ValueArray)).u64(2).
		u32(uint32(ValueUint8)).u64(2).u8(7).u8(8).
		u32(uint32(ValueArray)).u64(1).u32(uint32(ValueBool)).u64(1).u8(0)
	r.tensor("a", F32, 0, 3, 2)
	r.tensor("b", F32, 64, 4)
	r.padTo(32)
	for i := range 24 { // a: 6 floats, 24 bytes
		r.u8(uint8(i))
	}
	r.zeros(64 - 24)
	for i := range 16 { // b: 4 floats
		r.u8(uint8(100 + i))
	}
	return r.Bytes()
}

func TestParseHandBuilt(t *testing.T) {
	data := handBuilt()
	f, err := Parse(data, "hand.gguf")
	require.NoError(t, err)
	assert.Equal(t, uint32(3), f.Version)
	assert.Equal(t, int64(32), f.Alignment)
	assert.Equal(t, "", f.Path)
	assert.Zero(t, f.DataOffset%32)
	assert.Equal(t, int64(len(data)-64-16), f.DataOffset)

	want := []struct {
		key  string
		typ  ValueType
		elem ValueType
		val  any
	}{
		{"u8", ValueUint8, 0, uint8(200)},
		{"i8", ValueInt8, 0, int8(-2)},
		{"u16", ValueUint16, 0, uint16(0x1234)},
		{"i16", ValueInt16, 0, int16(-1)},
		{"u32", ValueUint32, 0, uint32(4000000000)},
		{"i32", ValueInt32, 0, int32(-3)},
		{"f32", ValueFloat32, 0, float32(1e-5)},
		{"bool", ValueBool, 0, true},
		{"str", ValueString, 0, "llama"},
		{"u64", ValueUint64, 0, uint64(1 << 40)},
		{"i64", ValueInt64, 0, int64(-1)},
		{"f64", ValueFloat64, 0, 0.1},
		{"tokens", ValueArray, ValueString, []string{"a", "", "ccc"}},
		{"types", ValueArray, ValueInt32, []int32{1, -1}},
		{"nested", ValueArray, ValueArray, []any{[]uint8{7, 8}, []any{[]bool{false}}}},
	}
	require.Len(t, f.KVs, len(want))
	for i, w := range want {
		kv := f.KVs[i]
		assert.Equal(t, w.key, kv.Key)
		assert.Equal(t, w.typ, kv.Value.Type(), w.key)
		if w.typ == ValueArray {
			assert.Equal(t, w.elem, kv.Value.ElemType(), w.key)
		}
		assert.Equal(t, w.val, kv.Value.Any(), w.key)
		v, ok := f.Lookup(w.key)
		assert.True(t, ok)
		assert.Equal(t, w.val, v.Any())
	}
	_, ok := f.Lookup("absent")
	assert.False(t, ok)

	require.Len(t, f.Tensors, 2)
	a, ok := f.Tensor("a")
	require.True(t, ok)
	assert.Equal(t, TensorInfo{Name: "a", Dims: []int64{3, 2}, Type: F32, Offset: 0, Size: 24}, *a)
	assert.Equal(t, int64(6), a.Elements())
	assert.Equal(t, data[f.DataOffset:f.DataOffset+24], f.Data(a))
	assert.Len(t, f.Extent(a), 64, "extent of a runs to b's offset")
	b, ok := f.Tensor("b")
	require.True(t, ok)
	assert.Equal(t, TensorInfo{Name: "b", Dims: []int64{4}, Type: F32, Offset: 64, Size: 16}, *b)
	assert.Equal(t, []byte{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115}, f.Data(b))
	assert.Equal(t, f.Data(b), f.Extent(b), "extent of the last tensor runs to the end of the file")
	_, ok = f.Tensor("c")
	assert.False(t, ok)

	// Returned slices are capped: appending must not write into the file bytes.
	before := data[f.DataOffset+24]
	_ = append(f.Data(a), 0xaa)
	assert.Equal(t, before, data[f.DataOffset+24])

	// Any returns copies: changing them leaves the file's value intact.
	v, _ := f.Lookup("tokens")
	v.Any().([]string)[0] = "changed"
	s, err := f.Strings("tokens")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "", "ccc"}, s)
	assert.NoError(t, f.Close())
}

func TestParseVersion2AndAlignment(t *testing.T) {
	r := new(raw).header(2, 2, 1)
	r.kvU32("general.alignment", 64)
	r.tensor("x", Q8_0, 0, 32) // one 34-byte block
	r.tensor("y", F32, 64, 1)  // next 64-aligned offset
	r.padTo(64).zeros(64 + 4)
	f, err := Parse(r.Bytes(), "v2.gguf")
	require.NoError(t, err)
	assert.Equal(t, uint32(2), f.Version)
	assert.Equal(t, int64(64), f.Alignment)
	assert.Zero(t, f.DataOffset%64)
	x, _ := f.Tensor("x")
	assert.Equal(t, int64(34), x.Size)
	assert.Len(t, f.Data(x), 34)
	assert.Len(t, f.Extent(x), 64)
}

func TestParseNoTensors(t *testing.T) {
	// A metadata-only file need not carry padding up to the data section.
	r := new(raw).header(3, 0, 1).kvU32("k", 1)
	f, err := Parse(r.Bytes(), "meta.gguf")
	require.NoError(t, err)
	assert.Empty(t, f.Tensors)
	n, err := f.Uint32("k")
	require.NoError(t, err)
	assert.Equal(t, uint32(1), n)
}

type malformedFile struct {
	name string
	data []byte
	want []string // substrings of the error
}

// malformed lists bad files and what Parse must say about each; the fuzz
// seeds include them.
func malformed() []malformedFile {
	valid := func() *raw { return new(raw).header(3, 1, 0) }
	withTensor := func(typ Type, offset uint64, dims ...uint64) []byte {
		r := new(raw).header(3, 1, 0).tensor("w", typ, offset, dims...)
		return r.padTo(32).zeros(64).Bytes()
	}
	return []malformedFile{
		{"empty", nil, []string{"bad.gguf", "truncated reading magic"}},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), []string{`bad magic "GGML"`}},
		{"version 1", new(raw).header(1, 0, 0).Bytes(), []string{"version 1 is not supported"}},
		{"version 4", new(raw).header(4, 0, 0).Bytes(), []string{"unsupported GGUF version 4"}},
		{"big endian", new(raw).header(3<<24, 0, 0).Bytes(), []string{"big-endian"}},
		{"truncated header", []byte("GGUF\x03\x00\x00\x00\x01"), []string{"offset 8", "truncated reading tensor count"}},
		{"huge tensor count", new(raw).header(3, 1<<60, 0).Bytes(), []string{"tensor count 1152921504606846976 exceeds"}},
		{"huge kv count", new(raw).header(3, 0, 1<<60).Bytes(), []string{"metadata KV count 1152921504606846976 exceeds"}},
		{"huge key length", new(raw).header(3, 0, 1).u64(1 << 62).zeros(16).Bytes(), []string{"key of KV 0 length 4611686018427387904 exceeds"}},
		{"truncated value", new(raw).header(3, 0, 1).str("k").u32(uint32(ValueUint64)).u32(1).Bytes(),
			[]string{`truncated reading UINT64 value of key "k"`, "need 8 bytes, 4 left"}},
		{"unknown value type", new(raw).header(3, 0, 1).str("k").u32(13).u64(0).Bytes(), []string{`key "k" has unknown value type 13`}},
		{"bad bool", new(raw).header(3, 0, 1).str("k").u32(uint32(ValueBool)).u8(2).Bytes(), []string{`key "k"`, "BOOL byte is 2"}},
		{"huge array", new(raw).header(3, 0, 1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueUint64)).u64(1 << 60).zeros(64).Bytes(),
			[]string{`UINT64 array count of key "k" 1152921504606846976 exceeds the 8 that fit`}},
		{"huge string array", new(raw).header(3, 0, 1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(1 << 60).zeros(64).Bytes(),
			[]string{`STRING array count of key "k"`, "exceeds the 8 that fit"}},
		{"unknown elem type", new(raw).header(3, 0, 1).str("k").u32(uint32(ValueArray)).u32(99).u64(0).Bytes(), []string{"unknown element type 99"}},
		{"deep nesting", deepArray(9), []string{"nested deeper than 8"}},
		{"duplicate key", new(raw).header(3, 0, 2).kvU32("k", 1).kvU32("k", 2).Bytes(), []string{`duplicate key "k"`}},
		{"alignment type", new(raw).header(3, 0, 1).str("general.alignment").u32(uint32(ValueUint64)).u64(32).Bytes(),
			[]string{"general.alignment is UINT64, want UINT32"}},
		{"alignment not pow2", new(raw).header(3, 0, 1).kvU32("general.alignment", 48).Bytes(), []string{"general.alignment is 48, want a nonzero power of two"}},
		{"alignment zero", new(raw).header(3, 0, 1).kvU32("general.alignment", 0).Bytes(), []string{"general.alignment is 0"}},
		{"zero dims", valid().str("w").u32(0).zeros(64).Bytes(), []string{`tensor "w" has 0 dims, want 1..4`}},
		{"five dims", valid().str("w").u32(5).zeros(64).Bytes(), []string{`tensor "w" has 5 dims`}},
		{"zero dim", withTensor(F32, 0, 4, 0), []string{`tensor "w" dim 1 is 0`}},
		{"dim above int64", withTensor(F32, 0, 1<<63), []string{`tensor "w" dim 0 is 9223372036854775808`}},
		{"element overflow", withTensor(F32, 0, 1<<32, 1<<32), []string{`tensor "w" element count`, "overflows int64"}},
		{"byte overflow", withTensor(F32, 0, 1<<62), []string{`tensor "w"`, "overflow int64 bytes"}},
		{"unknown type", withTensor(Type(5), 0, 4), []string{`tensor "w"`, "unknown tensor type id 5"}},
		{"partial block", withTensor(Q4_0, 0, 16, 2), []string{`tensor "w"`, "row length 16 of Q4_0 is not a multiple of its block size 32"}},
		{"misaligned offset", withTensor(F32, 4, 1), []string{`tensor "w" offset 4 is not a multiple of the alignment 32`}},
		{"data past end", withTensor(F32, 32, 16), []string{`tensor "w" data`, "ends past the end of the file (size"}},
		{"huge alignment", new(raw).header(3, 1, 1).kvU32("general.alignment", 1<<31).tensor("w", F32, 0, 1).zeros(64).Bytes(),
			[]string{`tensor "w" data [2147483648, 2147483652) ends past the end of the file (size`}},
		{"offset far past end", withTensor(F32, 1<<62, 1), []string{`tensor "w" data [`, "past the end"}},
		{"truncated tensor info", valid().str("w").u32(4).u64(4).u64(4).u64(4).Bytes(), []string{`truncated reading dim 3 of tensor "w"`}},
		{"duplicate tensor", new(raw).header(3, 2, 0).tensor("w", F32, 0, 1).tensor("w", F32, 32, 1).padTo(32).zeros(64).Bytes(),
			[]string{`duplicate tensor name "w"`}},
		{"overlap", new(raw).header(3, 2, 0).tensor("p", F32, 0, 16).tensor("q", F32, 32, 8).padTo(32).zeros(96).Bytes(),
			[]string{`tensors "p" [0, 64) and "q" [32, 64) overlap`}},
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range malformed() {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse(c.data, "bad.gguf")
			require.Error(t, err)
			assert.Nil(t, f)
			assert.Contains(t, err.Error(), "bad.gguf")
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// deepArray is a file with one key holding arrays nested depth deep.
func deepArray(depth int) []byte {
	r := new(raw).header(3, 0, 1).str("k").u32(uint32(ValueArray))
	for range depth - 1 {
		r.u32(uint32(ValueArray)).u64(1)
	}
	return r.u32(uint32(ValueUint8)).u64(0).Bytes()
}

func TestParseNestingLimit(t *testing.T) {
	f, err := Parse(deepArray(8), "deep.gguf")
	require.NoError(t, err, "8 levels are allowed")
	v, _ := f.Lookup("k")
	for range 7 {
		a := v.Any().([]any)
		require.Len(t, a, 1)
		require.Equal(t, ValueArray, v.ElemType())
		v = v.v.([]Value)[0]
	}
	assert.Equal(t, []uint8{}, v.Any())
}

func TestAccessors(t *testing.T) {
	r := new(raw).header(3, 0, 12)
	r.kvU32("u32", 5)
	r.str("u64small").u32(uint32(ValueUint64)).u64(5)
	r.str("u64big").u32(uint32(ValueUint64)).u64(1 << 40)
	r.str("neg").u32(uint32(ValueInt32)).u32(uint32(0xfffffffd)) // -3
	r.str("f32").u32(uint32(ValueFloat32)).f32(0.5)
	r.str("f64").u32(uint32(ValueFloat64)).u64(math.Float64bits(0.25))
	r.str("f64huge").u32(uint32(ValueFloat64)).u64(math.Float64bits(1e300))
	r.str("s").u32(uint32(ValueString)).str("x")
	r.str("b").u32(uint32(ValueBool)).u8(0)
	r.str("ids").u32(uint32(ValueArray)).u32(uint32(ValueUint64)).u64(2).u64(7).u64(1 << 31)
	r.str("small").u32(uint32(ValueArray)).u32(uint32(ValueInt8)).u64(2).u8(0xff).u8(3)
	r.str("scores").u32(uint32(ValueArray)).u32(uint32(ValueFloat64)).u64(2).u64(math.Float64bits(-1.5)).u64(math.Float64bits(2))
	f, err := Parse(r.Bytes(), "acc.gguf")
	require.NoError(t, err)

	u32, err := f.Uint32("u32")
	require.NoError(t, err)
	assert.Equal(t, uint32(5), u32)
	u32, err = f.Uint32("u64small")
	require.NoError(t, err, "a UINT64 holding 5 fits uint32")
	assert.Equal(t, uint32(5), u32)
	_, err = f.Uint32("u64big")
	assert.ErrorContains(t, err, "key u64big value 1099511627776 (UINT64) does not fit UINT32")
	_, err = f.Uint32("neg")
	assert.ErrorContains(t, err, "key neg value -3 (INT32) does not fit UINT32")
	_, err = f.Uint64("neg")
	assert.ErrorContains(t, err, "value -3")
	u64, err := f.Uint64("u64big")
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<40), u64)
	n, err := f.Int("neg")
	require.NoError(t, err)
	assert.Equal(t, -3, n)
	_, err = f.Uint32("s")
	assert.ErrorContains(t, err, "gguf: acc.gguf: key s is STRING, want UINT32")
	_, err = f.Int("f32")
	assert.ErrorContains(t, err, "key f32 is FLOAT32")

	x32, err := f.Float32("f64")
	require.NoError(t, err)
	assert.Equal(t, float32(0.25), x32)
	x32, err = f.Float32("f32")
	require.NoError(t, err)
	assert.Equal(t, float32(0.5), x32)
	_, err = f.Float32("f64huge")
	assert.ErrorContains(t, err, "key f64huge value 1e+300 does not fit FLOAT32")
	x64, err := f.Float64("f32")
	require.NoError(t, err)
	assert.Equal(t, 0.5, x64)
	_, err = f.Float64("u32")
	assert.ErrorContains(t, err, "key u32 is UINT32, want FLOAT64")

	s, err := f.String("s")
	require.NoError(t, err)
	assert.Equal(t, "x", s)
	bv, err := f.Bool("b")
	require.NoError(t, err)
	assert.False(t, bv)
	_, err = f.Bool("s")
	assert.ErrorContains(t, err, "key s is STRING, want BOOL")

	ids, err := f.Int32s("small")
	require.NoError(t, err)
	assert.Equal(t, []int32{-1, 3}, ids)
	_, err = f.Int32s("ids")
	assert.ErrorContains(t, err, "key ids: UINT64 element 1 value 2147483648 does not fit int32")
	_, err = f.Int32s("scores")
	assert.ErrorContains(t, err, "key scores is ARRAY of FLOAT64, want ARRAY of INT32")
	sc, err := f.Float32s("scores")
	require.NoError(t, err)
	assert.Equal(t, []float32{-1.5, 2}, sc)
	_, err = f.Strings("scores")
	assert.ErrorContains(t, err, "want ARRAY of STRING")
	_, err = f.Float32s("s")
	assert.ErrorContains(t, err, "key s is STRING, want ARRAY of FLOAT32")

	for name, get := range map[string]func(string) error{
		"Uint32":   func(k string) error { _, err := f.Uint32(k); return err },
		"Uint64":   func(k string) error { _, err := f.Uint64(k); return err },
		"Int":      func(k string) error { _, err := f.Int(k); return err },
		"Float32":  func(k string) error { _, err := f.Float32(k); return err },
		"Float64":  func(k string) error { _, err := f.Float64(k); return err },
		"Bool":     func(k string) error { _, err := f.Bool(k); return err },
		"String":   func(k string) error { _, err := f.String(k); return err },
		"Strings":  func(k string) error { _, err := f.Strings(k); return err },
		"Float32s": func(k string) error { _, err := f.Float32s(k); return err },
		"Int32s":   func(k string) error { _, err := f.Int32s(k); return err },
	} {
		err := get("llama.block_count")
		assert.True(t, errors.Is(err, ErrMissing), name)
		assert.ErrorContains(t, err, "missing key llama.block_count in acc.gguf", name)
	}
}

func TestStories260K(t *testing.T) {
	path := sharedtest.Stories(t)
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, path, f.Path)
	assert.Equal(t, uint32(3), f.Version)
	assert.Equal(t, int64(32), f.Alignment)
	assert.Equal(t, int64(14176), f.DataOffset)
	assert.Len(t, f.KVs, 19)
	assert.Len(t, f.Tensors, 48) // 3 + 5 blocks of 9

	arch, err := f.String("general.architecture")
	require.NoError(t, err)
	assert.Equal(t, "llama", arch)
	for key, want := range map[string]uint32{
		"llama.block_count": 5, "llama.embedding_length": 64, "llama.feed_forward_length": 172,
		"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4,
		"llama.context_length": 2048, "llama.rope.dimension_count": 8,
		"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
	} {
		got, err := f.Uint32(key)
		require.NoError(t, err, key)
		assert.Equal(t, want, got, key)
	}
	eps, err := f.Float32("llama.attention.layer_norm_rms_epsilon")
	require.NoError(t, err)
	assert.Equal(t, float32(1e-5), eps)

	tokens, err := f.Strings("tokenizer.ggml.tokens")
	require.NoError(t, err)
	require.Len(t, tokens, 512)
	assert.Equal(t, []string{"<unk>", "<s>", "</s>", "<0x00>"}, tokens[:4])
	assert.Equal(t, "<0xFF>", tokens[258])
	scores, err := f.Float32s("tokenizer.ggml.scores")
	require.NoError(t, err)
	assert.Len(t, scores, 512)
	types, err := f.Int32s("tokenizer.ggml.token_type")
	require.NoError(t, err)
	assert.Equal(t, []int32{2, 3, 3, 6}, types[:4]) // unknown, control, control, byte

	emb, ok := f.Tensor("token_embd.weight")
	require.True(t, ok)
	assert.Equal(t, []int64{64, 512}, emb.Dims)
	assert.Equal(t, F32, emb.Type)
	assert.Equal(t, int64(64*512*4), emb.Size)
	assert.Len(t, f.Data(emb), 64*512*4)
	last := f.Tensors[len(f.Tensors)-1]
	assert.Equal(t, "blk.4.ffn_norm.weight", last.Name)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, st.Size(), f.DataOffset+last.Offset+last.Size, "the last tensor ends the file")
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		assert.Len(t, f.Data(ti), int(ti.Size), ti.Name)
		assert.Len(t, f.Extent(ti), int(ti.Size), "F32 tensors of 64-multiple rows need no padding: %s", ti.Name)
	}
	norm, _ := f.Tensor("output_norm.weight")
	var sum float64
	for i := 0; i < 64; i++ {
		sum += float64(math.Float32frombits(uint32(f.Data(norm)[4*i]) | uint32(f.Data(norm)[4*i+1])<<8 |
			uint32(f.Data(norm)[4*i+2])<<16 | uint32(f.Data(norm)[4*i+3])<<24))
	}
	assert.NotZero(t, sum, "trained RMSNorm weights are not all zero")

	require.NoError(t, f.Close())
	assert.Nil(t, f.Data(emb), "no data after Close")
	assert.NoError(t, f.Close(), "Close twice is harmless")
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "absent.gguf"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	empty := filepath.Join(dir, "empty.gguf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = Open(empty)
	assert.ErrorContains(t, err, "empty.gguf: empty file")
	_, err = Open(dir)
	assert.ErrorContains(t, err, "not a regular file")
	bad := filepath.Join(dir, "bad.gguf")
	require.NoError(t, os.WriteFile(bad, new(raw).header(3, 1, 0).Bytes(), 0o644))
	_, err = Open(bad)
	assert.ErrorContains(t, err, bad)
}

// sparseModel writes a 4 GiB sparse file whose header describes one 1 GiB
// F32 tensor, writing only the header's bytes.
func sparseModel(t testing.TB) string {
	path := filepath.Join(t.TempDir(), "sparse.gguf")
	r := new(raw).header(3, 1, 1).kvU32("general.alignment", 4096).tensor("big", F32, 0, 1<<28)
	fh, err := os.Create(path)
	require.NoError(t, err)
	_, err = fh.Write(r.Bytes())
	require.NoError(t, err)
	require.NoError(t, fh.Truncate(4<<30))
	require.NoError(t, fh.Close())
	return path
}

func TestOpenDoesNotReadData(t *testing.T) {
	path := sparseModel(t)
	start := time.Now()
	f, err := Open(path)
	elapsed := time.Since(start)
	require.NoError(t, err)
	defer f.Close()
	big, ok := f.Tensor("big")
	require.True(t, ok)
	assert.Equal(t, int64(1<<30), big.Size)
	assert.Equal(t, int64(4096), f.DataOffset)
	assert.Len(t, f.Data(big), 1<<30)
	assert.Len(t, f.Extent(big), 4<<30-4096, "extent runs to the end of the file")
	// Reading 4 GiB would take seconds; mapping takes microseconds. The
	// bound is generous for a loaded shared machine.
	assert.Less(t, elapsed, 200*time.Millisecond)
}

func BenchmarkOpenSparse4GiB(b *testing.B) {
	path := sparseModel(b)
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
