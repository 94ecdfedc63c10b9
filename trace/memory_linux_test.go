package trace

import (
	"testing"

	"golang.org/x/sys/unix"
)

// What a capture-all read-back does with its memory: make it, then fill it
// (here from one 64 MiB buffer, as a read buffer would), with and without
// asking for the pages up front. Compare faulted and prefaulted side by
// side: go test -bench MakeDataAndFill -benchtime 3x ./gpu/trace
func BenchmarkMakeDataAndFill(b *testing.B) {
	src := make([]float32, 16<<20)
	sizes := make([]int, 64) // 64 captures of 16 MiB: 1 GiB
	for i := range sizes {
		sizes[i] = 4 << 20
	}
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "faulted", true: "prefaulted"}[on]
		b.Run(name, func(b *testing.B) {
			defer func(old bool) { prefaultPages = old }(prefaultPages)
			prefaultPages = on
			b.SetBytes(int64(4 * 64 * (4 << 20)))
			for b.Loop() {
				data := MakeData(sizes)
				parallel(len(data), func(i int) { copy(data[i], src) })
				b.StopTimer()
				release(data) // fresh pages for the next round, as after a collection
				b.StartTimer()
			}
		})
	}
}

// release gives data's pages back to the kernel.
func release(data [][]float32) {
	for _, d := range data {
		if p := pages(d); len(p) > 0 {
			_ = unix.Madvise(p, unix.MADV_DONTNEED)
		}
	}
}
