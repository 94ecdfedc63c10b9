package nb

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// LogitDiffs is LogitDiff for each prompt of a batch: metric i is the last
// position's logit of goods[i] minus that of bads[i] (IOI's answer and its
// foil, prompt by prompt). goods and bads are a []string of one-token texts
// or a []any of tokens, one for each prompt. MeanOver(trs, metrics...)
// reduces them over a batch; the batch sweeps take them as they are.
func (m *Model) LogitDiffs(goods, bads any) []func(*trace.Trace) float64 {
	m.ready()
	g, err := batchPrompts(goods)
	if err == nil {
		var b []any
		if b, err = batchPrompts(bads); err == nil && len(b) != len(g) {
			err = fmt.Errorf("%d good tokens and %d bad ones: give one of each for every prompt", len(g), len(b))
		}
		if err == nil {
			out := make([]func(*trace.Trace) float64, len(g))
			for i := range g {
				out[i] = m.LogitDiff(g[i], b[i])
			}
			return out
		}
	}
	panic(fmt.Errorf("nb.LogitDiffs: %w", err))
}

// PatchHeadsBatch is PatchHeads over a batch of clean prompts and their
// corrupted ones, prompt i of each of equal length: the clean batch runs
// once, and for every layer and head the corrupted batch runs as one
// prefill with that head's hook_z in each prompt taken from its own clean
// run (engine.PerPrompt). metrics are one for every prompt or one per
// prompt (LogitDiffs). The result's Patched, Clean and Corrupt are the
// means over the batch, as TransformerLens's metrics reduce a batch;
// Prompts keeps each prompt's own. Long sweeps report their progress on
// stderr.
func (m *Model) PatchHeadsBatch(clean, corrupt any, metrics []func(*trace.Trace) float64, opts ...PrefillOption) *Patching {
	m.ready()
	const name = "PatchHeadsBatch"
	cs, xs := m.batchIDs(name, clean), m.batchIDs(name, corrupt)
	if len(cs) != len(xs) {
		panic(fmt.Errorf("nb.%s: %d clean prompts and %d corrupted: give a corrupted one for each", name, len(cs), len(xs)))
	}
	for i := range cs {
		if len(cs[i]) != len(xs[i]) {
			panic(fmt.Errorf("nb.%s: clean prompt %d has %d tokens, its corrupted one %d; patching needs equal lengths", name, i, len(cs[i]), len(xs[i])))
		}
	}
	if len(metrics) != 1 && len(metrics) != len(cs) {
		panic(fmt.Errorf("nb.%s: %d metrics for %d prompts: give one for all, or one per prompt", name, len(metrics), len(cs)))
	}
	for _, f := range metrics {
		m.checkSweep(name, f, opts)
	}
	src := m.PrefillBatch(cs, append(opts[:len(opts):len(opts)], Capture("blocks.*.attn.hook_z"))...)
	defer closeAll(src)
	c := &m.engine().Model.Config
	p := &Patching{Prompts: make([]*Patching, len(cs))}
	for i := range cs {
		p.Prompts[i] = &Patching{Patched: make(trace.Scores, c.Layers)}
		for l := range c.Layers {
			p.Prompts[i].Patched[l] = make([]float64, c.Heads)
		}
	}
	// score runs the corrupted batch and gives each prompt's metric.
	score := func(hooks ...engine.Hook) []float64 {
		trs := m.PrefillBatch(xs, append(opts[:len(opts):len(opts)], Hooks(hooks...))...)
		defer closeAll(trs)
		return MeanOver(trs, metrics...).PerPrompt
	}
	cleans := MeanOver(src, metrics...).PerPrompt
	for i, v := range score() {
		p.Prompts[i].Clean, p.Prompts[i].Corrupt = cleans[i], v
	}
	bar := newProgress(name, c.Layers*c.Heads)
	for l := range c.Layers {
		for h := range c.Heads {
			patches := make([]engine.Hook, len(src))
			for i, tr := range src {
				patches[i] = engine.PatchHead(l, h, tr)
			}
			for i, v := range score(engine.PerPrompt(patches...)) {
				p.Prompts[i].Patched[l][h] = v
			}
			bar.step()
		}
	}
	bar.done()
	p.Patched, p.Clean, p.Corrupt = meanPatching(p.Prompts)
	const follows = "so the result cannot be normalised"
	warnRun(name, "the clean batch", p.Clean, follows)
	warnRun(name, "the corrupted batch", p.Corrupt, follows)
	warnNonFinite(name, p.Patched, layerHead)
	return p
}

// batchIDs is a batch's token ids, as PrefillBatch takes the batch.
func (m *Model) batchIDs(name string, prompts any) [][]int32 {
	list, err := batchPrompts(prompts)
	if err != nil {
		panic(fmt.Errorf("nb.%s: %w", name, err))
	}
	ids := make([][]int32, len(list))
	for i, p := range list {
		if ids[i], err = m.tokens(p); err != nil {
			panic(fmt.Errorf("nb.%s: prompt %d: %w", name, i, err))
		}
	}
	return ids
}

// meanPatching is the mean over prompts of each cell and baseline.
func meanPatching(ps []*Patching) (trace.Scores, float64, float64) {
	n := float64(len(ps))
	out := make(trace.Scores, len(ps[0].Patched))
	var clean, corrupt float64
	for i := range out {
		out[i] = make([]float64, len(ps[0].Patched[i]))
	}
	for _, p := range ps {
		clean, corrupt = clean+p.Clean/n, corrupt+p.Corrupt/n
		for i, row := range p.Patched {
			for j, v := range row {
				out[i][j] += v / n
			}
		}
	}
	return out, clean, corrupt
}

