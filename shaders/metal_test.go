package shaders_test

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
)

// cooperative reports whether a module needs cooperative matrices
// (CooperativeMatrixKHR or NV).
func cooperative(words []uint32) bool {
	for _, c := range shaders.Capabilities(words) {
		if c == shaders.CapCoopMatrixKHR || c == shaders.CapCoopMatrixNV {
			return true
		}
	}
	return false
}

// Issue 47.14: Apple GPUs, reached through MoltenVK, run Metal: every
// module a device without cooperative matrices uses must translate to
// Metal Shading Language (spirv-cross, as MoltenVK does, at MSL 2.1 for
// its subgroup operations). The cooperative-matrix modules are NVIDIA's
// alone, and the backend must never choose them there.
func TestPortableShadersTranslateToMetal(t *testing.T) {
	if _, err := exec.LookPath("spirv-cross"); err != nil {
		t.Skip("spirv-cross is not installed (scripts/setup.sh installs Debian's spirv-cross)")
	}
	dir := t.TempDir()
	portable, coop := 0, 0
	for _, v := range shaders.Variants {
		words, err := shaders.SPIRV(v.Name)
		require.NoError(t, err)
		if cooperative(words) {
			coop++
			require.True(t, strings.Contains(v.Name, "coop"), "%s needs cooperative matrices but is not named *coop*, as the backend's choice of kernels expects", v.Name)
			continue
		}
		portable++
		in := filepath.Join(dir, v.Name+".spv")
		b := make([]byte, 4*len(words))
		for i, w := range words {
			binary.LittleEndian.PutUint32(b[4*i:], w)
		}
		require.NoError(t, os.WriteFile(in, b, 0o644))
		out, err := exec.Command("spirv-cross", "--msl", "--msl-version", "20100", in, "--output", filepath.Join(dir, v.Name+".metal")).CombinedOutput()
		require.NoError(t, err, "%s does not translate to Metal: %s", v.Name, out)
	}
	t.Logf("%d portable modules translate to Metal; %d cooperative-matrix modules left out", portable, coop)
	require.Positive(t, portable)
	require.Positive(t, coop, "the capability parser finds the cooperative-matrix modules")
}
