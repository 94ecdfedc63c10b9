package shaders

import (
	"fmt"
	"slices"
)

// SPIR-V of the two cooperative-matrix extensions KHRCoop translates between.
const (
	opExtension           = 10
	opCapability          = 17
	opTypeCoopNV          = 5358
	opCoopLoadNV          = 5359
	opCoopStoreNV         = 5360
	opCoopMulAddNV        = 5361
	opCoopLengthNV        = 5362
	opTypeCoopKHR         = 4456
	opCoopLoadKHR         = 4457
	opCoopStoreKHR        = 4458
	opCoopMulAddKHR       = 4459
	opCoopLengthKHR       = 4460
	useMatrixA            = 0
	useMatrixB            = 1
	useAccumulator        = 2
	layoutRowMajor        = 0
	layoutColumnMajor     = 1
	extensionCoopNV       = "SPV_NV_cooperative_matrix"
	extensionCoopKHR      = "SPV_KHR_cooperative_matrix"
	unknownUse        int = -1
)

// opcodes whose first two operands are a result type and a result: what
// KHRCoop follows to learn the type of a product's operands.
var typedResults = []uint32{1, 44, 46, 55, 57, 61, 80, 83, 115, 127, 129, 131, 133, 143, 169, 245, opCoopLoadNV, opCoopMulAddNV}

// KHRCoop rewrites a module that glslang 12 wrote with
// GL_NV_cooperative_matrix into SPV_KHR_cooperative_matrix, the form
// VK_NV_cooperative_matrix2's workgroup-scope matrices take (glslang 12
// has no GL_KHR_cooperative_matrix). Each matrix type gets the use its
// products give it (A, B or accumulator; a type in no product is an
// accumulator), and each load and store a memory layout for its
// column-major flag, which must be a constant.
func KHRCoop(words []uint32) ([]uint32, error) {
	insts, err := instructions(words)
	if err != nil {
		return nil, err
	}
	bound := words[3]
	var uintType uint32
	colMajor := map[uint32]bool{}
	typeOf := map[uint32]uint32{}
	use := map[uint32]int{}
	for _, in := range insts {
		switch {
		case in.op == opTypeInt && len(in.a) == 3 && in.a[1] == 32 && in.a[2] == 0:
			uintType = in.a[0]
		case in.op == opConstantTrue || in.op == opSpecConstantTrue:
			colMajor[in.a[1]] = true
		case in.op == opConstantFalse || in.op == opSpecConstantFalse:
			colMajor[in.a[1]] = false
		case in.op == opTypeCoopNV:
			use[in.a[0]] = unknownUse
		}
		if slices.Contains(typedResults, in.op) && len(in.a) >= 2 {
			typeOf[in.a[1]] = in.a[0]
		}
	}
	if len(use) == 0 {
		return nil, fmt.Errorf("shaders: the module declares no NV cooperative matrix")
	}
	if uintType == 0 {
		return nil, fmt.Errorf("shaders: the module declares no 32-bit unsigned integer type for the matrices' uses")
	}
	give := func(typ uint32, u int) error {
		if have, ok := use[typ]; !ok {
			return fmt.Errorf("shaders: %%%d, an operand of a product, is not a cooperative matrix type", typ)
		} else if have != unknownUse && have != u {
			return fmt.Errorf("shaders: cooperative matrix type %%%d is used as two of A, B and accumulator", typ)
		}
		use[typ] = u
		return nil
	}
	for _, in := range insts {
		if in.op != opCoopMulAddNV {
			continue
		}
		if len(in.a) != 5 {
			return nil, fmt.Errorf("shaders: OpCooperativeMatrixMulAddNV with %d operands", len(in.a))
		}
		// The result type, then operands A, B and C (a[1] is the result).
		if err := give(in.a[0], useAccumulator); err != nil {
			return nil, err
		}
		for i, u := range map[int]int{2: useMatrixA, 3: useMatrixB, 4: useAccumulator} {
			typ, ok := typeOf[in.a[i]]
			if !ok {
				return nil, fmt.Errorf("shaders: the type of %%%d, an operand of a product, is not known", in.a[i])
			}
			if err := give(typ, u); err != nil {
				return nil, err
			}
		}
	}
	// Constants 0, 1 and 2 of the uint type, for uses and layouts.
	consts := [3]uint32{bound, bound + 1, bound + 2}
	bound += 3
	out := append([]uint32(nil), words[:5]...)
	emit := func(op uint32, a ...uint32) { out = append(out, uint32(len(a)+1)<<16|op); out = append(out, a...) }
	layout := func(flag uint32) (uint32, error) {
		c, ok := colMajor[flag]
		if !ok {
			return 0, fmt.Errorf("shaders: a cooperative load or store's column-major flag %%%d is not a constant", flag)
		}
		if c {
			return consts[layoutColumnMajor], nil
		}
		return consts[layoutRowMajor], nil
	}
	for _, in := range insts {
		a := in.a
		switch in.op {
		case opCapability:
			if a[0] == CapCoopMatrixNV {
				emit(opCapability, CapCoopMatrixKHR)
				continue
			}
		case opExtension:
			if stringOperand(a) == extensionCoopNV {
				emit(opExtension, stringWords(extensionCoopKHR)...)
				continue
			}
		case opTypeInt:
			emit(in.op, a...)
			if a[0] == uintType {
				for v, id := range consts {
					emit(opConstant, uintType, id, uint32(v))
				}
			}
			continue
		case opTypeCoopNV:
			u := use[a[0]]
			if u == unknownUse {
				u = useAccumulator
			}
			emit(opTypeCoopKHR, append(slices.Clone(a), consts[u])...)
			continue
		case opCoopLoadNV: // type, result, pointer, stride, column-major, memory access...
			l, err := layout(a[4])
			if err != nil {
				return nil, err
			}
			emit(opCoopLoadKHR, append([]uint32{a[0], a[1], a[2], l, a[3]}, a[5:]...)...)
			continue
		case opCoopStoreNV: // pointer, object, stride, column-major, memory access...
			l, err := layout(a[3])
			if err != nil {
				return nil, err
			}
			emit(opCoopStoreKHR, append([]uint32{a[0], a[1], l, a[2]}, a[4:]...)...)
			continue
		case opCoopMulAddNV:
			emit(opCoopMulAddKHR, a...)
			continue
		case opCoopLengthNV:
			emit(opCoopLengthKHR, a...)
			continue
		}
		emit(in.op, a...)
	}
	out[3] = bound
	return out, nil
}

// inst is an instruction of a module: its opcode and operands.
type inst struct {
	op uint32
	a  []uint32
}

// instructions splits a module's instructions after its header.
func instructions(words []uint32) ([]inst, error) {
	if len(words) < 5 || words[0] != 0x07230203 {
		return nil, fmt.Errorf("shaders: not a SPIR-V module")
	}
	var insts []inst
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("shaders: malformed instruction at word %d", i)
		}
		insts = append(insts, inst{op, words[i+1 : i+n]})
		i += n
	}
	return insts, nil
}

// stringOperand decodes a literal string operand (nul-terminated, packed
// little-endian four bytes a word).
func stringOperand(a []uint32) string {
	var b []byte
	for _, w := range a {
		for i := 0; i < 4; i++ {
			c := byte(w >> (8 * i))
			if c == 0 {
				return string(b)
			}
			b = append(b, c)
		}
	}
	return string(b)
}

func stringWords(s string) []uint32 {
	w := make([]uint32, len(s)/4+1)
	for i := 0; i < len(s); i++ {
		w[i/4] |= uint32(s[i]) << (8 * (i % 4))
	}
	return w
}
