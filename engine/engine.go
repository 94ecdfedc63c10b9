package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
)

// Engine is a model made resident on a backend, or split over several
// (tiers). It is safe for concurrent use by several sessions.
type Engine struct {
	Model *model.Model
	// Backend is the first tier's backend (the only one, unsplit).
	Backend  backend.Backend
	tiers    []backend.Backend
	place    Placement
	embed    backend.Matrix // on the embedding tier
	posEmbed backend.Matrix // learned positions only
	output   backend.Matrix // on the head tier, as are the final norm's weights
	outNorm  backend.Tensor
	outBias  backend.Tensor // LayerNorm's bias
	layers   []layerWeights // each on its layer's home tier
	// traceBytes counts the device memory of live GPU traces.
	traceBytes atomic.Int64
}

type layerWeights struct {
	attnNorm, ffnNorm         backend.Tensor
	attnNormBias, ffnNormBias backend.Tensor
	attnPostNorm, ffnPostNorm backend.Tensor
	q, k, v, o                backend.Matrix
	qBias, kBias, vBias       backend.Tensor
	oBias                     backend.Tensor
	qNorm, kNorm              backend.Tensor
	gate, up, down            backend.Matrix
	upBias, downBias          backend.Tensor
	router                    backend.Matrix
	experts                   [3][]backend.Matrix // each expert's gate, up and down, by expert
}

// NewEngine uploads the model's weights to the backend once.
func NewEngine(m *model.Model, b backend.Backend) (*Engine, error) {
	if m == nil || b == nil {
		return nil, fmt.Errorf("engine: NewEngine needs a model and a backend (got model %v, backend %v)", m != nil, b != nil)
	}
	return NewTieredEngine(m, []backend.Backend{b}, OneTier(m.Layers))
}

