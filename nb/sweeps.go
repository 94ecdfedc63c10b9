package nb

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// Ablation says what ablating a head replaces its output (hook_z) with.
type Ablation int

const (
	ZeroAblation Ablation = iota // zeros (engine.AblateHead)
	MeanAblation                 // its mean over the prompt's positions (engine.MeanAblateHead); over a corpus: HeadMeans, AblateHeadsWith
)

func (a Ablation) String() string {
	switch a {
	case ZeroAblation:
		return "zero ablation"
	case MeanAblation:
		return "mean ablation"
	}
	return fmt.Sprintf("Ablation(%d)", int(a))
}

// AblateHeads ablates each head in turn and returns, [layer][head], the
// metric of the ablated run minus that of the plain run (as ARENA's
// get_ablation_scores does): negative where a head helps the metric, so
// Bottom(k) are the heads a logit difference needs most, and Top(k) those a
// loss needs most. opts go to every prefill (a loss metric needs
// AllLogits()).
func (m *Model) AblateHeads(prompt any, metric func(*trace.Trace) float64, how Ablation, opts ...PrefillOption) trace.Scores {
	var ablate func(layer, head int) engine.Hook
	switch how {
	case ZeroAblation:
		ablate = engine.AblateHead
	case MeanAblation:
		ablate = engine.MeanAblateHead
	default:
		panic(fmt.Errorf("nb.AblateHeads: Ablation(%d) is neither nb.ZeroAblation nor nb.MeanAblation", how))
	}
	return m.ablateHeads("AblateHeads", prompt, metric, ablate, opts)
}

func (m *Model) ablateHeads(name string, prompt any, metric func(*trace.Trace) float64, ablate func(layer, head int) engine.Hook, opts []PrefillOption) trace.Scores {
	m.ready()
	m.checkSweep(name, metric, opts)
	base := m.score(metric, prompt, opts...)
	plainFinite := !warnRun(name, "the plain run", base, "so is every cell, a difference from it")
	out := make(trace.Scores, m.engine().Model.Layers)
	for l := range out {
		out[l] = make([]float64, m.engine().Model.Heads)
		for h := range out[l] {
			out[l][h] = m.score(metric, prompt, append(opts[:len(opts):len(opts)], Hooks(ablate(l, h)))...) - base
		}
	}
	if plainFinite {
		warnNonFinite(name, out, layerHead)
	}
	return out
}

// warnings is where a sweep says that some of its results are not finite.
// Tests swap it, so none of them may run in parallel with a sweep.
var warnings io.Writer = os.Stderr

// findHow is how to find where a run went non-finite.
const findHow = `run it again with nb.Capture("*"), and its trace's FirstNonFinite() names the first point that went non-finite (if none did, the metric made the NaN or Inf)`

// warnNonFinite says, on warnings, how many of a sweep's cells are NaN or
// infinite and names the first by cell(row, column): such a cell is kept,
// but a heatmap draws it blank and a sum over it is NaN.
func warnNonFinite(name string, cells [][]float64, cell func(i, j int) string) {
	n, total, first := 0, 0, ""
	for i, row := range cells {
		for j, v := range row {
			total++
			if !finite(v) {
				if n == 0 {
					first = fmt.Sprintf("%s (%g)", cell(i, j), v)
				}
				n++
			}
		}
	}
	if n > 0 {
		fmt.Fprintf(warnings, "nb.%s: %d of %d cells are not finite; the first is %s. To see why, take that cell's run: %s\n", name, n, total, first, findHow)
	}
}

