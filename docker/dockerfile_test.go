// Package docker holds the image definition; its test checks the Dockerfile
// without a Docker engine.
package docker

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/stretchr/testify/require"
)

func TestDockerfileUsesSetupScriptAndShipsNotebooks(t *testing.T) {
	f, err := os.Open("Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	res, err := parser.Parse(f)
	require.NoError(t, err)
	var cmds []string
	var lines []string
	for _, n := range res.AST.Children {
		cmds = append(cmds, strings.ToUpper(n.Value))
		lines = append(lines, n.Original)
	}
	require.Equal(t, "FROM", cmds[0])
	setup := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "RUN ./scripts/setup.sh") })
	require.GreaterOrEqual(t, setup, 0, "the image installs through the same set-up script as the tests")
	copySetup := slices.Index(lines, "COPY scripts/setup.sh scripts/setup.sh")
	require.True(t, copySetup >= 0 && copySetup < setup, "setup.sh is copied before it runs")
	require.Contains(t, lines, "COPY . .", "the whole checkout (notebooks, go.mod, models) goes in")
	require.Contains(t, strings.Join(lines, "\n"), "NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "CMD"), "the image starts Jupyter")
	require.Contains(t, last, "/strata/notebooks")

	// What the notebooks need must not be excluded from the build context.
	if ignore, err := os.ReadFile("../.dockerignore"); err == nil {
		for _, need := range []string{"notebooks", "go.mod", "models", "scripts"} {
			require.NotContains(t, strings.Fields(string(ignore)), need)
		}
	}
	for _, need := range []string{"../notebooks", "../scripts/setup.sh", "../go.mod"} {
		_, err := os.Stat(need)
		require.NoError(t, err, "%s is in the checkout for COPY", need)
	}
}
