// Package model turns a GGUF file into what the prefill engine runs: the
// architecture's hyper-parameters, typed weights bound by name, and the
// tokenizer. It supports the llama, qwen2 and qwen3 architectures.
package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/stratalab/strata/gguf"
)

// RopeMode says which element pairs RoPE rotates.
type RopeMode int

const (
	// RopeAdjacent rotates (x[2i], x[2i+1]): ggml's NORM mode, used for llama.
	RopeAdjacent RopeMode = iota
	// RopeNeoX rotates (x[i], x[i+n/2]): split halves, used for qwen2 and qwen3.
	RopeNeoX
)

func (m RopeMode) String() string {
	if m == RopeNeoX {
		return "neox"
	}
	return "adjacent"
}

// RopeScaling is the context-extension scheme of a model, as ggml applies it.
type RopeScaling struct {
	Type        string  // "none", "linear" or "yarn"
	Factor      float64 // context multiplier; positions are divided by it (linear) or mixed (yarn)
	OrigContext int     // yarn: training context length
	BetaFast    float64 // yarn ramp bounds, ggml defaults 32 and 1
	BetaSlow    float64
	ExtFactor   float64 // yarn extrapolation mix, 1 for yarn
	AttnFactor  float64 // magnitude scale applied to cos and sin
}

// Rope holds everything a rotary embedding kernel needs.
type Rope struct {
	Mode    RopeMode
	Dim     int // rotated dimensions per head (<= head_dim)
	Theta   float64
	Scaling RopeScaling
}

// Config is an architecture's hyper-parameters.
type Config struct {
	Arch     string
	Name     string
	Layers   int
	DModel   int
	FFN      int
	Heads    int
	KVHeads  int
	HeadDim  int
	Vocab    int
	Context  int
	RMSEps   float32
	Rope     Rope
	QKVBias  bool // qwen2
	QKNorm   bool // qwen3: per-head RMSNorm on Q and K before RoPE
	TiedEmbd bool // output.weight absent: the LM head is token_embd
}

// QDim is the width of all query heads together.
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of all key (or value) heads together.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

type archTraits struct {
	rope    RopeMode
	qkvBias bool
	qkNorm  bool
}

var architectures = map[string]archTraits{
	"llama": {rope: RopeAdjacent},
	"qwen2": {rope: RopeNeoX, qkvBias: true},
	"qwen3": {rope: RopeNeoX, qkNorm: true},
}

// Architectures lists the supported general.architecture values.
func Architectures() []string { return []string{"llama", "qwen2", "qwen3"} }

// ReadConfig reads the hyper-parameters from GGUF metadata.
func ReadConfig(f *gguf.File) (Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, err
	}
	traits, ok := architectures[arch]
	if !ok {
		return Config{}, fmt.Errorf("model: architecture %q is not supported (supported: llama, qwen2, qwen3)", arch)
	}
	c := Config{Arch: arch, QKVBias: traits.qkvBias, QKNorm: traits.qkNorm}
	c.Name, _ = f.String("general.name")
	p := arch + "."
	need := func(key string, dst *int) {
		if err != nil {
			return
		}
		var v int
		if v, err = f.Int(p + key); err == nil {
			if v <= 0 || v > 1<<24 {
				err = fmt.Errorf("model: %s%s = %d is out of range", p, key, v)
			}
			*dst = v
		}
	}
	opt := func(key string, dst *int, def int) {
		if err != nil {
			return
		}
		v, e := f.Int(p + key)
		switch {
		case errors.Is(e, gguf.ErrMissing):
			*dst = def
		case e != nil:
			err = e
		case v <= 0 || v > 1<<24:
			err = fmt.Errorf("model: %s%s = %d is out of range", p, key, v)
		default:
			*dst = v
		}
	}
	need("block_count", &c.Layers)
	need("embedding_length", &c.DModel)
	need("feed_forward_length", &c.FFN)
	need("attention.head_count", &c.Heads)
	opt("attention.head_count_kv", &c.KVHeads, c.Heads)
	if err == nil && c.DModel%c.Heads != 0 {
		if _, e := f.Int(p + "attention.key_length"); e != nil {
			return c, fmt.Errorf("model: embedding_length %d is not divisible by head_count %d and %sattention.key_length is absent", c.DModel, c.Heads, p)
		}
	}
	if err == nil {
		opt("attention.key_length", &c.HeadDim, c.DModel/c.Heads)
	}
	opt("context_length", &c.Context, 2048)
	opt("rope.dimension_count", &c.Rope.Dim, c.HeadDim)
	if err != nil {
		return c, err
	}
	if v, e := f.Int(p + "attention.value_length"); e == nil && v != c.HeadDim {
		return c, fmt.Errorf("model: %sattention.value_length %d differs from key_length %d, which Strata does not support", p, v, c.HeadDim)
	}
	if c.Heads%c.KVHeads != 0 {
		return c, fmt.Errorf("model: head_count %d is not a multiple of head_count_kv %d", c.Heads, c.KVHeads)
	}
	if c.Rope.Dim > c.HeadDim || c.Rope.Dim%2 != 0 {
		return c, fmt.Errorf("model: rope.dimension_count %d must be even and at most the head dimension %d", c.Rope.Dim, c.HeadDim)
	}
	c.Rope.Mode = traits.rope
	if c.Rope.Theta, err = optFloat(f, p+"rope.freq_base", 10000); err != nil {
		return c, err
	}
	eps, err := optFloat(f, p+"attention.layer_norm_rms_epsilon", 1e-5)
	if err != nil {
		return c, err
	}
	c.RMSEps = float32(eps)
	if c.Rope.Scaling, err = readScaling(f, p, c.Context); err != nil {
		return c, err
	}
	return c, nil
}

func optFloat(f *gguf.File, key string, def float64) (float64, error) {
	v, err := f.Float64(key)
	if errors.Is(err, gguf.ErrMissing) {
		return def, nil
	}
	if err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v <= 0) {
		return 0, fmt.Errorf("model: %s = %v must be a positive finite number", key, v)
	}
	return v, err
}

func readScaling(f *gguf.File, p string, ctx int) (RopeScaling, error) {
	s := RopeScaling{Type: "none", Factor: 1, BetaFast: 32, BetaSlow: 1, AttnFactor: 1}
	typ, err := f.String(p + "rope.scaling.type")
	switch {
	case errors.Is(err, gguf.ErrMissing):
		// Older files carry only rope.scale_linear.
		if v, e := f.Float64(p + "rope.scale_linear"); e == nil && v != 1 {
			typ = "linear"
			s.Factor = v
		} else {
			return s, nil
		}
	case err != nil:
		return s, err
	}
	switch typ {
	case "none", "":
		return s, nil
	case "linear", "yarn":
	default:
		return s, fmt.Errorf("model: %srope.scaling.type %q is not supported (none, linear, yarn)", p, typ)
	}
	s.Type = typ
	if v, e := optFloat(f, p+"rope.scaling.factor", s.Factor); e != nil {
		return s, e
	} else {
		s.Factor = v
	}
	if typ == "yarn" {
		s.ExtFactor = 1
		s.OrigContext = ctx
		if v, e := f.Int(p + "rope.scaling.original_context_length"); e == nil && v > 0 {
			s.OrigContext = v
		}
		if v, e := optFloat(f, p+"rope.scaling.yarn_beta_fast", s.BetaFast); e == nil {
			s.BetaFast = v
		}
		if v, e := optFloat(f, p+"rope.scaling.yarn_beta_slow", s.BetaSlow); e == nil {
			s.BetaSlow = v
		}
	}
	return s, nil
}
