package notebooks

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// nb.Explore in a live notebook, as a person uses it: Jupyter serves a
// notebook with an Explore cell, Chromium runs it, moves the layer slider
// after 10 s idle (the explorer had stopped listening after 2 s while its
// sliders stayed movable), and reads the redrawn figure's title and the
// slider's shown value; Done then takes the sliders away with a line
// saying so.
func TestExploreLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Jupyter and a GoNB kernel")
	}
	jupyter(t)
	browser := newBrowser(t)
	root, err := filepath.Abs("..")
	require.NoError(t, err)

	// The tour's set-up and import cells, then the explorer.
	src, err := os.ReadFile("01-tour.ipynb")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(src, &doc))
	cells := doc["cells"].([]any)
	doc["cells"] = []any{cells[1], cells[2], map[string]any{"cell_type": "code", "metadata": map[string]any{}, "outputs": []any{},
		"execution_count": nil, "id": "explore", "source": "%%\nnb.Explore(m.Prefill(\"func main() {\\n\\treturn\\n}\", nb.Capture(\"blocks.*.attn.hook_pattern\")), 0)"}}
	dir := t.TempDir()
	raw, err := json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "explore.ipynb"), raw, 0o644))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	const token = "strata-explore-test"
	args := []string{"notebook", "--no-browser", "--ip=127.0.0.1", fmt.Sprintf("--port=%d", port), "--NotebookApp.token=" + token,
		"--notebook-dir=" + dir}
	if os.Getuid() == 0 {
		args = append(args, "--allow-root")
	}
	server := exec.Command("jupyter", args...)
	server.Env = append(os.Environ(), "STRATA_DIR="+root)
	logPath := filepath.Join(dir, "jupyter.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	server.Stdout, server.Stderr = logFile, logFile
	require.NoError(t, server.Start())
	t.Cleanup(func() {
		// SIGTERM: Jupyter shuts its kernels down before it exits.
		_ = server.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- server.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = server.Process.Kill()
		}
		logFile.Close()
	})

	ctx, cancel := context.WithTimeout(browser, 8*time.Minute)
	defer cancel()
	waitFor := func(what, js string, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(logPath)
				out, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('.output_area')].map(e=>e.innerText).join('\n---\n')`))
				t.Fatalf("waited %v for %s; the cells' output:\n%s\nJupyter's log:\n%s", limit, what, out, log)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/notebooks/explore.ipynb?token=%s", port, token)
	deadline := time.Now().Add(30 * time.Second)
	for chromedp.Do(ctx, chromedp.Navigate(url)) != nil && time.Now().Before(deadline) {
		time.Sleep(time.Second) // the server is starting
	}
	waitFor("the kernel", `!!(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected())`, time.Minute)
	evaluate[bool](t, ctx, `Jupyter.notebook.execute_all_cells(), true`)
	waitFor("two sliders and Done", `document.querySelectorAll('input[type=range]').length === 2 && [...document.querySelectorAll('button')].some(b => b.textContent === 'Done')`, 6*time.Minute)
	waitFor("layer 0's figure", `[...document.querySelectorAll('svg text')].some(e => e.textContent === 'Attention pattern, layer 0 head 0')`, time.Minute)

	time.Sleep(10 * time.Second) // longer than the 2 s after which it had stopped listening
	evaluate[bool](t, ctx, `(() => { const s = document.querySelectorAll('input[type=range]')[0]; s.value = 2;
		s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change')); return true; })()`)
	waitFor("layer 2's figure, redrawn", `[...document.querySelectorAll('svg text')].some(e => e.textContent === 'Attention pattern, layer 2 head 0')`, time.Minute)
	shown := evaluate[string](t, ctx, `[...document.querySelectorAll('b[id^=strata_explore_layer_]')].map(e => e.textContent).join()`)
	require.Equal(t, "2", shown, "the layer slider shows its value")
	if keep := os.Getenv("STRATA_NOTEBOOK_OUT"); keep != "" {
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(keep, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(keep, "explore-live.png"), shot, 0o644))
	}

	evaluate[bool](t, ctx, `[...document.querySelectorAll('button')].find(b => b.textContent === 'Done').click(), true`)
	waitFor("the stopped line, without sliders", `document.body.innerText.includes('Sliders off: Done was pressed') && document.querySelectorAll('input[type=range]').length === 0`, time.Minute)
}

// evaluate runs js in the page and returns its value.
func evaluate[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, js)
	return v
}
