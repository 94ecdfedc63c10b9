package cpu

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Without room for a packed copy (here under an address-space limit) the
// weights stay as they are, decoded on every product: the Go heap, the
// fallback before, died of "fatal error: out of memory" there.
func TestPackedBytesWithoutRoomIsNil(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_AS, &old))
	b, free := packedBytes(1 << 20)
	require.Len(t, b, 1<<20)
	free()
	// Under a 2 TiB address-space limit, of which the process maps some
	// already, 2 TiB more cannot be mapped.
	lim := syscall.Rlimit{Cur: min(old.Cur, 2<<40), Max: old.Max}
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &lim))
	defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &old)) }()
	b, free = packedBytes(2 << 40)
	require.Nil(t, b)
	free()
}