func closeAll(trs []*trace.Trace) {
	for _, tr := range trs {
		tr.Close()
	}
}

// progressOut is where long sweeps report progress; progressAfter is how
// long a sweep runs before it starts to. Tests swap both.
var (
	progressOut   io.Writer = os.Stderr
	progressAfter           = 2 * time.Second
)

// progress reports a long sweep's steps done, a line at each tenth, once
// it has run progressAfter: a short sweep says nothing.
type progress struct {
	name        string
	n, i, shown int
	start       time.Time
}

func newProgress(name string, n int) *progress {
	return &progress{name: name, n: n, start: time.Now()}
}

func (p *progress) step() {
	p.i++
	if tenth := 10 * p.i / p.n; tenth > p.shown && time.Since(p.start) >= progressAfter {
		p.shown = tenth
		fmt.Fprintf(progressOut, "nb.%s: %s %d/%d (%.0fs)\n", p.name, bar(p.i, p.n), p.i, p.n, time.Since(p.start).Seconds())
	}
}

// done ends a sweep that reported progress with its time.
func (p *progress) done() {
	if p.shown > 0 && p.shown < 10 {
		fmt.Fprintf(progressOut, "nb.%s: %s %d/%d (%.0fs)\n", p.name, bar(p.n, p.n), p.n, p.n, time.Since(p.start).Seconds())
	}
}

// bar draws i of n as 20 cells.
func bar(i, n int) string {
	full := 20 * i / n
	b := make([]rune, 20)
	for j := range b {
		b[j] = '░'
		if j < full {
			b[j] = '█'
		}
	}
	return string(b)
}

// HeadMeans is each head's output (hook_z) averaged over a corpus,
// [layer][head][head_dim]: the values mean ablation puts in its place.
type HeadMeans [][][]float32

// HeadMeans runs a corpus (a batch, as PrefillBatch takes it) as one batch
// and averages each head's hook_z over every position of every prompt, in
// float64: TransformerLens's mean ablation over a dataset, in one call.
// opts go to the prefill.
func (m *Model) HeadMeans(corpus any, opts ...PrefillOption) HeadMeans {
	m.ready()
	trs := m.PrefillBatch(corpus, append(opts[:len(opts):len(opts)], Capture("blocks.*.attn.hook_z"))...)
	defer closeAll(trs)
	c := &m.engine().Model.Config
	out := make(HeadMeans, c.Layers)
	for l := range out {
		sum := make([]float64, c.Heads*c.HeadDim)
		rows := 0
		for _, tr := range trs {
			z := Must(tr.Get(trace.LayerPoint(l, trace.AttnZ)))
			for r := range z.Shape[0] {
				for j, v := range z.Data[r*len(sum) : (r+1)*len(sum)] {
					sum[j] += float64(v)
				}
			}
			rows += z.Shape[0]
		}
		out[l] = make([][]float32, c.Heads)
		for h := range out[l] {
			out[l][h] = make([]float32, c.HeadDim)
			for j := range out[l][h] {
				out[l][h][j] = float32(sum[h*c.HeadDim+j] / float64(rows))
			}
		}
	}
	return out
}

// Ablate replaces the head's output at every position with its corpus
// mean: a hook for Hooks, or for AblateHeadsWith.
func (hm HeadMeans) Ablate(layer, head int) engine.Hook {
	point := trace.LayerPoint(layer, trace.AttnZ)
	if layer < 0 || layer >= len(hm) || head < 0 || head >= len(hm[layer]) {
		heads := 0
		if len(hm) > 0 {
			heads = len(hm[0])
		}
		return engine.Hook{Point: point, Device: func(string, []int) ([]engine.DeviceEdit, error) {
			return nil, fmt.Errorf("nb.HeadMeans.Ablate: layer %d head %d is outside the means' %d layers of %d heads", layer, head, len(hm), heads)
		}}
	}
	mean := hm[layer][head]
	return engine.Hook{Point: point, Device: func(name string, shape []int) ([]engine.DeviceEdit, error) {
		if len(shape) != 3 || shape[1] <= head || shape[2] != len(mean) {
			return nil, fmt.Errorf("nb.HeadMeans.Ablate: %s has shape %v, and the mean is of %d values for head %d", name, shape, len(mean), head)
		}
		e := backend.Edit{Op: backend.EditSet, Off: head * shape[2], Rows: shape[0], Cols: shape[2], Stride: shape[1] * shape[2]} // SrcStride 0: the mean in every row
		return []engine.DeviceEdit{{Edit: e, Data: mean}}, nil
	}}
}

// AblateHeadsWith is AblateHeads with the ablation's hook given:
// m.AblateHeadsWith(prompt, metric, m.HeadMeans(corpus).Ablate) mean-ablates
// each head with its mean over a corpus.
func (m *Model) AblateHeadsWith(prompt any, metric func(*trace.Trace) float64, ablate func(layer, head int) engine.Hook, opts ...PrefillOption) trace.Scores {
	if ablate == nil {
		panic(errors.New("nb.AblateHeadsWith: the ablation is nil: give a func(layer, head int) engine.Hook, such as m.HeadMeans(corpus).Ablate"))
	}
	return m.ablateHeads("AblateHeadsWith", prompt, metric, ablate, opts)
}
