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

// Many small reads, as a short prefill's trace is, land each in its own
// place, the copies shared among the cores.
func TestCopyAllCopiesEveryPiece(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var dsts, srcs [][]byte
	for _, n := range []int{1 << 20, 0, 3, 2<<20 + 5, 1<<20 - 1, 5 << 20, 17} {
		for range 3 {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			srcs, dsts = append(srcs, src), append(dsts, make([]byte, n))
		}
	}
	copyAll(dsts, srcs)
	for i := range srcs {
		require.Equal(t, srcs[i], dsts[i], "piece %d", i)
	}
}
