package trace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// prefault asks the kernel for the pages of b in one call instead of a
// fault per 4 KiB page on first write: for a gigabyte-sized trace in a
// container or VM, those faults cost more than the copy that fills them
// (BenchmarkMakeDataAndFill). Errors, from kernels before 5.14 among
// others, leave the pages to be faulted as usual.
func prefault(b []float32) {
	// Not MADV_HUGEPAGE: it splits the heap's mappings, as Go itself avoids.
	if p := pages(b); prefaultPages && len(p) > 0 {
		_ = unix.Madvise(p, unix.MADV_POPULATE_WRITE)
	}
}

// prefaultPages is off only in the benchmark that measures what it saves.
var prefaultPages = true

// pages is the whole pages that b covers.
func pages(b []float32) []byte {
	const size = 4096
	p := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	skip := int((at+size-1)&^(size-1) - at)
	if skip >= len(p) {
		return nil
	}
	p = p[skip:]
	return p[:len(p)&^(size-1)]
}
