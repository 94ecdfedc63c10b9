package vulkan

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCopyParallelCopiesEveryByte(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// Sizes below one chunk, at the split points, and ragged over many.
	for _, n := range []int{0, 1, 2<<20 - 1, 4 << 20, 4<<20 + 3, 37<<20 + 11} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst := make([]byte, n)
		copyParallel(dst, src)
		require.Equal(t, src, dst, "%d bytes", n)
	}
}
