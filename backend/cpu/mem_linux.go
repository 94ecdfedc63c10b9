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
