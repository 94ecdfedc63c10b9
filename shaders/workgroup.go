package shaders

import "fmt"

// SPIR-V opcodes, decorations and storage classes WorkgroupBytes reads.
const (
	opDecorate              = 71
	opTypeBool              = 20
	opTypeInt               = 21
	opTypeFloat             = 22
	opTypeVector            = 23
	opTypeMatrix            = 24
	opTypeArray             = 28
	opTypeStruct            = 30
	opTypePointer           = 32
	opConstantTrue          = 41
	opConstantFalse         = 42
	opConstant              = 43
	opConstantComposite     = 44
	opSpecConstantTrue      = 48
	opSpecConstantFalse     = 49
	opSpecConstant          = 50
	opSpecConstantComposite = 51
	opSpecConstantOp        = 52
	opVariable              = 59
	decorationSpecID        = 1
	storageWorkgroup        = 4
)

// WorkgroupBytes is the shared memory a module's workgroup takes with the
// given specialization constants (constant_id i is spec[i]; the rest keep
// their defaults): the sum of its Workgroup variables, packed. Drivers pad
// no less, so a device limit it passes may still fail in the driver, but
// one it fails is surely past the limit.
func WorkgroupBytes(words []uint32, spec []uint32) (int, error) {
	if len(words) < 5 || words[0] != 0x07230203 {
		return 0, fmt.Errorf("shaders: not a SPIR-V module")
	}
	specID := map[uint32]uint32{}
	vals := map[uint32][]uint64{} // constants' values, a composite's per constituent
	sizes := map[uint32]int{}     // types' bytes
	pointee := map[uint32]uint32{}
	total := 0
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return 0, fmt.Errorf("shaders: malformed instruction at word %d", i)
		}
		a := words[i+1 : i+n]
		i += n
		scalar := func(id uint32) (uint64, error) {
			v, ok := vals[id]
			if !ok || len(v) != 1 {
				return 0, fmt.Errorf("shaders: %%%d is not a scalar constant", id)
			}
			return v[0], nil
		}
		switch op {
		case opDecorate:
			if len(a) >= 3 && a[1] == decorationSpecID {
				specID[a[0]] = a[2]
			}
		case opTypeBool:
			sizes[a[0]] = 4
		case opTypeInt, opTypeFloat:
			sizes[a[0]] = int(a[1]) / 8
		case opTypeVector, opTypeMatrix:
			sizes[a[0]] = sizes[a[1]] * int(a[2])
		case opTypeArray:
			l, err := scalar(a[2])
			if err != nil {
				return 0, err
			}
			sizes[a[0]] = sizes[a[1]] * int(l)
		case opTypeStruct:
			s := 0
			for _, m := range a[1:] {
				s += sizes[m]
			}
			sizes[a[0]] = s
		case opTypePointer:
			pointee[a[0]] = a[2]
		case opConstantTrue, opSpecConstantTrue, opConstantFalse, opSpecConstantFalse:
			v := uint64(0)
			if op == opConstantTrue || op == opSpecConstantTrue {
				v = 1
			}
			if id, ok := specID[a[1]]; ok && op >= opSpecConstantTrue && int(id) < len(spec) {
				v = uint64(min(spec[id], 1))
			}
			vals[a[1]] = []uint64{v}
		case opConstant, opSpecConstant:
			v := uint64(a[2]) // widths past 32 bits keep their low word: no length needs more
			if id, ok := specID[a[1]]; ok && op == opSpecConstant && int(id) < len(spec) {
				v = uint64(spec[id])
			}
			vals[a[1]] = []uint64{v}
		case opConstantComposite, opSpecConstantComposite:
			var v []uint64
			for _, c := range a[2:] {
				v = append(v, vals[c]...)
			}
			vals[a[1]] = v
		case opSpecConstantOp:
			v, err := specOp(a[2], a[3:], vals, scalar)
			if err != nil {
				return 0, fmt.Errorf("shaders: constant %%%d: %w", a[1], err)
			}
			vals[a[1]] = []uint64{v}
		case opVariable:
			if a[2] == storageWorkgroup {
				total += sizes[pointee[a[0]]]
			}
		}
	}
	return total, nil
}

// specOp evaluates the OpSpecConstantOp operations that array lengths use.
func specOp(op uint32, ops []uint32, vals map[uint32][]uint64, scalar func(uint32) (uint64, error)) (uint64, error) {
	if op == 81 { // OpCompositeExtract
		c := vals[ops[0]]
		if len(ops) != 2 || int(ops[1]) >= len(c) {
			return 0, fmt.Errorf("composite extract out of range")
		}
		return c[ops[1]], nil
	}
	x := make([]uint64, len(ops))
	for i, id := range ops {
		v, err := scalar(id)
		if err != nil {
			return 0, err
		}
		x[i] = v
	}
	b := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	need := map[uint32]int{168: 1, 113: 1, 169: 3}[op]
	if need == 0 {
		need = 2
	}
	if len(x) != need {
		return 0, fmt.Errorf("operation %d takes %d operands, not %d", op, need, len(x))
	}
	switch op {
	case 113: // OpUConvert
		return x[0], nil
	case 128:
		return uint64(uint32(x[0] + x[1])), nil
	case 130:
		return uint64(uint32(x[0] - x[1])), nil
	case 132:
		return uint64(uint32(x[0] * x[1])), nil
	case 134, 137: // OpUDiv, OpUMod
		if x[1] == 0 {
			return 0, fmt.Errorf("division by zero")
		}
		if op == 134 {
			return x[0] / x[1], nil
		}
		return x[0] % x[1], nil
	case 166:
		return b(x[0] != 0 || x[1] != 0), nil
	case 167:
		return b(x[0] != 0 && x[1] != 0), nil
	case 168:
		return b(x[0] == 0), nil
	case 169: // OpSelect
		if x[0] != 0 {
			return x[1], nil
		}
		return x[2], nil
	case 170:
		return b(x[0] == x[1]), nil
	case 171:
		return b(x[0] != x[1]), nil
	case 172:
		return b(x[0] > x[1]), nil
	case 174:
		return b(x[0] >= x[1]), nil
	case 176:
		return b(x[0] < x[1]), nil
	case 178:
		return b(x[0] <= x[1]), nil
	case 194:
		return x[0] >> x[1], nil
	case 196:
		return uint64(uint32(x[0] << x[1])), nil
	case 197:
		return x[0] | x[1], nil
	case 199:
		return x[0] & x[1], nil
	}
	return 0, fmt.Errorf("operation %d is not evaluated", op)
}

// SPIR-V capabilities the backend checks a module for.
const (
	CapFloat64       = 10
	CapCoopMatrixNV  = 5357
	CapCoopMatrixKHR = 6022
)

// Capabilities lists the OpCapability operands of a SPIR-V module.
func Capabilities(words []uint32) []uint32 {
	var caps []uint32
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 {
			break
		}
		if op == 17 && i+1 < len(words) { // OpCapability
			caps = append(caps, words[i+1])
		}
		i += n
	}
	return caps
}
