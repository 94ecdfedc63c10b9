package gguf

import (
	"errors"
	"fmt"
	"math"
)

// ErrMissing is wrapped by the typed accessors' error for a key the file lacks.
var ErrMissing = errors.New("gguf: missing key")

func (f *File) get(key string, want string, ok func(Value) bool) (Value, error) {
	if f == nil {
		return Value{}, fmt.Errorf("gguf: %s of a nil *File", key)
	}
	v, found := f.Lookup(key)
	if !found {
		return Value{}, fmt.Errorf("%w %s in %s", ErrMissing, key, f.name)
	}
	if !ok(v) {
		return Value{}, f.typeError(key, v, want)
	}
	return v, nil
}

func (f *File) typeError(key string, v Value, want string) error {
	found := v.typ.String()
	if v.typ == ValueArray {
		found = "ARRAY of " + v.elem.String()
	}
	return fmt.Errorf("gguf: %s: key %s is %s, want %s", f.name, key, found, want)
}

func isInteger(t ValueType) bool {
	switch t {
	case ValueUint8, ValueInt8, ValueUint16, ValueInt16, ValueUint32, ValueInt32, ValueUint64, ValueInt64:
		return true
	}
	return false
}

func isFloat(t ValueType) bool { return t == ValueFloat32 || t == ValueFloat64 }

func scalarOf(pred func(ValueType) bool) func(Value) bool {
	return func(v Value) bool { return pred(v.typ) }
}

func arrayOf(pred func(ValueType) bool) func(Value) bool {
	return func(v Value) bool { return v.typ == ValueArray && pred(v.elem) }
}

func is(t ValueType) func(ValueType) bool { return func(u ValueType) bool { return u == t } }

// integerAs fetches an integer key and converts it to T, failing if the
// stored value does not fit.
func integerAs[T integer](f *File, key, want string) (T, error) {
	v, err := f.get(key, want, scalarOf(isInteger))
	if err != nil {
		return 0, err
	}
	x, fits := convert[T](v.v)
	if !fits {
		return 0, fmt.Errorf("gguf: %s: key %s value %v (%s) does not fit %s", f.name, key, v.v, v.typ, want)
	}
	return x, nil
}

type integer interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~uint64 | ~int64 | ~int
}

// convert converts any Go integer to T, reporting whether the value survives.
func convert[T integer](x any) (T, bool) {
	switch x := x.(type) {
	case uint8:
		return fits[T](x)
	case int8:
		return fits[T](x)
	case uint16:
		return fits[T](x)
	case int16:
		return fits[T](x)
	case uint32:
		return fits[T](x)
	case int32:
		return fits[T](x)
	case uint64:
		return fits[T](x)
	case int64:
		return fits[T](x)
	}
	return 0, false
}

func fits[T, S integer](s S) (T, bool) {
	t := T(s)
	return t, S(t) == s && (t < 0) == (s < 0)
}

// Uint32 returns an integer key's value as a uint32.
func (f *File) Uint32(key string) (uint32, error) { return integerAs[uint32](f, key, "UINT32") }

// Uint64 returns an integer key's value as a uint64.
func (f *File) Uint64(key string) (uint64, error) { return integerAs[uint64](f, key, "UINT64") }

// Int returns an integer key's value as an int.
func (f *File) Int(key string) (int, error) { return integerAs[int](f, key, "an integer fitting int") }

// Float64 returns a FLOAT32 or FLOAT64 key's value.
func (f *File) Float64(key string) (float64, error) {
	v, err := f.get(key, "FLOAT64", scalarOf(isFloat))
	if err != nil {
		return 0, err
	}
	if x, ok := v.v.(float32); ok {
		return float64(x), nil
	}
	return v.v.(float64), nil
}

// Float32 returns a FLOAT32 or FLOAT64 key's value; a finite FLOAT64 out of
// float32 range is an error.
func (f *File) Float32(key string) (float32, error) {
	v, err := f.get(key, "FLOAT32", scalarOf(isFloat))
	if err != nil {
		return 0, err
	}
	if x, ok := v.v.(float32); ok {
		return x, nil
	}
	x, ok := toFloat32(v.v.(float64))
	if !ok {
		return 0, fmt.Errorf("gguf: %s: key %s value %v does not fit FLOAT32", f.name, key, v.v)
	}
	return x, nil
}

func toFloat32(x float64) (float32, bool) {
	y := float32(x)
	return y, !math.IsInf(float64(y), 0) || math.IsInf(x, 0)
}

// Bool returns a BOOL key's value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key, "BOOL", scalarOf(is(ValueBool)))
	if err != nil {
		return false, err
	}
	return v.v.(bool), nil
}

// String returns a STRING key's value.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key, "STRING", scalarOf(is(ValueString)))
	if err != nil {
		return "", err
	}
	return v.v.(string), nil
}

// Strings returns a copy of an ARRAY of STRING key's value.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.get(key, "ARRAY of STRING", arrayOf(is(ValueString)))
	if err != nil {
		return nil, err
	}
	return clone(v.v.([]string)), nil
}

// Float32s returns an ARRAY of FLOAT32 (or of FLOAT64 values in float32
// range) key's value as a new slice.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.get(key, "ARRAY of FLOAT32", arrayOf(isFloat))
	if err != nil {
		return nil, err
	}
	if a, ok := v.v.([]float32); ok {
		return clone(a), nil
	}
	a := v.v.([]float64)
	out := make([]float32, len(a))
	for i, x := range a {
		var ok bool
		if out[i], ok = toFloat32(x); !ok {
			return nil, fmt.Errorf("gguf: %s: key %s element %d value %v does not fit FLOAT32", f.name, key, i, x)
		}
	}
	return out, nil
}

// Int32s returns an array of any integer type as int32s, failing on the
// first element that does not fit.
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.get(key, "ARRAY of INT32", arrayOf(isInteger))
	if err != nil {
		return nil, err
	}
	var out []int32
	switch a := v.v.(type) {
	case []uint8:
		out, err = convertAll[int32](a)
	case []int8:
		out, err = convertAll[int32](a)
	case []uint16:
		out, err = convertAll[int32](a)
	case []int16:
		out, err = convertAll[int32](a)
	case []uint32:
		out, err = convertAll[int32](a)
	case []int32:
		out = clone(a)
	case []uint64:
		out, err = convertAll[int32](a)
	case []int64:
		out, err = convertAll[int32](a)
	}
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: key %s: %s %w", f.name, key, v.elem, err)
	}
	return out, nil
}

// convertAll converts every element, failing on the first that does not fit T.
func convertAll[T, S integer](a []S) ([]T, error) {
	out := make([]T, len(a))
	for i, s := range a {
		t, ok := fits[T](s)
		if !ok {
			return nil, fmt.Errorf("element %d value %d does not fit %T", i, s, t)
		}
		out[i] = t
	}
	return out, nil
}
