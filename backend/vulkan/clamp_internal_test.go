package vulkan

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
)

// Issue 47.14: an Apple GPU as kernel choice sees it, from the largest
// device and from lavapipe alike: 32 KiB of shared memory, no cooperative
// matrices, subgroups of 32.
func TestAppleClampNarrowsEveryDevice(t *testing.T) {
	for _, d := range []devCaps{h200, gpu48, gpu16, lavapipe} {
		a := d.clamped(ClampApple)
		require.False(t, a.coop)
		require.Equal(t, min(d.sharedMem, 32<<10), a.sharedMem)
		require.EqualValues(t, 32, a.subgroupSize)
		require.Equal(t, d.subgroups, a.subgroups)
		require.Equal(t, d, d.clamped(ClampNone))
	}
}

// Under the clamp no product, flash attention or norm takes a kernel the
// device lacks: every GEMM is portable, attention runs flash.comp, and a
// workgroup's 32-lane subgroups take a row each.
func TestAppleClampRoutesAroundWhatItLacks(t *testing.T) {
	def := DefaultTuning()
	apple := h200.clamped(ClampApple)
	ws := []weightShape{q1Big, q4Big, q4Head, q4Tiny, f16Big}
	for _, exact := range []bool{false, true} {
		for _, rows := range []int{1, vecRows, vecRows + 1, 128, 4096} {
			p := planMatMul(&def, apple, exact, rows, 4096, ws)
			require.False(t, p.halfX, "rows %d", rows)
			require.Zero(t, p.halfWBytes+p.parts, "rows %d", rows)
			for _, pp := range p.projs {
				require.NotEqual(t, gemmCoop, pp.kernel, "rows %d", rows)
				if pp.kernel == gemmMatvecSubgroup {
					require.Equal(t, matvecWG/32, pp.perGroup)
				}
			}
		}
		for _, q := range []int{1, 256, 4096} {
			require.Equal(t, flashPlan{rows: flashRows}, planFlash(&def, apple, exact, q, 128))
		}
	}
	kernel, rows := normKernel(&def, apple, 128)
	require.Equal(t, "rmsnorm_sg", kernel)
	require.Equal(t, 8, rows)
}

// The shared memory the pipeline check reads from SPIR-V equals the sizes
// kernel choice computes by hand for the cooperative kernels, whose arrays
// follow their specialization constants (plus matmul_coop.comp's two
// one-element placeholders and its out-of-range flag).
func TestWorkgroupBytesMatchesKernelChoice(t *testing.T) {
	code, err := shaders.SPIRV("matmul_coop_codes4")
	require.NoError(t, err)
	for _, c := range []coopTile{lateTile, exactTile, splitTile, halfTile, smallCoopTile()} {
		for _, exact := range []bool{false, true} {
			for _, wlo := range []bool{false, true} {
				got, err := shaders.WorkgroupBytes(code, c.spec(exact, 1, 0, b2u(wlo), false))
				require.NoError(t, err)
				require.Equal(t, c.shared(exact, wlo)+2*16+4, got, "%v exact %v wlo %v", c, exact, wlo)
			}
		}
	}
	code, err = shaders.SPIRV("flash_coop")
	require.NoError(t, err)
	for _, rows := range []int{64, 128} {
		for _, exact := range []bool{false, true} {
			for _, apart := range []bool{false, true} {
				got, err := shaders.WorkgroupBytes(code, []uint32{128, 0, 0, 2 * uint32(rows), b2u(exact), 1, b2u(apart)})
				require.NoError(t, err)
				require.Equal(t, flashCoopShared(exact, rows, apart), got, "rows %d exact %v apart %v", rows, exact, apart)
			}
		}
	}
	// flash.comp's, as kernels.go's flash checks it.
	code, err = shaders.SPIRV("flash")
	require.NoError(t, err)
	got, err := shaders.WorkgroupBytes(code, []uint32{128, 0, 0})
	require.NoError(t, err)
	require.Equal(t, 4*((flashKeys+2*flashDims)*(flashRows+4)+3*flashRows), got)
}

// A kernel the device cannot take is refused by name before the driver
// sees it: past its shared memory, or on cooperative matrices it was
// opened without.
func TestPipelineRefusesWhatTheDeviceLacks(t *testing.T) {
	b := &Backend{pipelines: map[pipelineKey]*pipeline{}, dev: gpu16.clamped(ClampApple)}
	_, err := b.pipeline("flash", 4, 128, 0, 0)
	require.EqualError(t, err, "vulkan: shader flash needs 26880 bytes of shared memory; the device gives 16384")
	b.dev = h200.clamped(ClampApple)
	_, err = b.pipeline("matmul_coop_codes4", 4, lateTile.spec(false, 1, 0, 0, false)...)
	require.EqualError(t, err, "vulkan: shader matmul_coop_codes4 needs cooperative matrices, which the device was opened without")
}
