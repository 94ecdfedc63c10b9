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
	if hugePages {
		if p := pagesOf(b, 2<<20); len(p) > 0 {
			_ = unix.Madvise(p, unix.MADV_HUGEPAGE)
		}
	}
	if p := pages(b); prefaultPages && len(p) > 0 {
		_ = unix.Madvise(p, unix.MADV_POPULATE_WRITE)
	}
}

// prefaultPages is off only in the benchmark that measures what it saves.
var prefaultPages = true

// hugePages asks for 2 MiB pages where the kernel gives them on request
// (transparent_hugepage=madvise).
var hugePages = false

// pages is the whole pages that b covers.
func pages(b []float32) []byte { return pagesOf(b, 4096) }

// pagesOf is the whole pages of the given size that b covers.
func pagesOf(b []float32, size uintptr) []byte {
	p := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	skip := int((at+size-1)&^(size-1) - at)
	if skip >= len(p) {
		return nil
	}
	p = p[skip:]
	return p[:len(p)&^int(size-1)]
}
