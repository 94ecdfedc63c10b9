package nb

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// What a person sees once Explore stops listening: no sliders, and a line
// saying which head is shown, that the sliders are off and why.
func TestExploreSaysWhenItStopped(t *testing.T) {
	got := stoppedHTML("no slider moved for 1m0s", 2, 5)
	require.Contains(t, got, "Layer 2, head 5. Sliders off: no slider moved for 1m0s. Run the cell again to explore.")
	require.NotContains(t, got, "<input", "the sliders are gone, not left movable")
	require.Contains(t, stoppedHTML("<b>", 0, 0), "&lt;b&gt;", "escaped")
}

// A slider's value shows beside it and follows it as it moves: the value
// element and script Explore puts in the page, moved in Chromium the way
// a drag does (an input event), without GoNB's widget channel, which
// needs a live Jupyter front-end.
func TestExploreSliderValuesFollowTheSliders(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the check needs it")
	}
	page := `<!doctype html><body>layer <input type="range" id="l" min="0" max="3" value="0">` + sliderValueHTML("lv", 4) +
		` head <input type="range" id="h" min="0" max="7" value="0">` + sliderValueHTML("hv", 8) +
		`<script>` + showValueJS("l", "lv") + showValueJS("h", "hv") +
		`const l=document.getElementById('l'); l.value=3; l.dispatchEvent(new Event('input'));</script></body>`
	path := filepath.Join(t.TempDir(), "explore.html")
	require.NoError(t, os.WriteFile(path, []byte(page), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+path).Output()
	require.NoError(t, err, "chromium")
	dom := string(out)
	require.Contains(t, dom, `<b id="lv" style="display:inline-block;min-width:2ch">3</b> <span style="color:#666">(0–3)</span>`, "the moved slider shows 3 of 0–3")
	require.Contains(t, dom, `<b id="hv" style="display:inline-block;min-width:2ch">0</b> <span style="color:#666">(0–7)</span>`, "the other still shows 0")
	require.False(t, strings.Contains(dom, ">NaN<"))
}
