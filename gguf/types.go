package gguf

import (
	"fmt"
	"strings"
)

// Type is a ggml tensor type id as stored in a GGUF tensor info.
type Type uint32

// Tensor types. Ids follow ggml; 41 and 42 are the 128-weight 1-bit and
// ternary formats of the Bonsai engines.
const (
	F32        Type = 0
	F16        Type = 1
	Q4_0       Type = 2
	Q4_1       Type = 3
	Q5_0       Type = 6
	Q5_1       Type = 7
	Q8_0       Type = 8
	Q8_1       Type = 9
	Q2_K       Type = 10
	Q3_K       Type = 11
	Q4_K       Type = 12
	Q5_K       Type = 13
	Q6_K       Type = 14
	Q8_K       Type = 15
	IQ2_XXS    Type = 16
	IQ2_XS     Type = 17
	IQ3_XXS    Type = 18
	IQ1_S      Type = 19
	IQ4_NL     Type = 20
	IQ3_S      Type = 21
	IQ2_S      Type = 22
	IQ4_XS     Type = 23
	I8         Type = 24
	I16        Type = 25
	I32        Type = 26
	I64        Type = 27
	F64        Type = 28
	IQ1_M      Type = 29
	BF16       Type = 30
	TQ1_0      Type = 34
	TQ2_0      Type = 35
	MXFP4      Type = 39
	Q1_0_G128  Type = 41
	TQ2_0_G128 Type = 42
)

// TypeInfo is the storage geometry of a tensor type: BlockSize elements
// are stored in BlockBytes bytes.
type TypeInfo struct {
	Name       string
	BlockSize  int
	BlockBytes int
}

var typeInfos = map[Type]TypeInfo{
	F32:        {"F32", 1, 4},
	F16:        {"F16", 1, 2},
	Q4_0:       {"Q4_0", 32, 18},
	Q4_1:       {"Q4_1", 32, 20},
	Q5_0:       {"Q5_0", 32, 22},
	Q5_1:       {"Q5_1", 32, 24},
	Q8_0:       {"Q8_0", 32, 34},
	Q8_1:       {"Q8_1", 32, 36},
	Q2_K:       {"Q2_K", 256, 84},
	Q3_K:       {"Q3_K", 256, 110},
	Q4_K:       {"Q4_K", 256, 144},
	Q5_K:       {"Q5_K", 256, 176},
	Q6_K:       {"Q6_K", 256, 210},
	Q8_K:       {"Q8_K", 256, 292},
	IQ2_XXS:    {"IQ2_XXS", 256, 66},
	IQ2_XS:     {"IQ2_XS", 256, 74},
	IQ3_XXS:    {"IQ3_XXS", 256, 98},
	IQ1_S:      {"IQ1_S", 256, 50},
	IQ4_NL:     {"IQ4_NL", 32, 18},
	IQ3_S:      {"IQ3_S", 256, 110},
	IQ2_S:      {"IQ2_S", 256, 82},
	IQ4_XS:     {"IQ4_XS", 256, 136},
	I8:         {"I8", 1, 1},
	I16:        {"I16", 1, 2},
	I32:        {"I32", 1, 4},
	I64:        {"I64", 1, 8},
	F64:        {"F64", 1, 8},
	IQ1_M:      {"IQ1_M", 256, 56},
	BF16:       {"BF16", 1, 2},
	TQ1_0:      {"TQ1_0", 256, 54},
	TQ2_0:      {"TQ2_0", 256, 66},
	MXFP4:      {"MXFP4", 32, 17},
	Q1_0_G128:  {"Q1_0_g128", 128, 18},
	TQ2_0_G128: {"TQ2_0_g128", 128, 34},
}

// Info returns the type's geometry; ok is false for ids this package does not know.
func (t Type) Info() (TypeInfo, bool) {
	ti, ok := typeInfos[t]
	return ti, ok
}

func (t Type) String() string {
	if ti, ok := typeInfos[t]; ok {
		return ti.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType maps a type name as String prints it (case-insensitive) back to its id.
func ParseType(name string) (Type, error) {
	for t, ti := range typeInfos {
		if strings.EqualFold(ti.Name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type %q", name)
}

// RowBytes is the size in bytes of n elements of type t; n must be a
// multiple of the block size.
func (t Type) RowBytes(n int64) (int64, error) {
	ti, ok := typeInfos[t]
	if !ok {
		return 0, fmt.Errorf("gguf: unknown tensor type id %d", uint32(t))
	}
	if n%int64(ti.BlockSize) != 0 {
		return 0, fmt.Errorf("gguf: %d elements of %s is not a whole number of %d-element blocks", n, ti.Name, ti.BlockSize)
	}
	return n / int64(ti.BlockSize) * int64(ti.BlockBytes), nil
}
