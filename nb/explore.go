package nb

import (
	"fmt"
	"html"
	"time"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/janpfeifer/gonb/gonbui/dom"
	"github.com/janpfeifer/gonb/gonbui/widgets"

	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

// frontEndWait is how long Explore waits for the widgets to come alive. A
// headless run waits it out once per Explore cell; 3 s was too short for a
// live page on a busy 2-core machine (CI: the sliders never came in two of
// seven runs).
const frontEndWait = 10 * time.Second

// Explore shows one attention head of a trace with layer and head sliders,
// each showing its value, that redraw it. It listens until Done is pressed
// or, for idle > 0, until idle passes without a change; idle <= 0 listens
// until Done (the cell keeps running, and later cells wait for it). When
// it stops, the sliders are taken away and a line says so and why, above
// the last view: a slider left on screen would move and redraw nothing.
// Without a live front-end (headless runs, outside GoNB) it shows the
// first head, says there are no sliders, and returns.
func Explore(tr *trace.Trace, idle time.Duration) {
	layer, head := 0, 0
	svg := func() string {
		f, err := viz.AttentionHead(tr, layer, head)
		if err != nil {
			return errorHTML(err)
		}
		h, err := figureHTML(f)
		if err != nil {
			return errorHTML(err)
		}
		return h
	}
	if !gonbui.IsNotebook {
		fmt.Println("nb.Explore: no live notebook here, so no sliders: layer 0 head 0 is shown")
		Show(viz.AttentionHead(tr, layer, head))
		return
	}
	// The controls live in a display of their own, which a display update
	// (plain Jupyter messages, no widget channel) replaces with a line
	// saying why they went: that works even where the widgets never came
	// alive and a half-built slider would otherwise stay.
	uid := gonbui.UniqueId()
	controlsID, div := "strata_explore_controls_"+uid, "strata_explore_div_"+uid
	layerOut, headOut := "strata_explore_layer_"+uid, "strata_explore_head_"+uid
	// Jupyter stretches a range input across the page: kept short, each
	// slider stays on one line with its name and value.
	gonbui.UpdateHTML(controlsID, fmt.Sprintf(`<style>#%s input[type=range]{width:14em;display:inline-block;vertical-align:middle}</style><div id="%s" style="font:14px sans-serif"></div>`, div, div))
	stop := func(why string) {
		gonbui.UpdateHTML(controlsID, stoppedHTML(why, layer, head))
		gonbui.Sync()
	}
	// Widgets wait for the front-end to answer; a headless run never does,
	// so they are built aside and the static view is shown if they stall.
	type controls struct {
		layers, heads *widgets.SliderBuilder
		done          *widgets.ButtonBuilder
	}
	ready := make(chan controls, 1)
	go func() {
		dom.Append(div, "layer&nbsp;")
		l := widgets.Slider(0, tr.Model.Layers-1, 0).AppendTo(div).Done()
		dom.Append(div, sliderValueHTML(layerOut, tr.Model.Layers))
		dom.Append(div, "&emsp;head&nbsp;")
		h := widgets.Slider(0, tr.Model.Heads-1, 0).AppendTo(div).Done()
		dom.Append(div, sliderValueHTML(headOut, tr.Model.Heads))
		dom.Append(div, "&emsp;")
		d := widgets.Button("Done").AppendTo(div).Done()
		// The values follow the sliders in the page as they move, before
		// the figure is redrawn.
		dom.TransientJavascript(showValueJS(l.HtmlId(), layerOut) + showValueJS(h.HtmlId(), headOut))
		ready <- controls{l, h, d}
	}()
	var ui controls
	select {
	case ui = <-ready:
	case <-time.After(frontEndWait):
		stop(fmt.Sprintf("no live front-end answered within %v", frontEndWait))
		displayHTML(svg())
		return
	}
	cell := "strata_explore_" + uid
	gonbui.UpdateHTML(cell, svg())
	layerC, headC, doneC := ui.layers.Listen().LatestOnly(), ui.heads.Listen().LatestOnly(), ui.done.Listen()
	var timeout <-chan time.Time // nil, never ready, for idle <= 0
	why := "Done was pressed"
	for finished := false; !finished; {
		if idle > 0 {
			timeout = time.After(idle)
		}
		select {
		case layer = <-layerC.C:
			dom.SetInnerText(layerOut, fmt.Sprint(layer))
			gonbui.UpdateHTML(cell, svg())
		case head = <-headC.C:
			dom.SetInnerText(headOut, fmt.Sprint(head))
			gonbui.UpdateHTML(cell, svg())
		case <-doneC.C:
			finished = true
		case <-timeout:
			finished, why = true, fmt.Sprintf("no slider moved for %v", idle)
		}
	}
	stop(why)
	gonbui.UpdateHTML(cell, "")
	displayHTML(svg())
}

// sliderValueHTML is where a slider's value shows, beside its range.
func sliderValueHTML(id string, n int) string {
	return fmt.Sprintf(`&nbsp;<b id="%s" style="display:inline-block;min-width:2ch">0</b> <span style="color:#666">(0–%d)</span>`, html.EscapeString(id), n-1)
}

// showValueJS makes the element out show the value of the range input
// slider as it moves.
func showValueJS(slider, out string) string {
	return fmt.Sprintf(`(()=>{const s=document.getElementById(%q), o=document.getElementById(%q); if(s&&o) s.addEventListener('input',()=>{o.textContent=s.value;});})();`, slider, out)
}

// stoppedHTML replaces the sliders once Explore stops listening: what
// is shown, that the sliders are off and why, and how to get them back.
func stoppedHTML(why string, layer, head int) string {
	return fmt.Sprintf(`<p style="font:14px sans-serif;color:#444">Layer %d, head %d. Sliders off: %s. Run the cell again to explore.</p>`, layer, head, html.EscapeString(why))
}
