// Package notebooks holds the teaching notebooks. Its tests run each one
// headless on the GoNB kernel, check the numbers its story rests on, and
// look at its figures as a reader does: the executed notebook converted to
// HTML and drawn by Chromium, each figure compared with its PNG export.
package notebooks

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stories checks, per notebook, the numbers its text rests on; out is every
// text output of the executed notebook, in order.
var stories = map[string]func(t *testing.T, out string){
	"01-tour.ipynb": func(t *testing.T, out string) {
		assert.Contains(t, out, "gostd-qwen3-4m: qwen3, 4 layers")
		assert.Greater(t, number(t, out, `strongest previous-token head: layer \d+ head \d+ \(score ([0-9.]+)\)`), 0.5,
			"the head shown up close attends mostly to the previous token, as the text says")
		assert.Regexp(t, `(?s)— greedy —\n.{10,}`, out, "the generation cell printed a continuation")
		assert.NotEqual(t, line(t, out, `(?s)— drawn at temperature 0.5 —\n(.*)— drawn at temperature 1.5`),
			line(t, out, `(?s)— drawn at temperature 1.5 —\n(.*)`), "two temperatures, two texts")
	},
	"02-induction-heads.ipynb": func(t *testing.T, out string) {
		first, repeat := number(t, out, `loss on the first copy: ([0-9.]+)`), number(t, out, `loss on the repeat: ([0-9.]+)`)
		// A random sequence costs about ln(vocab) = 7.6 nats a token the first
		// time; an induction head that copies makes the repeat far cheaper.
		assert.Greater(t, first, 5.0, "random tokens are unpredictable the first time")
		assert.Less(t, repeat, first-2, "the repeat's loss falls by at least 2 nats a token")
		assert.Greater(t, number(t, out, `strongest induction head: layer \d+ head \d+, score ([0-9.]+)`), 0.3)
		assert.Greater(t, number(t, out, `ablated, loss on the repeat: ([0-9.]+)`), repeat+0.5,
			"ablating the induction head makes the repeat harder")
		// Go code with invented names, written twice: the model copies the
		// names, and the repeat costs far less than uniform guessing
		// (measured 1.75 nats; 4.86 the first time, 3.81 with the head
		// ablated).
		codeFirst, codeRepeat := number(t, out, `invented code, first copy: ([0-9.]+)`), number(t, out, `invented code, repeat: ([0-9.]+)`)
		uniform := number(t, out, `uniform guessing: ([0-9.]+)`)
		assert.InDelta(t, math.Log(2048), uniform, 0.005, "uniform guessing costs ln(vocab)")
		assert.Less(t, codeRepeat, uniform/2, "the repeat of invented code is far below uniform guessing")
		assert.Less(t, codeRepeat, codeFirst-2, "copying the names saves at least 2 nats a token")
		assert.Greater(t, number(t, out, `ablated, invented code's repeat: ([0-9.]+)`), codeRepeat+1,
			"ablating the induction head takes back much of the saving")
		assert.Equal(t, line(t, out, `strongest previous-token head \(from the patterns above\): layer (\d+ head \d+)`),
			strings.Replace(line(t, out, `keys read most: L(\d+H\d+) `), "H", " head ", 1), "the induction head's keys read the previous-token head most")
	},
	"03-logit-lens.ipynb": func(t *testing.T, out string) {
		assert.Regexp(t, `logit lens at position \d+, after "\\tif":\n(  layer \d: .*\n){3}  layer 3: " s"`, out, "the lens of the last position, the prediction on top at the last layer")
		assert.GreaterOrEqual(t, number(t, out, `final layer's probability for the prediction: ([0-9.]+)`),
			number(t, out, `first layer's probability for the prediction: ([0-9.]+)`),
			"the prediction firms up through the layers")
		// The attribution's parts add up to the prediction's lead over the
		// runner-up (printed to 3 decimals).
		diff := number(t, out, `logit\(.*\) ([-0-9.]+), runner-up`) - number(t, out, `runner-up logit\(.*\) ([-0-9.]+)`)
		assert.Greater(t, diff, 0.0, "the prediction leads")
		assert.InDelta(t, diff, sumOfParts(t, out), 0.01, "the parts add up to the lead")
		assert.InDelta(t, diff, number(t, out, `the parts sum to ([-0-9.]+)`), 0.01, "the sum the cell prints, under its figure")
	},
	"04-kv-cache.ipynb": func(t *testing.T, out string) {
		// Two prefills of the same tokens, one incremental: float32 sums in a
		// different order, a few ulps of logits of size ~10.
		assert.Less(t, number(t, out, `largest logit difference, incremental vs whole: ([0-9.e+-]+)`), 1e-3)
	},
	"05-interventions.ipynb": func(t *testing.T, out string) {
		clean, corrupt := number(t, out, `clean run: ([-0-9.]+)`), number(t, out, `corrupted run: ([-0-9.]+)`)
		assert.Greater(t, clean, 2.0, "the clean run prefers i--")
		assert.Less(t, corrupt, -2.0, "the corrupted run prefers i++")
		// The comparison token is where the runs differ: patching it restores
		// the clean answer after layers 0 to 2, most of the way, while the
		// last position holds little; after layer 3 the last position holds
		// it all.
		assert.Equal(t, `" >"`, line(t, out, `after layer 2: patching (".*") restores`))
		assert.Greater(t, number(t, out, `after layer 2: patching ".*" restores ([-0-9.]+) of the way`), 0.5)
		assert.Less(t, number(t, out, `after layer 2: .*; the last position ([-0-9.]+)`), 0.2, "the last position reads it only in layer 3")
		assert.Greater(t, number(t, out, `after layer 3: .*; the last position ([-0-9.]+)`), 0.9)
		assert.Greater(t, number(t, out, `alpha 1.50: logit\(--\) − logit\(\+\+\) = ([-+0-9.]+)`),
			number(t, out, `alpha 0.00: logit\(--\) − logit\(\+\+\) = ([-+0-9.]+)`)+5, "steering moves the metric by 5 or more")
		assert.Equal(t, "++", line(t, out, `plain:   (.*)`))
		assert.Equal(t, "--", line(t, out, `steered: (.*)`), "the steering vector turns the loop around")
		assert.Regexp(t, `^"for j := 0; j < m; j\+\+`, line(t, out, `unsteered: +(.*)`), "unsteered, the generated loop counts up")
		assert.Regexp(t, `L0H\d restores 0\.[3-9]\d of the way at " >" alone`, out, "a layer-0 head reads the comparison")
		assert.Regexp(t, `L3H\d restores 0\.[3-9]\d of the way at " i" alone`, out, "a layer-3 head carries it at the last position")
		assert.Regexp(t, `^"for j := 0; j < m; j--`, line(t, out, `steered at " <": +(.*)`), "steered at the comparison, it counts down")
	},
	"06-direct-logit-attribution.ipynb": func(t *testing.T, out string) {
		assert.Equal(t, `" err"`, line(t, out, `the model continues with (.*)`), "the model gets the completion right")
		assert.Regexp(t, `answer token " err": rank 0, logit [0-9.]+, probability [0-9.]+%\n  top 0: .*" err"`, out, "TestPrompt ranks it first")
		diff := number(t, out, `logit\(' err'\) − logit\(' nil'\): ([-0-9.]+)`)
		assert.Greater(t, diff, 3.0)
		// The components sum to the difference (printed to 3 decimals).
		assert.InDelta(t, diff, sumOfParts(t, out), 0.01, "the parts add up to the logit difference")
		for l := range 4 { // a layer's neurons add up to its MLP's part
			assert.InDelta(t, number(t, out, fmt.Sprintf(`\n%d_mlp_out ([-+0-9.]+)`, l)),
				number(t, out, fmt.Sprintf(`layer %d's neurons sum to ([-+0-9.]+)`, l)), 0.002, "layer %d", l)
		}
		head := line(t, out, `strongest head: (layer \d+ head \d+) writes`)
		assert.Greater(t, number(t, out, `strongest head: layer \d+ head \d+ writes ([-0-9.]+)`), 1.5)
		assert.Equal(t, `" err"`, line(t, out, `attends most to (".*") \(`), "the head reads the token it writes")
		assert.Less(t, number(t, out, `head \d+ zeroed: logit\(' err'\) − logit\(' nil'\) = ([-0-9.]+)`), diff-1.5, "ablating it costs much of the answer")
		assert.Equal(t, head, line(t, out, `the head whose ablation costs the most: (layer \d+ head \d+)`), "attribution and ablation agree")
	},
	"07-name-mover-batch.ipynb": func(t *testing.T, out string) {
		clean := number(t, out, `clean batch: logit difference mean ([-0-9.]+) over 16 prompts`)
		assert.Greater(t, clean, 2.0, "the model copies the parameter's name, on average")
		assert.GreaterOrEqual(t, number(t, out, `above 0 in (\d+) of 16`), 12.0, "in most prompts, not only on average")
		assert.Less(t, number(t, out, `corrupted batch: logit difference mean ([-0-9.]+)`), 0.0, "the twin's name flips it")
		// The batch sweep's baselines are the batches' means above.
		assert.InDelta(t, clean, number(t, out, `clean mean ([-0-9.]+), corrupted`), 0.01)
		assert.Equal(t, "3", line(t, out, `strongest head: layer (\d+) head \d+ restores`), "a last-layer head moves the name")
		assert.Greater(t, number(t, out, `strongest head: layer \d+ head \d+ restores ([-0-9.]+) of the way`), 0.3)
		assert.GreaterOrEqual(t, number(t, out, `patching it raises the logit difference in (\d+) of 16 prompts`), 12.0)
	},
}

