//go:build !linux

package cpu

// physicalMemory is unknown here: allocations are not bounded by it.
func physicalMemory() uint64 { return 0 }

// packedBytes returns n zeroed bytes on the Go heap, and nothing to free.
func packedBytes(n int) (b []byte, free func()) { return make([]byte, n), func() {} }
