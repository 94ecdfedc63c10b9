package shaders_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
	"github.com/stratalab/strata/shaders/internal/glslc"
)

// TestCommittedSPIRVIsCurrent rebuilds every variant into a temporary
// directory and compares the bytes with spv/, so a shader edited without
// `go generate ./shaders/...` fails here.
func TestCommittedSPIRVIsCurrent(t *testing.T) {
	version, err := glslc.Version()
	if err != nil {
		t.Skip(err)
	}
	recorded, err := os.ReadFile(filepath.Join("spv", "glslang.version"))
	require.NoError(t, err)
	if strings.TrimSpace(string(recorded)) != strings.TrimSpace(version) {
		t.Skipf("spv/ was built by %q but %q is installed; their output differs byte for byte", strings.TrimSpace(string(recorded)), version)
	}
	dir := t.TempDir()
	committed, err := filepath.Glob(filepath.Join("spv", "*.spv"))
	require.NoError(t, err)
	require.Len(t, committed, len(shaders.Variants), "spv/ holds exactly one module per variant")
	errs := make([]error, len(shaders.Variants))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for i, v := range shaders.Variants {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = glslc.Compile(".", v.Source, v.Defines, filepath.Join(dir, v.Name+".spv"))
		})
	}
	wg.Wait()
	for i, v := range shaders.Variants {
		require.NoError(t, errs[i])
		fresh, err := os.ReadFile(filepath.Join(dir, v.Name+".spv"))
		require.NoError(t, err)
		old, err := os.ReadFile(filepath.Join("spv", v.Name+".spv"))
		require.NoError(t, err, "run go generate ./shaders/...")
		require.True(t, bytes.Equal(fresh, old), "spv/%s.spv is stale: run go generate ./shaders/...", v.Name)
	}
}

func TestSPIRVWords(t *testing.T) {
	for _, v := range shaders.Variants {
		words, err := shaders.SPIRV(v.Name)
		require.NoError(t, err, v.Name)
		require.Equal(t, uint32(0x07230203), words[0], "%s starts with the SPIR-V magic number", v.Name)
	}
	_, err := shaders.SPIRV("no_such_kernel")
	require.ErrorContains(t, err, `no SPIR-V module "no_such_kernel"`)
}