func number(t *testing.T, out, pattern string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(line(t, out, pattern), 64)
	require.NoError(t, err, "pattern %q", pattern)
	return v
}

func line(t *testing.T, out, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	require.NotNil(t, m, "no output matches %q in:\n%s", pattern, out)
	return m[1]
}

type output struct {
	OutputType string         `json:"output_type"`
	Name       string         `json:"name"`
	Text       any            `json:"text"`
	Data       map[string]any `json:"data"`
	Ename      string         `json:"ename"`
	Evalue     string         `json:"evalue"`
}

type notebook struct {
	Cells []struct {
		CellType string `json:"cell_type"`
		Source   any    `json:"source"`
		Outputs  []output
		Metadata struct {
			Execution map[string]string `json:"execution"`
		} `json:"metadata"`
	}
}

// jupyter skips the test where Jupyter is missing, except in CI, and puts
// GOPATH/bin (GoNB, goimports) on PATH.
func jupyter(t *testing.T) {
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	require.NoError(t, err)
	t.Setenv("PATH", filepath.Join(strings.TrimSpace(string(gopath)), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if _, err := exec.LookPath("jupyter"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("jupyter is not installed: scripts/setup.sh should have installed it")
		}
		t.Skip("jupyter is not installed (scripts/setup.sh installs it with GoNB)")
	}
	if out, err := exec.Command("jupyter", "kernelspec", "list").CombinedOutput(); err != nil || !strings.Contains(string(out), "gonb") {
		t.Fatalf("the GoNB kernel is not registered (scripts/setup.sh does it): %s", out)
	}
}

// execute runs a notebook headless and returns the executed copy.
func execute(t *testing.T, path, outDir string, env ...string) notebook {
	t.Helper()
	cmd := exec.Command("jupyter", "nbconvert", "--to", "notebook", "--execute",
		"--ExecutePreprocessor.timeout=900", "--output-dir", outDir, path)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "nbconvert: %s", out)
	raw, err := os.ReadFile(filepath.Join(outDir, filepath.Base(path)))
	require.NoError(t, err)
	var doc notebook
	require.NoError(t, json.Unmarshal(raw, &doc))
	return doc
}

