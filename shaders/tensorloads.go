package shaders

import (
	"fmt"
	"maps"
	"slices"
)

// SPIR-V that TensorLoads reads and writes (SPV_NV_cooperative_matrix2,
// SPV_NV_tensor_addressing; SPIR-V 1.6).
const (
	opUndef                 = 1
	opEntryPoint            = 15
	opFunction              = 54
	opAccessChain           = 65
	opInBoundsAccessChain   = 66
	opIMul                  = 132
	opCoopLoadTensorNV      = 5367
	opTypeTensorLayoutNV    = 5370
	opTypeTensorViewNV      = 5371
	opCreateTensorLayoutNV  = 5372
	opTensorLayoutSetDimNV  = 5373
	opTensorLayoutSetStride = 5374
	opCreateTensorViewNV    = 5377
	storageFunction         = 7
	storageStorageBuffer    = 12
	capTensorAddressingNV   = 5439
	capCoopTensorAddressing = 5433
	tensorAddressingView    = 1
	spirv16                 = 0x00010600
)

// TensorLoads rewrites a module's cooperative-matrix loads from storage
// buffers (as KHRCoop leaves them) into tensor loads
// (OpCooperativeMatrixLoadTensorNV), which let the driver stage
// workgroup-scope matrices through shared memory its own way; glslang 12
// cannot write them. A load of an R x C matrix from element p with stride s
// becomes one through a layout of R x C elements (C x R for a column-major
// load, read through a view that swaps the two) with rows s apart, in the
// matrix's own elements. Loads from shared memory stay as they are. The
// module is raised to SPIR-V 1.6, which tensor addressing requires, so its
// entry points list every global variable.
func TensorLoads(words []uint32) ([]uint32, error) {
	insts, err := instructions(words)
	if err != nil {
		return nil, err
	}
	type matrix struct{ comp, rows, cols uint32 }
	var uintType, boolType uint32
	bytes := map[uint32]uint32{}       // scalar and vector types' sizes
	pointers := map[uint32][2]uint32{} // pointer type: storage class, pointee
	ptrType := map[uint32]uint32{}     // access chain: its pointer type
	matrices := map[uint32]matrix{}
	consts := map[uint32]uint32{}
	var globals []uint32
	for _, in := range insts {
		a := in.a
		switch in.op {
		case opTypeBool:
			boolType = a[0]
		case opTypeInt, opTypeFloat:
			bytes[a[0]] = a[1] / 8
			if in.op == opTypeInt && a[1] == 32 && a[2] == 0 {
				uintType = a[0]
			}
		case opTypeVector:
			bytes[a[0]] = bytes[a[1]] * a[2]
		case opTypePointer:
			pointers[a[0]] = [2]uint32{a[1], a[2]}
		case opConstant:
			consts[a[1]] = a[2]
		case opVariable:
			if a[2] != storageFunction {
				globals = append(globals, a[1])
			}
		case opAccessChain, opInBoundsAccessChain:
			ptrType[a[1]] = a[0]
		case opTypeCoopKHR: // result, component type, scope, rows, columns, use
			matrices[a[0]] = matrix{a[1], a[3], a[4]}
		case opCoopLoadNV, opTypeCoopNV:
			return nil, fmt.Errorf("shaders: TensorLoads takes KHR cooperative matrices (KHRCoop's output)")
		}
	}
	if uintType == 0 {
		return nil, fmt.Errorf("shaders: the module declares no 32-bit unsigned integer type for tensor layouts")
	}
	bound := words[3]
	id := func() uint32 { bound++; return bound - 1 }
	out := append([]uint32(nil), words[:5]...)
	out[1] = spirv16
	emit := func(op uint32, a ...uint32) { out = append(out, uint32(len(a)+1)<<16|op); out = append(out, a...) }
	cZero, cOne, cTwo := id(), id(), id()
	layoutType, viewType, cFalse := id(), id(), id()
	newBool := boolType == 0
	if newBool {
		boolType = id()
	}
	undef := map[uint32]uint32{} // matrix type: an undefined value of it, a load's Object
	scale := map[uint32]uint32{} // elements of a matrix a pointee holds: its constant
	for _, in := range insts {
		if in.op != opCoopLoadKHR {
			continue
		}
		p, ok := pointers[ptrType[in.a[2]]]
		if !ok || p[0] != storageStorageBuffer {
			continue
		}
		m := matrices[in.a[0]]
		if bytes[m.comp] == 0 || bytes[p[1]] == 0 || bytes[p[1]]%bytes[m.comp] != 0 {
			return nil, fmt.Errorf("shaders: a load of %%%d from a buffer of %%%d: elements of unknown or unequal sizes", in.a[0], p[1])
		}
		if _, ok := undef[in.a[0]]; !ok {
			undef[in.a[0]] = id()
		}
		if k := bytes[p[1]] / bytes[m.comp]; k != 1 {
			if _, ok := scale[k]; !ok {
				scale[k] = id()
			}
		}
	}
	if len(undef) == 0 {
		return nil, fmt.Errorf("shaders: the module loads no cooperative matrix from a storage buffer")
	}
	lastCap, lastExt := -1, -1
	for i, in := range insts {
		switch in.op {
		case opCapability:
			lastCap = i
		case opExtension:
			lastExt = i
		}
	}
	if lastExt < 0 {
		lastExt = lastCap
	}
	declared := false
	for i, in := range insts {
		a := in.a
		switch in.op {
		case opEntryPoint: // model, function, name, interface...
			iface := slices.Clone(a)
			for _, g := range globals {
				if !slices.Contains(a[2:], g) {
					iface = append(iface, g)
				}
			}
			emit(in.op, iface...)
			continue
		case opFunction:
			if !declared {
				declared = true
				for v, c := range []uint32{cZero, cOne, cTwo} {
					emit(opConstant, uintType, c, uint32(v))
				}
				for _, k := range slices.Sorted(maps.Keys(scale)) {
					emit(opConstant, uintType, scale[k], k)
				}
				if newBool {
					emit(opTypeBool, boolType)
				}
				emit(opConstantFalse, boolType, cFalse)
				emit(opTypeTensorLayoutNV, layoutType, cTwo, cZero) // two dimensions, no clamping
				emit(opTypeTensorViewNV, viewType, cTwo, cFalse, cOne, cZero)
				for _, typ := range slices.Sorted(maps.Keys(undef)) {
					emit(opUndef, typ, undef[typ])
				}
			}
		case opCoopLoadKHR: // type, result, pointer, layout, stride, memory access...
			p, ok := pointers[ptrType[a[2]]]
			if !ok || p[0] != storageStorageBuffer {
				break
			}
			if len(a) < 5 {
				return nil, fmt.Errorf("shaders: a load of %%%d from a buffer has no stride", a[1])
			}
			colMajor, ok := consts[a[3]]
			if !ok || colMajor > layoutColumnMajor {
				return nil, fmt.Errorf("shaders: a load of %%%d has no constant row- or column-major layout", a[1])
			}
			m := matrices[a[0]]
			dims := []uint32{m.rows, m.cols}
			if colMajor == layoutColumnMajor {
				dims = []uint32{m.cols, m.rows}
			}
			l0, l1, l2 := id(), id(), id()
			emit(opCreateTensorLayoutNV, layoutType, l0)
			emit(opTensorLayoutSetDimNV, layoutType, l1, l0, dims[0], dims[1])
			stride := a[4]
			if k := bytes[p[1]] / bytes[m.comp]; k != 1 {
				s := id()
				emit(opIMul, uintType, s, stride, scale[k])
				stride = s
			}
			emit(opTensorLayoutSetStride, layoutType, l2, l1, stride, cOne)
			access := a[5:]
			if len(access) == 0 {
				access = []uint32{0}
			}
			load := append([]uint32{a[0], a[1], a[2], undef[a[0]], l2}, access...)
			if colMajor == layoutColumnMajor {
				v := id()
				emit(opCreateTensorViewNV, viewType, v)
				load = append(load, tensorAddressingView, v)
			} else {
				load = append(load, 0)
			}
			emit(opCoopLoadTensorNV, load...)
			continue
		}
		emit(in.op, a...)
		switch i {
		case lastCap:
			emit(opCapability, capTensorAddressingNV)
			emit(opCapability, capCoopTensorAddressing)
			if lastExt == lastCap {
				emitExtensions(emit)
			}
		case lastExt:
			emitExtensions(emit)
		}
	}
	out[3] = bound
	return out, nil
}

func emitExtensions(emit func(op uint32, a ...uint32)) {
	emit(opExtension, stringWords("SPV_NV_cooperative_matrix2")...)
	emit(opExtension, stringWords("SPV_NV_tensor_addressing")...)
}