// NewTieredEngine uploads each part of the model once, to the tier the
// placement gives it: tier i is tiers[i]. Tied embeddings whose embedding
// and head tiers differ are uploaded to both.
func NewTieredEngine(m *model.Model, tiers []backend.Backend, p Placement) (*Engine, error) {
	if m == nil || len(tiers) == 0 || slices.Contains(tiers, nil) {
		return nil, fmt.Errorf("engine: NewTieredEngine needs a model and a backend for each tier (got model %v, %d backends, a nil one %v)", m != nil, len(tiers), slices.Contains(tiers, nil))
	}
	if len(m.Blocks) != m.Layers || m.Embed == nil {
		return nil, fmt.Errorf("engine: model %q is not loaded: %d layers configured, %d bound (use model.Open or model.Load)", m.Name, m.Layers, len(m.Blocks))
	}
	if err := p.check(&m.Config, len(tiers)); err != nil {
		return nil, err
	}
	release, err := m.File.Hold() // the uploads read the weights where they are mapped
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	defer release()
	e := &Engine{Model: m, Backend: tiers[0], tiers: slices.Clone(tiers), place: p}
	e.place.Layers = slices.Clone(p.Layers)
	sts := make([]backend.Stream, len(tiers))
	for i, b := range tiers {
		sts[i] = b.NewStream()
		defer sts[i].Close()
	}
	failed := -1 // the tier that failed
	upload := func(tier int, w *model.Weight) backend.Matrix {
		if err != nil || w == nil {
			return nil
		}
		var x backend.Matrix
		if x, err = tiers[tier].Upload(w); err != nil {
			failed = tier
		}
		return x
	}
	vector := func(tier int, name string, v []float32) backend.Tensor {
		if err != nil || v == nil {
			return nil
		}
		var t backend.Tensor
		if t, err = sts[tier].Alloc(name, len(v)); err == nil {
			sts[tier].Write(t, 0, v)
		} else {
			failed = tier
		}
		return t
	}
	e.embed = upload(p.Embed, m.Embed)
	e.posEmbed = upload(p.Embed, m.PosEmbed)
	switch {
	case !m.TiedEmbd:
		e.output = upload(p.Head, m.Output)
	case p.Head == p.Embed:
		e.output = e.embed
	default:
		e.output = upload(p.Head, m.Embed)
	}
	e.outNorm = vector(p.Head, "output_norm", m.OutNorm)
	e.outBias = vector(p.Head, "output_norm.bias", m.OutNormBias)
	e.layers = make([]layerWeights, len(m.Blocks))
	for i := range m.Blocks {
		l, w, tier := &m.Blocks[i], &e.layers[i], p.Layers[i]
		name := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
		vec := func(s string, v []float32) backend.Tensor { return vector(tier, name(s), v) }
		up := func(w *model.Weight) backend.Matrix { return upload(tier, w) }
		w.attnNorm = vec("attn_norm", l.AttnNorm)
		w.ffnNorm = vec("ffn_norm", l.FFNNorm)
		w.attnNormBias = vec("attn_norm.bias", l.AttnNormBias)
		w.ffnNormBias = vec("ffn_norm.bias", l.FFNNormBias)
		w.attnPostNorm = vec("post_attention_norm", l.AttnPostNorm)
		w.ffnPostNorm = vec("post_ffw_norm", l.FFNPostNorm)
		w.oBias = vec("attn_output.bias", l.OBias)
		w.upBias = vec("ffn_up.bias", l.UpBias)
		w.downBias = vec("ffn_down.bias", l.DownBias)
		w.q, w.k, w.v, w.o = up(l.Q), up(l.K), up(l.V), up(l.O)
		w.qBias = vec("attn_q.bias", l.QBias)
		w.kBias = vec("attn_k.bias", l.KBias)
		w.vBias = vec("attn_v.bias", l.VBias)
		w.qNorm = vec("attn_q_norm", l.QNorm)
		w.kNorm = vec("attn_k_norm", l.KNorm)
		w.gate, w.up, w.down = up(l.Gate), up(l.Up), up(l.Down)
		w.router = up(l.Router)
		if len(l.Experts) > 0 && err == nil {
			var ws []*model.Weight
			for _, x := range l.Experts {
				ws = append(ws, x.Gate, x.Up, x.Down)
			}
			var ms []backend.Matrix
			if ms, err = tiers[tier].UploadGroup(ws); err == nil {
				for e := range l.Experts {
					for j := range w.experts {
						w.experts[j] = append(w.experts[j], ms[3*e+j])
					}
				}
			} else {
				failed = tier
			}
		}
	}
	for i := range sts {
		if err == nil {
			if err = sts[i].Sync(); err != nil {
				failed = i
			}
		}
	}
	if err != nil {
		if len(tiers) == 1 {
			return nil, fmt.Errorf("engine: uploading %s to %s: %w", m.Name, tiers[0].Name(), err)
		}
		return nil, fmt.Errorf("engine: uploading %s to tier %d (%s): %w", m.Name, failed, tiers[failed].Name(), err)
	}
	return e, nil
}

// Placement is where the engine's parts live: all on tier 0 unless it was
// made by NewTieredEngine.
func (e *Engine) Placement() Placement {
	if e == nil {
		return Placement{}
	}
	p := e.place
	p.Layers = slices.Clone(p.Layers)
	return p
}

// BackendName names the backend, or each tier's and the placement, as
// traces and benchmarks show it.
func (e *Engine) BackendName() string {
	if e == nil {
		return ""
	}
	if len(e.tiers) == 1 {
		return e.tiers[0].Name()
	}
	names := make([]string, len(e.tiers))
	for i, b := range e.tiers {
		names[i] = b.Name()
	}
	if slices.Equal(names[1:], names[:len(names)-1]) {
		return fmt.Sprintf("%d x %s (tiers %s)", len(names), names[0], e.place)
	}
	return fmt.Sprintf("%s (tiers %s)", strings.Join(names, " + "), e.place)
}

// Tiers are the backends the engine's parts live on, tier by tier.
func (e *Engine) Tiers() []backend.Backend {
	if e == nil {
		return nil
	}
	return slices.Clone(e.tiers)
}

// errNoEngine is the error of a call on an Engine NewEngine did not make.
var errNoEngine = errors.New("engine: nil or unbuilt *Engine (use NewEngine)")

func attnScale(c *model.Config) float32 {
	if c.AttnScale != 0 {
		return c.AttnScale
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}
