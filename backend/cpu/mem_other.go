//go:build !linux

package cpu

// physicalMemory is unknown here: allocations are not bounded by it.
func physicalMemory() uint64 { return 0 }
