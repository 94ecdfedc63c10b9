package gguf

import "fmt"

// ValueType is the type id of a GGUF metadata value.
type ValueType uint32

// Metadata value types, ids as in the GGUF spec.
const (
	ValueUint8   ValueType = 0
	ValueInt8    ValueType = 1
	ValueUint16  ValueType = 2
	ValueInt16   ValueType = 3
	ValueUint32  ValueType = 4
	ValueInt32   ValueType = 5
	ValueFloat32 ValueType = 6
	ValueBool    ValueType = 7
	ValueString  ValueType = 8
	ValueArray   ValueType = 9
	ValueUint64  ValueType = 10
	ValueInt64   ValueType = 11
	ValueFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
	"BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

func (t ValueType) known() bool { return int(t) < len(valueTypeNames) }

// size is the encoded size of a scalar of type t; 0 for STRING and ARRAY,
// whose size depends on their contents.
func (t ValueType) size() int {
	switch t {
	case ValueUint8, ValueInt8, ValueBool:
		return 1
	case ValueUint16, ValueInt16:
		return 2
	case ValueUint32, ValueInt32, ValueFloat32:
		return 4
	case ValueUint64, ValueInt64, ValueFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of type t can take, used to
// bound counts by the bytes left before allocating.
func (t ValueType) minSize() int {
	switch t {
	case ValueString:
		return 8 // length
	case ValueArray:
		return 12 // element type + count
	}
	return t.size()
}

// Value is one metadata value.
//
// v holds the Go value: uint8..float64, bool or string for scalars; []T for
// arrays of scalars; []Value for arrays of arrays.
type Value struct {
	typ  ValueType
	elem ValueType
	v    any
}

// Type is the value's type.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the element type of an array; meaningless for other values.
func (v Value) ElemType() ValueType { return v.elem }

// Any returns the value as a Go value: uint8..float64, bool, string, a
// fresh []T for arrays of scalars, or []any (each element an array's Any)
// for arrays of arrays.
func (v Value) Any() any {
	switch a := v.v.(type) {
	case []Value:
		out := make([]any, len(a))
		for i, e := range a {
			out[i] = e.Any()
		}
		return out
	case []uint8:
		return clone(a)
	case []int8:
		return clone(a)
	case []uint16:
		return clone(a)
	case []int16:
		return clone(a)
	case []uint32:
		return clone(a)
	case []int32:
		return clone(a)
	case []float32:
		return clone(a)
	case []bool:
		return clone(a)
	case []string:
		return clone(a)
	case []uint64:
		return clone(a)
	case []int64:
		return clone(a)
	case []float64:
		return clone(a)
	}
	return v.v
}

// clone copies s, keeping an empty slice non-nil so callers see an array.
func clone[T any](s []T) []T {
	return append(make([]T, 0, len(s)), s...)
}

// ValueOf builds a Value from a Go value: uint8..int64, float32/64, bool,
// string, a slice of those, or a Value (returned as is). Arrays of arrays
// are built from a []Value of arrays.
func ValueOf(x any) (Value, error) {
	switch x := x.(type) {
	case Value:
		return x, nil
	case uint8:
		return Value{typ: ValueUint8, v: x}, nil
	case int8:
		return Value{typ: ValueInt8, v: x}, nil
	case uint16:
		return Value{typ: ValueUint16, v: x}, nil
	case int16:
		return Value{typ: ValueInt16, v: x}, nil
	case uint32:
		return Value{typ: ValueUint32, v: x}, nil
	case int32:
		return Value{typ: ValueInt32, v: x}, nil
	case float32:
		return Value{typ: ValueFloat32, v: x}, nil
	case bool:
		return Value{typ: ValueBool, v: x}, nil
	case string:
		return Value{typ: ValueString, v: x}, nil
	case uint64:
		return Value{typ: ValueUint64, v: x}, nil
	case int64:
		return Value{typ: ValueInt64, v: x}, nil
	case float64:
		return Value{typ: ValueFloat64, v: x}, nil
	case []uint8:
		return array(ValueUint8, clone(x)), nil
	case []int8:
		return array(ValueInt8, clone(x)), nil
	case []uint16:
		return array(ValueUint16, clone(x)), nil
	case []int16:
		return array(ValueInt16, clone(x)), nil
	case []uint32:
		return array(ValueUint32, clone(x)), nil
	case []int32:
		return array(ValueInt32, clone(x)), nil
	case []float32:
		return array(ValueFloat32, clone(x)), nil
	case []bool:
		return array(ValueBool, clone(x)), nil
	case []string:
		return array(ValueString, clone(x)), nil
	case []uint64:
		return array(ValueUint64, clone(x)), nil
	case []int64:
		return array(ValueInt64, clone(x)), nil
	case []float64:
		return array(ValueFloat64, clone(x)), nil
	case []Value:
		for i, e := range x {
			if e.typ != ValueArray {
				return Value{}, fmt.Errorf("gguf: element %d of an array of arrays is %s, want ARRAY", i, e.typ)
			}
		}
		return array(ValueArray, clone(x)), nil
	case int, uint:
		return Value{}, fmt.Errorf("gguf: value %v is a Go %T; use a sized type such as uint32 or int64", x, x)
	}
	return Value{}, fmt.Errorf("gguf: cannot store a Go %T as a metadata value", x)
}

func array(elem ValueType, v any) Value {
	return Value{typ: ValueArray, elem: elem, v: v}
}
