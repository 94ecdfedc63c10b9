package cpu

import (
	"sync"
	"syscall"
)

// physicalMemory is the machine's RAM in bytes, 0 if unknown; asked once
// (a prefill allocates each of its capture arenas).
var physicalMemory = sync.OnceValue(func() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
})

// packedBytes returns n zeroed bytes for weights packed once and kept,
// mapped apart from the Go heap and advised into 2 MiB pages, and the
// function that unmaps them. On the Go heap, in 4 KiB pages, the first
// fast prefill of a bonsai-1.7b Q8_0 file spent about 6 s faulting in its
// 1.75 GB of packed weights. Where the mapping fails, nil: the host has
// no room, and the Go heap would die of "fatal error: out of memory".
func packedBytes(n int) (b []byte, free func()) {
	if n == 0 {
		return nil, func() {}
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, func() {}
	}
	_ = syscall.Madvise(b, madvHugepage) // advice: without it, 4 KiB pages
	return b, func() { _ = syscall.Munmap(b) }
}

// madvHugepage is MADV_HUGEPAGE, which package syscall does not name.
const madvHugepage = 14