// warnRun says, on warnings, that one of a sweep's own runs (a baseline)
// gave a metric that is not finite, and what follows; it reports whether
// it did.
func warnRun(name, run string, v float64, follows string) bool {
	if finite(v) {
		return false
	}
	fmt.Fprintf(warnings, "nb.%s: %s's metric is %g, %s. To see why, %s\n", name, run, v, follows, findHow)
	return true
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func layerHead(l, h int) string { return fmt.Sprintf("layer %d, head %d", l, h) }
func layerPos(l, p int) string  { return fmt.Sprintf("layer %d, position %d", l, p) }

// checkSweep refuses a missing metric and options that would make a
// sweep's runs wrong: each run starts over, and the sweep covers every
// layer.
func (m *Model) checkSweep(name string, metric func(*trace.Trace) float64, opts []PrefillOption) {
	if metric == nil {
		panic(fmt.Errorf("nb.%s: the metric is nil: give a function of a trace, such as m.LogitDiff(good, bad) or m.MeanLoss(0)", name))
	}
	s := m.prefillSettings(opts)
	if s.cont {
		panic(fmt.Errorf("nb.%s: Continue() would append each of the sweep's runs to the one before; a sweep starts every run over, so leave it out", name))
	}
	if last := s.o.Capture.LastLayer; s.o.Capture.FirstLayer != 0 || last != -1 && last != m.engine().Model.Layers-1 {
		panic(fmt.Errorf("nb.%s: Layers(%d, %d) narrows captures, and the sweep runs over every layer; leave it out", name, s.o.Capture.FirstLayer, s.o.Capture.LastLayer))
	}
}

// score runs a prefill, applies metric and closes the trace: a sweep's
// hundreds of prefills do not hold device memory until they are collected.
func (m *Model) score(metric func(*trace.Trace) float64, prompt any, opts ...PrefillOption) float64 {
	tr := m.Prefill(prompt, opts...)
	defer tr.Close()
	return metric(tr)
}

// Patching is the result of an activation-patching sweep: the metric of
// each patched run of the corrupted prompt, and of the two unpatched runs.
// Patched is [layer][head] (PatchHeads), [layer][position] (PatchResid,
// PatchPositions; a ranked cell's Head is then its position) or
// [layer*heads+head][position] (PatchHeadPositions).
type Patching struct {
	Patched        trace.Scores
	Clean, Corrupt float64
	// Prompts are each prompt's own patching, in a batch sweep
	// (PatchHeadsBatch), whose Patched, Clean and Corrupt are their means.
	Prompts []*Patching
}

// Normalized is (patched - corrupt) / (clean - corrupt), as Patched: 0
// where patching does nothing, 1 where it restores the clean metric. It
// panics when the clean and corrupted metrics are equal or not finite.
func (p *Patching) Normalized() trace.Scores {
	if p == nil {
		panic(errors.New("nb: Normalized of a nil *Patching"))
	}
	clean, corrupt := p.Clean, p.Corrupt
	if math.IsNaN(clean-corrupt) || math.IsInf(clean-corrupt, 0) {
		panic(fmt.Errorf("nb.Patching.Normalized: the clean metric is %g and the corrupted %g: every cell would be NaN; the model or the metric went non-finite (a trace with nb.Capture(\"*\") names the first point that did)", clean, corrupt))
	}
	if clean == corrupt {
		panic(fmt.Errorf("nb.Patching.Normalized: the clean and corrupted metric are both %g; nothing to normalise by", clean))
	}
	out := make(trace.Scores, len(p.Patched))
	for i := range p.Patched {
		out[i] = make([]float64, len(p.Patched[i]))
		for j, v := range p.Patched[i] {
			out[i][j] = (v - corrupt) / (clean - corrupt)
		}
	}
	return out
}

// patchSource checks that the prompts have the same length and returns
// the corrupted ids and the clean run's trace with capture, the patches'
// source; name is the sweep's, for the error.
func (m *Model) patchSource(name string, clean, corrupt any, capture string, opts []PrefillOption) ([]int32, *trace.Trace) {
	c := Must(m.tokens(clean))
	x := Must(m.tokens(corrupt))
	if len(c) != len(x) {
		panic(fmt.Errorf("nb.%s: clean prompt has %d tokens, corrupted %d; patching needs equal lengths", name, len(c), len(x)))
	}
	return x, m.Prefill(c, append(opts[:len(opts):len(opts)], Capture(capture))...)
}

// baselines is patchSource and both prompts' metrics, unpatched.
func (m *Model) baselines(name string, clean, corrupt any, metric func(*trace.Trace) float64, capture string, opts []PrefillOption) ([]int32, *trace.Trace, *Patching) {
	x, src := m.patchSource(name, clean, corrupt, capture, opts)
	p := &Patching{Clean: metric(src), Corrupt: m.score(metric, x, opts...)}
	const follows = "so the result cannot be normalised"
	warnRun(name, "the clean run", p.Clean, follows)
	warnRun(name, "the corrupted run", p.Corrupt, follows)
	return x, src, p
}

// PatchHeads is activation patching per head: for every layer and head it
// runs the corrupted prompt with that head's hook_z, at every position,
// taken from the clean run, and records metric: Patched is [layer][head].
// Both prompts must have the same number of tokens; opts go to every prefill.
func (m *Model) PatchHeads(clean, corrupt any, metric func(*trace.Trace) float64, opts ...PrefillOption) *Patching {
	m.ready()
	m.checkSweep("PatchHeads", metric, opts)
	ids, src, p := m.baselines("PatchHeads", clean, corrupt, metric, "blocks.*.attn.hook_z", opts)
	defer src.Close()
	p.Patched = make(trace.Scores, m.engine().Model.Layers)
	for l := range p.Patched {
		p.Patched[l] = make([]float64, m.engine().Model.Heads)
		for h := range p.Patched[l] {
			p.Patched[l][h] = m.score(metric, ids, append(opts[:len(opts):len(opts)], Hooks(engine.PatchHead(l, h, src)))...)
		}
	}
	warnNonFinite("PatchHeads", p.Patched, layerHead)
	return p
}

// PatchHeadPositions is activation patching per head and position,
// TransformerLens's get_act_patch_attn_head_out_by_pos: for every layer,
// head and position it runs the corrupted prompt with that head's hook_z at
// that position taken from the clean run. Patched has a row per head,
// layer by layer (row layer*Heads+head, labelled by viz.LayerHeadLabels),
// and a column per position. Both prompts must have the same number of
// tokens; opts go to every prefill.
func (m *Model) PatchHeadPositions(clean, corrupt any, metric func(*trace.Trace) float64, opts ...PrefillOption) *Patching {
	m.ready()
	m.checkSweep("PatchHeadPositions", metric, opts)
	ids, src, p := m.baselines("PatchHeadPositions", clean, corrupt, metric, "blocks.*.attn.hook_z", opts)
	defer src.Close()
	heads := m.engine().Model.Heads
	p.Patched = make(trace.Scores, m.engine().Model.Layers*heads)
	for l := range m.engine().Model.Layers {
		for h := range heads {
			row := make([]float64, len(ids))
			for pos := range row {
				row[pos] = m.score(metric, ids, append(opts[:len(opts):len(opts)], Hooks(engine.PatchHead(l, h, src, pos)))...)
			}
			p.Patched[l*heads+h] = row
		}
	}
	warnNonFinite("PatchHeadPositions", p.Patched, func(i, pos int) string {
		return fmt.Sprintf("layer %d, head %d, position %d", i/heads, i%heads, pos)
	})
	return p
}
