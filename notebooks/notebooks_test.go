// Package notebooks holds the teaching notebooks; its test runs each one
// headless on the GoNB kernel and checks what it displayed.
package notebooks

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// figures is how many figures each notebook must display.
var figures = map[string]int{
	"01-tour.ipynb":            5,
	"02-induction-heads.ipynb": 4,
	"03-logit-lens.ipynb":      2,
	"04-kv-cache.ipynb":        3,
	"05-interventions.ipynb":   2,
}

type notebook struct {
	Cells []struct {
		CellType string `json:"cell_type"`
		Source   []string
		Outputs  []struct {
			OutputType string         `json:"output_type"`
			Name       string         `json:"name"`
			Text       any            `json:"text"`
			Data       map[string]any `json:"data"`
			Ename      string         `json:"ename"`
			Evalue     string         `json:"evalue"`
		}
	}
}

func TestNotebooksRunHeadless(t *testing.T) {
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	require.NoError(t, err)
	path := filepath.Join(strings.TrimSpace(string(gopath)), "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	t.Setenv("PATH", path)
	if _, err := exec.LookPath("jupyter"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("jupyter is not installed: scripts/setup.sh should have installed it")
		}
		t.Skip("jupyter is not installed (scripts/setup.sh installs it with GoNB)")
	}
	if out, err := exec.Command("jupyter", "kernelspec", "list").CombinedOutput(); err != nil || !strings.Contains(string(out), "gonb") {
		t.Fatalf("the GoNB kernel is not registered (scripts/setup.sh does it): %s", out)
	}
	names, err := filepath.Glob("*.ipynb")
	require.NoError(t, err)
	require.Len(t, names, len(figures), "every notebook has an expected figure count")
	outDir := t.TempDir()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("jupyter", "nbconvert", "--to", "notebook", "--execute",
				"--ExecutePreprocessor.timeout=900", "--output-dir", outDir, name)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "nbconvert: %s", out)
			raw, err := os.ReadFile(filepath.Join(outDir, name))
			require.NoError(t, err)
			var doc notebook
			require.NoError(t, json.Unmarshal(raw, &doc))
			shown := 0
			for i, c := range doc.Cells {
				for _, o := range c.Outputs {
					require.NotEqual(t, "error", o.OutputType, "cell %d: %s: %s", i, o.Ename, o.Evalue)
					text := toString(o.Text)
					require.False(t, o.Name == "stderr" && (strings.Contains(text, "panic") || strings.Contains(text, "error")),
						"cell %d wrote to stderr: %s", i, text)
					if _, ok := o.Data["image/svg+xml"]; ok {
						shown++
					} else if _, ok := o.Data["image/png"]; ok {
						shown++
					} else if strings.Contains(toString(o.Data["text/html"]), "<svg") {
						shown++
					}
				}
			}
			require.GreaterOrEqual(t, shown, figures[name], "figures displayed by %s", name)
		})
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var b strings.Builder
		for _, s := range x {
			b.WriteString(toString(s))
		}
		return b.String()
	}
	return ""
}
