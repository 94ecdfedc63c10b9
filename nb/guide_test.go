package nb_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every example docs/TRANSFORMERLENS.md names as running a row's Strata
// call exists, in nb or viz: a renamed or deleted one would leave the
// guide pointing at nothing.
func TestTheGuidesExamplesExist(t *testing.T) {
	guide, err := os.ReadFile("../docs/TRANSFORMERLENS.md")
	require.NoError(t, err)
	have := map[string]bool{}
	for _, dir := range []string{".", "../viz"} {
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		require.NoError(t, err)
		for _, f := range files {
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			require.NoError(t, err)
			for _, d := range parsed.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok {
					have[fn.Name.Name] = true
				}
			}
		}
	}
	named := regexp.MustCompile("`(Example[A-Za-z_]*)`").FindAllStringSubmatch(string(guide), -1)
	require.Greater(t, len(named), 40, "the guide names the examples that run its calls")
	for _, n := range named {
		require.True(t, have[n[1]], "the guide names %s, which nb and viz do not have", n[1])
	}
}