// texts is every text a notebook's cells printed, and an error for the first
// cell that failed or wrote a panic or error to stderr.
func (doc notebook) texts() (string, error) {
	var b strings.Builder
	for i, c := range doc.Cells {
		for _, o := range c.Outputs {
			text := toString(o.Text)
			if o.OutputType == "error" {
				return "", fmt.Errorf("cell %d: %s: %s", i, o.Ename, o.Evalue)
			}
			if o.Name == "stderr" && (strings.Contains(text, "panic") || strings.Contains(text, "error")) {
				return "", fmt.Errorf("cell %d wrote to stderr: %s", i, text)
			}
			b.WriteString(text)
			b.WriteString(toString(o.Data["text/plain"]))
		}
	}
	return b.String(), nil
}

// sumOfParts adds the direct logit attribution's parts that out prints, a
// line each ("2_mlp_out +1.409").
func sumOfParts(t *testing.T, out string) float64 {
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^(embed|\d+_attn_out|\d+_mlp_out) ([-+0-9.]+)$`).FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

func TestNotebooks(t *testing.T) {
	jupyter(t)
	names, err := filepath.Glob("*.ipynb")
	require.NoError(t, err)
	require.Len(t, names, len(stories), "every notebook has a story check")
	browser := newBrowser(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if keep := os.Getenv("STRATA_NOTEBOOK_OUT"); keep != "" {
				// For a reader: the executed notebooks, their HTML and the screenshots.
				dir = filepath.Join(keep, strings.TrimSuffix(name, ".ipynb"))
				require.NoError(t, os.RemoveAll(dir))
			}
			exports := filepath.Join(dir, "exports")
			doc := execute(t, name, dir, "STRATA_SHOW_EXPORT="+exports)
			out, err := doc.texts()
			require.NoError(t, err)
			stories[name](t, out)
			logCellTimes(t, doc)

			executed := filepath.Join(dir, name)
			conv := exec.Command("jupyter", "nbconvert", "--to", "html", executed)
			b, err := conv.CombinedOutput()
			require.NoError(t, err, "nbconvert --to html: %s", b)
			html := strings.TrimSuffix(executed, ".ipynb") + ".html"
			compareFigures(t, browser, html, exports, filepath.Join(dir, "shots"))
		})
	}
}

// logCellTimes logs how long each code cell took, as the kernel reported it
// (whole seconds): a record of where a notebook's time goes, not a check.
func logCellTimes(t *testing.T, doc notebook) {
	var b strings.Builder
	for i, c := range doc.Cells {
		e := c.Metadata.Execution
		if c.CellType != "code" || e["iopub.execute_input"] == "" {
			continue
		}
		fmt.Fprintf(&b, " %d:%s..%s", i, clock(e["iopub.execute_input"]), clock(e["shell.execute_reply"]))
	}
	t.Logf("cell times (start..end):%s", b.String())
}

func clock(stamp string) string {
	if i := strings.IndexByte(stamp, 'T'); i >= 0 && len(stamp) >= i+9 {
		return stamp[i+1 : i+9]
	}
	return stamp
}

// The set-up cell finds the checkout from any folder inside it, or from
// STRATA_DIR, and says what to do when it finds neither.
func TestSetUpCellFromAnotherFolder(t *testing.T) {
	jupyter(t)
	src, err := os.ReadFile("01-tour.ipynb")
	require.NoError(t, err)
	var full map[string]any
	require.NoError(t, json.Unmarshal(src, &full))
	cells := full["cells"].([]any)
	var kept []any
	for _, c := range cells {
		cell := c.(map[string]any)
		source := toString(cell["source"])
		if cell["cell_type"] == "code" && (strings.Contains(source, "gonb-setup") || strings.Contains(source, "nb.Open(") || strings.Contains(source, "m.Note")) {
			kept = append(kept, c)
		}
	}
	require.Len(t, kept, 3, "01-tour has a set-up cell, an opening cell and a cell printing m.Note")
	full["cells"] = kept
	raw, err := json.Marshal(full)
	require.NoError(t, err)

	outside := t.TempDir()
	path := filepath.Join(outside, "mine.ipynb")
	require.NoError(t, os.WriteFile(path, raw, 0o644))

	t.Run("without STRATA_DIR", func(t *testing.T) {
		out := t.TempDir()
		cmd := exec.Command("jupyter", "nbconvert", "--to", "notebook", "--execute", "--allow-errors", "--output-dir", out, path)
		cmd.Env = append(os.Environ(), "STRATA_DIR=")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "nbconvert: %s", b)
		raw, err := os.ReadFile(filepath.Join(out, "mine.ipynb"))
		require.NoError(t, err)
		var doc notebook
		require.NoError(t, json.Unmarshal(raw, &doc))
		var setup strings.Builder
		for _, o := range doc.Cells[0].Outputs {
			setup.WriteString(toString(o.Text))
		}
		assert.Contains(t, setup.String(), "start Jupyter with STRATA_DIR=", "the set-up cell says what to do")
	})
	t.Run("with STRATA_DIR", func(t *testing.T) {
		root, err := filepath.Abs("..")
		require.NoError(t, err)
		doc := execute(t, path, t.TempDir(), "STRATA_DIR="+root)
		out, err := doc.texts()
		require.NoError(t, err)
		assert.Contains(t, out, "gostd-qwen3-4m")
	})
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
