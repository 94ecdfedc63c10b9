// Package model turns a GGUF file into what the prefill engine runs: the
// architecture's hyper-parameters, typed weights bound by name, and the
// tokenizer. It supports the llama (with Mixtral's experts too), qwen2,
// qwen3, qwen3moe, gpt2, gemma2, gemma3 and phi3 architectures.
package model

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

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
	// FreqFactors divides each rotated pair's frequency (Dim/2 values), as
	// ggml's rope does with the rope_freqs.weight tensor that llama.cpp
	// writes for Llama 3.1 and later; nil when the file has none.
	FreqFactors []float32
}

// Llama3FreqFactors are the frequency factors of Llama 3.1's RoPE scaling
// (rope_type "llama3"), computed as llama.cpp's converter writes them into
// rope_freqs.weight: wavelengths shorter than origContext/high keep their
// frequency, longer than origContext/low are divided by factor, and those
// between are interpolated.
func Llama3FreqFactors(dim int, theta, factor, low, high float64, origContext int) []float32 {
	out := make([]float32, dim/2)
	lowWavelen, highWavelen := float64(origContext)/low, float64(origContext)/high
	for i := range out {
		freq := 1 / math.Pow(theta, float64(2*i)/float64(dim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(factor)
		default:
			smooth := (float64(origContext)/wavelen - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}

// NormKind is how a block normalises the residual stream.
type NormKind int

const (
	// NormRMS is RMSNorm with a gain: x / rms(x) * g.
	NormRMS NormKind = iota
	// NormLayer is LayerNorm with a gain and a bias: (x - mean) / std * g + b.
	NormLayer
)

func (k NormKind) String() string {
	if k == NormLayer {
		return "LayerNorm"
	}
	return "RMSNorm"
}

// PosKind is how a model tells positions apart.
type PosKind int

const (
	// PosRope rotates queries and keys (RoPE).
	PosRope PosKind = iota
	// PosLearned adds a learned embedding per position to the token embedding.
	PosLearned
)

func (k PosKind) String() string {
	if k == PosLearned {
		return "learned positions"
	}
	return "RoPE"
}

// MLPKind is the shape of a block's MLP.
type MLPKind int

const (
	// MLPSwiGLU is down(silu(gate(x)) * up(x)).
	MLPSwiGLU MLPKind = iota
	// MLPGELU is down(gelu(up(x))), GELU with tanh as GPT-2 has it.
	MLPGELU
	// MLPGeGLU is down(gelu(gate(x)) * up(x)), Gemma's.
	MLPGeGLU
)

func (k MLPKind) String() string {
	switch k {
	case MLPGELU:
		return "GELU MLP"
	case MLPGeGLU:
		return "GeGLU MLP"
	}
	return "SwiGLU MLP"
}

// Gated reports whether the MLP has a gate projection beside up.
func (k MLPKind) Gated() bool { return k != MLPGELU }

// Config is an architecture's hyper-parameters.
type Config struct {
	Arch    string
	Name    string
	Layers  int
	DModel  int
	FFN     int
	Heads   int
	KVHeads int
	HeadDim int
	Vocab   int
	Context int
	NormEps float32
	Norm    NormKind
	Pos     PosKind
	MLP     MLPKind
	Rope    Rope // when Pos is PosRope
	// LocalRope is the RoPE of sliding-window layers where it differs from
	// Rope (gemma3: base 10000, unscaled); nil when it does not.
	LocalRope *Rope
	// LongRope is Phi-3's long-context RoPE (rope_factors_long.weight),
	// which a model whose Context is more than Rope.Scaling.OrigContext
	// uses at every position, as llama.cpp chooses it by its context; Rope
	// then has the short factors. nil for other models.
	LongRope *Rope
	QKVBias  bool // qwen2, gpt2
	QKNorm   bool // qwen3, gemma3: per-head RMSNorm on Q and K before RoPE
	Bias     bool // gpt2: the attention output and MLP projections have biases too
	FusedQKV bool // gpt2, phi3: one attn_qkv matrix, split into Q, K and V when loaded
	// FusedGateUp: phi3's ffn_up holds the gate's rows, then up's.
	FusedGateUp bool
	TiedEmbd    bool // output.weight absent: the LM head is token_embd
	// EmbedScale multiplies the token embedding (Gemma: sqrt(d_model)); 0 is 1.
	EmbedScale float32
	// PostNorms: the attention and MLP outputs are normalised again before
	// they join the residual stream (Gemma 2 and 3).
	PostNorms bool
	// AttnScale multiplies attention scores; 0 is 1/sqrt(HeadDim).
	AttnScale float32
	// AttnSoftcap and FinalSoftcap, when not 0, cap attention scores and
	// logits to (-cap, cap) with cap * tanh(x / cap) (Gemma 2).
	AttnSoftcap, FinalSoftcap float32
	// SlidingWindow is how many positions back a sliding-window layer's
	// queries see (itself included); SWAPattern n makes layers l with
	// l % n < n-1 sliding (llama.cpp's swa pattern). 0 is none.
	SlidingWindow, SWAPattern int
	// Experts is the number of MLP experts of a mixture-of-experts model
	// (0 for a dense one), ExpertsUsed how many each token is routed to,
	// ExpertFFN each expert's hidden width. The router's softmax weights of
	// a token's top ExpertsUsed experts are renormalised to sum to 1, as
	// Qwen3-MoE and Mixtral do.
	Experts, ExpertsUsed, ExpertFFN int
}

// MoE reports whether the MLP is a mixture of experts.
func (c *Config) MoE() bool { return c.Experts > 0 }

// Window is how many keys back layer's queries see, 0 for all before them.
func (c *Config) Window(layer int) int {
	if c.SWAPattern == 0 || layer%c.SWAPattern == c.SWAPattern-1 {
		return 0
	}
	return c.SlidingWindow
}

// RopeAt is the RoPE layer uses.
func (c *Config) RopeAt(layer int) *Rope {
	if c.LocalRope != nil && c.Window(layer) > 0 {
		return c.LocalRope
	}
	return &c.Rope
}

// QDim is the width of all query heads together.
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of all key (or value) heads together.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// Arch is what sets an architecture apart: the layer program and the
// loader read these, never the architecture's name.
type Arch struct {
	Rope      RopeMode
	Norm      NormKind
	Pos       PosKind
	MLP       MLPKind
	QKVBias   bool
	QKNorm    bool
	Bias      bool
	FusedQKV  bool
	FusedUp   bool // gate and up in one ffn_up tensor
	Gemma     bool // embedding times sqrt(d_model), post-norms, 27B-class query scale
	Softcaps  bool // reads attn_ and final_logit_softcapping
	SWA       int  // sliding-window pattern (llama.cpp's set_swa_pattern)
	LocalBase float64
}

var architectures = map[string]Arch{
	"llama":  {Rope: RopeAdjacent},
	"qwen2":  {Rope: RopeNeoX, QKVBias: true},
	"qwen3":  {Rope: RopeNeoX, QKNorm: true},
	"gpt2":   {Norm: NormLayer, Pos: PosLearned, MLP: MLPGELU, QKVBias: true, Bias: true, FusedQKV: true},
	"gemma2": {Rope: RopeNeoX, MLP: MLPGeGLU, Gemma: true, Softcaps: true, SWA: 2},
	"gemma3": {Rope: RopeNeoX, MLP: MLPGeGLU, Gemma: true, QKNorm: true, SWA: 6, LocalBase: 10000},
	"phi3":   {Rope: RopeNeoX, FusedQKV: true, FusedUp: true},
	// Experts come from the metadata (expert_count), so llama files with
	// experts (Mixtral) are mixtures too.
	"qwen3moe": {Rope: RopeNeoX, QKNorm: true},
}

// ArchOf is the architecture named by general.architecture, as data: what its
// layers have and how they are read.
func ArchOf(name string) (Arch, bool) {
	a, ok := architectures[name]
	return a, ok
}

// Architectures lists the supported general.architecture values.
func Architectures() []string {
	return []string{"llama", "qwen2", "qwen3", "qwen3moe", "gpt2", "gemma2", "gemma3", "phi3"}
}

// gemmaLargeLayers is the block count of the 27B Gemma of each generation,
// whose queries are scaled by 1/sqrt(d_model/heads) rather than
// 1/sqrt(head_dim), as llama.cpp recognises it.
var gemmaLargeLayers = map[string]int{"gemma2": 46, "gemma3": 62}

// ReadConfig reads the hyper-parameters from GGUF metadata.
func ReadConfig(f *gguf.File) (Config, error) {
	if f == nil {
		return Config{}, errors.New("model: no GGUF file (nil)")
	}
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, err
	}
	traits, ok := architectures[arch]
	if !ok {
		return Config{}, fmt.Errorf("model: architecture %q is not supported (supported: %s)", arch, strings.Join(Architectures(), ", "))
	}
	c := Config{Arch: arch, Norm: traits.Norm, Pos: traits.Pos, MLP: traits.MLP,
		QKVBias: traits.QKVBias, QKNorm: traits.QKNorm, Bias: traits.Bias, FusedQKV: traits.FusedQKV, FusedGateUp: traits.FusedUp}
	c.Name, _ = f.String("general.name")
	p := arch + "."
	need := func(key string, dst *int) {
		if err != nil {
			return
		}
		var v int
		if v, err = f.Int(p + key); err == nil {
			err = intInRange(p+key, v)
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
		default:
			err = intInRange(p+key, v)
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
	if v, e := f.Int(p + "attention.value_length"); e != nil && !errors.Is(e, gguf.ErrMissing) {
		return c, e
	} else if e == nil && v != c.HeadDim {
		return c, fmt.Errorf("model: %sattention.value_length %d differs from key_length %d, which Strata does not support", p, v, c.HeadDim)
	}
	if c.Heads%c.KVHeads != 0 {
		return c, fmt.Errorf("model: head_count %d is not a multiple of head_count_kv %d", c.Heads, c.KVHeads)
	}
	if c.Rope.Dim > c.HeadDim || c.Rope.Dim%2 != 0 {
		return c, fmt.Errorf("model: rope.dimension_count %d must be even and at most the head dimension %d", c.Rope.Dim, c.HeadDim)
	}
	c.Rope.Mode = traits.Rope
	if c.Rope.Theta, err = optFloat(f, p+"rope.freq_base", 10000, 1, 1e12); err != nil {
		return c, err
	}
	// Kernels compute in float32: the epsilon must stay a positive normal
	// float32 (1e-300 rounds to 0, 1e300 to +Inf), and one above 1 would
	// swamp the mean square it is added to.
	epsKey := p + "attention.layer_norm_rms_epsilon"
	if c.Norm == NormLayer {
		epsKey = p + "attention.layer_norm_epsilon"
	}
	eps, err := optFloat(f, epsKey, 1e-5, 1e-30, 1)
	if err != nil {
		return c, err
	}
	c.NormEps = float32(eps)
	if c.Rope.Scaling, err = readScaling(f, p, c.Context); err != nil {
		return c, err
	}
	if err := c.readExperts(f, p); err != nil {
		return c, err
	}
	if traits.Gemma {
		c.PostNorms = true
		c.EmbedScale = float32(math.Sqrt(float64(c.DModel)))
		if c.Layers == gemmaLargeLayers[arch] {
			c.AttnScale = float32(1 / math.Sqrt(float64(c.DModel/c.Heads)))
		}
	}
	if traits.Softcaps {
		var v float64
		if v, err = optFloat(f, p+"attn_logit_softcapping", 0, 0, 1e6); err != nil {
			return c, err
		}
		c.AttnSoftcap = float32(v)
		if v, err = optFloat(f, p+"final_logit_softcapping", 0, 0, 1e6); err != nil {
			return c, err
		}
		c.FinalSoftcap = float32(v)
	}
	if traits.SWA > 0 {
		c.SWAPattern = traits.SWA
		opt("attention.sliding_window", &c.SlidingWindow, 4096) // gemma2's, where llama.cpp defaults it
		if err != nil {
			return c, err
		}
		if traits.LocalBase > 0 {
			local := Rope{Mode: c.Rope.Mode, Dim: c.Rope.Dim, Theta: traits.LocalBase,
				Scaling: RopeScaling{Type: "none", Factor: 1, BetaFast: 32, BetaSlow: 1, AttnFactor: 1}}
			c.LocalRope = &local
		}
	}
	return c, nil
}

// maxExperts bounds expert_count: llama.cpp's limit.
const maxExperts = 512

// readExperts reads a mixture of experts' sizes; a file without
// expert_count is dense.
func (c *Config) readExperts(f *gguf.File, p string) error {
	n, err := f.Int(p + "expert_count")
	switch {
	case errors.Is(err, gguf.ErrMissing):
		return nil
	case err != nil:
		return err
	case n == 0:
		return nil
	case n < 0 || n > maxExperts:
		return fmt.Errorf("model: %sexpert_count = %d is out of range: want 0..%d", p, n, maxExperts)
	}
	used, err := f.Int(p + "expert_used_count")
	if err != nil {
		return fmt.Errorf("model: %sexpert_count is %d but %w", p, n, err)
	}
	if used < 1 || used > n {
		return fmt.Errorf("model: %sexpert_used_count = %d is out of range: want 1..%d (expert_count)", p, used, n)
	}
	c.Experts, c.ExpertsUsed, c.ExpertFFN = n, used, c.FFN
	// Qwen3-MoE gives the experts' width apart; Mixtral's is the FFN's.
	if v, err := f.Int(p + "expert_feed_forward_length"); err == nil {
		if err := intInRange(p+"expert_feed_forward_length", v); err != nil {
			return err
		}
		c.ExpertFFN = v
	} else if !errors.Is(err, gguf.ErrMissing) {
		return err
	}
	return nil
}

// MaxDim bounds every size read from metadata; the tensors' shapes bound
// them further when the model is loaded.
const MaxDim = 1 << 24

func intInRange(key string, v int) error {
	if v <= 0 || v > MaxDim {
		return fmt.Errorf("model: %s = %d is out of range: want 1..%d", key, v, MaxDim)
	}
	return nil
}

// optFloat reads a float key, def when absent; a present value must be a
// finite number in [lo, hi].
func optFloat(f *gguf.File, key string, def, lo, hi float64) (float64, error) {
	v, err := f.Float64(key)
	if errors.Is(err, gguf.ErrMissing) {
		return def, nil
	}
	if err != nil {
		return 0, err
	}
	return v, floatInRange(key, v, lo, hi)
}

func floatInRange(key string, v, lo, hi float64) error {
	if math.IsNaN(v) || v < lo || v > hi {
		// A float32 value reads as written (1e-05, not 9.99999974e-06).
		bits := 64
		if float64(float32(v)) == v {
			bits = 32
		}
		return fmt.Errorf("model: %s = %s is out of range: want a number in [%g, %g]", key, strconv.FormatFloat(v, 'g', -1, bits), lo, hi)
	}
	return nil
}

// Bounds of the RoPE scaling parameters: a factor is a context multiplier
// (real models use up to about 64), YaRN's betas are rotation counts.
const (
	minScaleFactor, maxScaleFactor = 1.0 / 64, 1024
	maxYarnBeta                    = 1e4
)

func readScaling(f *gguf.File, p string, ctx int) (RopeScaling, error) {
	s := RopeScaling{Type: "none", Factor: 1, BetaFast: 32, BetaSlow: 1, AttnFactor: 1}
	// Phi-3's long-context files carry an attention factor and the
	// original context without a scaling type.
	var err error
	if s.AttnFactor, err = optFloat(f, p+"rope.scaling.attn_factor", 1, 1e-3, 100); err != nil {
		return s, err
	}
	typ, err := f.String(p + "rope.scaling.type")
	switch {
	case errors.Is(err, gguf.ErrMissing):
		// Older files carry only rope.scale_linear.
		v, e := f.Float64(p + "rope.scale_linear")
		switch {
		case errors.Is(e, gguf.ErrMissing):
			return s, nil
		case e != nil:
			return s, e
		}
		if e := floatInRange(p+"rope.scale_linear", v, minScaleFactor, maxScaleFactor); e != nil {
			return s, e
		}
		if v == 1 {
			return s, nil
		}
		typ = "linear"
		s.Factor = v
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
	if s.Factor, err = optFloat(f, p+"rope.scaling.factor", s.Factor, minScaleFactor, maxScaleFactor); err != nil {
		return s, err
	}
	if typ == "yarn" {
		s.ExtFactor = 1
		s.OrigContext = ctx
		v, e := f.Int(p + "rope.scaling.original_context_length")
		switch {
		case errors.Is(e, gguf.ErrMissing):
		case e != nil:
			return s, e
		default:
			if e := intInRange(p+"rope.scaling.original_context_length", v); e != nil {
				return s, e
			}
			s.OrigContext = v
		}
		if s.BetaFast, err = optFloat(f, p+"rope.scaling.yarn_beta_fast", s.BetaFast, 1e-3, maxYarnBeta); err != nil {
			return s, err
		}
		if s.BetaSlow, err = optFloat(f, p+"rope.scaling.yarn_beta_slow", s.BetaSlow, 1e-3, maxYarnBeta); err != nil {
			return s, err
		}
	}
	return s, nil
}
