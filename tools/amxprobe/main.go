//go:build linux && amd64

// Command amxprobe says whether AMX-INT8 runs from Go on this host (its
// instructions written as bytes: Go's assembler has no AMX), checks one
// tile product against a plain one, and times a core's and all cores'
// int8 products on tiles. llama.cpp's CPU backend multiplies Q4_0, Q8_0
// and the K-quants on AMX tiles where the host has them (the device
// machines' hosts report amx_int8); this says what Strata's fast products
// could gain there before any kernel is written.
package main

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/cpu"
)

func tileMul(cfg *[64]byte, a, b *int8, c *int32)
func tileLoop(cfg *[64]byte, a, b *int8, n int)

func main() {
	if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXInt8 {
		fmt.Println("this processor has no AMX-INT8")
		return
	}
	// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, 0x1023, 18, 0); e != 0 {
		fmt.Println("arch_prctl(ARCH_REQ_XCOMP_PERM):", e)
		return
	}
	var cfg [64]byte
	cfg[0] = 1 // palette 1
	for t := 0; t < 8; t++ {
		cfg[16+2*t] = 64 // bytes a row
		cfg[48+t] = 16   // rows
	}
	a, b := make([]int8, 16*64), make([]int8, 16*64)
	for i := range a {
		a[i], b[i] = int8(rand.Intn(256)-128), int8(rand.Intn(256)-128)
	}
	c := make([]int32, 256)
	tileMul(&cfg, &a[0], &b[0], &c[0])
	bad := 0
	for m := 0; m < 16; m++ {
		for n := 0; n < 16; n++ {
			var want int32
			for k := 0; k < 64; k++ { // B row k/4, bytes 4n + k%4
				want += int32(a[m*64+k]) * int32(b[(k/4)*64+4*n+k%4])
			}
			if c[m*16+n] != want {
				bad++
			}
		}
	}
	fmt.Printf("tdpbssd 16x16x64: %d of 256 wrong\n", bad)
	const n = 1 << 20
	for _, threads := range []int{1, runtime.NumCPU()} {
		var wg sync.WaitGroup
		t0 := time.Now()
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				tileLoop(&cfg, &a[0], &b[0], n)
			}()
		}
		wg.Wait()
		s := time.Since(t0).Seconds()
		ops := float64(threads) * n * 4 * 16 * 16 * 64 * 2
		fmt.Printf("%d threads: %.1f int8 TOP/s (%.1f a thread)\n", threads, ops/s/1e12, ops/s/1e12/float64(threads))
	}
}
