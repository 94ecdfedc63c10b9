package backends

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Under an address-space limit (ulimit -v) the host memory left is the
// room under it, however much Linux has available: nb's prefills died of
// "fatal error: out of memory" there.
func TestHostAvailableHeedsTheAddressSpaceLimit(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_AS, &old))
	before, err := HostAvailable()
	require.NoError(t, err)
	room := int64(2 << 30)
	vm := vmSize(t)
	lim := syscall.Rlimit{Cur: uint64(vm + room), Max: old.Max}
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &lim))
	defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &old)) }()
	got, err := HostAvailable()
	require.NoError(t, err)
	require.LessOrEqual(t, got, min(before, room+64<<20), "at most the room under the limit (VmSize moves a little)")
	require.Positive(t, got)
}

// vmSize is the process's VmSize, read as addressRoom reads it under a
// limit of 2^62 bytes.
func vmSize(t *testing.T) int64 {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_AS, &lim))
	probe := syscall.Rlimit{Cur: 1 << 62, Max: lim.Max}
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &probe))
	defer syscall.Setrlimit(syscall.RLIMIT_AS, &lim)
	room, ok := addressRoom()
	require.True(t, ok)
	return 1<<62 - room
}
