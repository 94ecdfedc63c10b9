package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
)

// raw encodes GGUF fields by hand, independently of Writer, so reader tests
// do not depend on the code they check and can build malformed files.
type raw struct{ bytes.Buffer }

func (r *raw) u8(v uint8) *raw { r.WriteByte(v); return r }

func (r *raw) u32(v uint32) *raw {
	r.Write(binary.LittleEndian.AppendUint32(nil, v))
	return r
}

func (r *raw) u64(v uint64) *raw {
	r.Write(binary.LittleEndian.AppendUint64(nil, v))
	return r
}

func (r *raw) f32(v float32) *raw { return r.u32(math.Float32bits(v)) }

func (r *raw) str(s string) *raw {
	r.u64(uint64(len(s)))
	r.WriteString(s)
	return r
}

func (r *raw) header(version uint32, tensors, kvs uint64) *raw {
	r.WriteString("GGUF")
	return r.u32(version).u64(tensors).u64(kvs)
}

// kvU32 writes a UINT32 KV.
func (r *raw) kvU32(key string, v uint32) *raw { return r.str(key).u32(uint32(ValueUint32)).u32(v) }

// tensor writes a tensor info.
func (r *raw) tensor(name string, typ Type, offset uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(offset)
}

// padTo pads with zeros to a multiple of a.
func (r *raw) padTo(a int) *raw {
	for r.Len()%a != 0 {
		r.WriteByte(0)
	}
	return r
}

// zeros appends n zero bytes.
func (r *raw) zeros(n int) *raw {
	r.Write(make([]byte, n))
	return r
}
