package nb

import (
	"fmt"
	"time"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/janpfeifer/gonb/gonbui/dom"
	"github.com/janpfeifer/gonb/gonbui/widgets"

	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

// frontEndWait is how long Explore waits for the widgets to come alive.
const frontEndWait = 3 * time.Second

// Explore shows one attention head of a trace with layer and head sliders
// that redraw it, until Done is pressed or idle passes without a change;
// then the last view stays in the notebook. Without a live front-end
// (headless runs, outside GoNB) it shows the first head and returns.
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
		Show(viz.AttentionHead(tr, layer, head))
		return
	}
	// Widgets wait for the front-end to answer; a headless run never does,
	// so they are built aside and the static view is shown if they stall.
	type controls struct {
		layers, heads *widgets.SliderBuilder
		done          *widgets.ButtonBuilder
	}
	ready := make(chan controls, 1)
	div := dom.CreateTransientDiv()
	go func() {
		dom.Append(div, "layer&nbsp;")
		l := widgets.Slider(0, tr.Model.Layers-1, 0).AppendTo(div).Done()
		dom.Append(div, "&nbsp;head&nbsp;")
		h := widgets.Slider(0, tr.Model.Heads-1, 0).AppendTo(div).Done()
		d := widgets.Button("Done").AppendTo(div).Done()
		ready <- controls{l, h, d}
	}()
	var ui controls
	select {
	case ui = <-ready:
	case <-time.After(frontEndWait):
		displayHTML(fmt.Sprintf("<p>layer %d, head %d (no live front-end: sliders off)</p>%s", layer, head, svg()))
		return
	}
	cell := "strata_explore_" + gonbui.UniqueId()
	gonbui.UpdateHTML(cell, svg())
	layerC, headC, doneC := ui.layers.Listen().LatestOnly(), ui.heads.Listen().LatestOnly(), ui.done.Listen()
	for finished := false; !finished; {
		select {
		case layer = <-layerC.C:
			gonbui.UpdateHTML(cell, svg())
		case head = <-headC.C:
			gonbui.UpdateHTML(cell, svg())
		case <-doneC.C:
			finished = true
		case <-time.After(idle):
			finished = true
		}
	}
	gonbui.UpdateHTML(cell, "")
	displayHTML(fmt.Sprintf("<p>layer %d, head %d</p>%s", layer, head, svg()))
}
