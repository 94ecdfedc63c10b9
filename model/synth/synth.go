package synth

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/tokenizer"
)

// Shape is a model geometry for generated models with random weights.
type Shape struct {
	Arch    string
	Layers  int
	DModel  int
	FFN     int
	Heads   int
	KVHeads int
	HeadDim int
	Vocab   int
	Context int
	Theta   float64
	// Llama3Rope writes rope_freqs.weight as llama.cpp's converter does for
	// Llama 3.1 (factor 8, low 1, high 4, original context 8192).
	Llama3Rope bool
	// Window is the sliding window of an architecture that has one.
	Window int
	// LinearRope, when not 0, writes linear RoPE scaling by this factor
	// (gemma3 applies it to its global layers only).
	LinearRope float64
	// LongRopeContext, when not 0, writes Phi-3's long and short RoPE
	// factors with this original context, and their attention factor.
	LongRopeContext int
	// Experts, when not 0, makes the MLP a mixture of this many experts
	// of width ExpertFFN, ExpertsUsed per token.
	Experts, ExpertsUsed, ExpertFFN int
}

// Shapes are the named geometries `strata gen` knows. Widths are multiples
// of 256 so that every block format, K-quants included, can store them.
var Shapes = map[string]Shape{
	"tiny-llama":    {Arch: "llama", Layers: 2, DModel: 256, FFN: 512, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 512, Context: 512, Theta: 10000},
	"tiny-gemma2":   {Arch: "gemma2", Layers: 2, DModel: 256, FFN: 512, Heads: 4, KVHeads: 2, HeadDim: 128, Vocab: 512, Context: 512, Theta: 10000, Window: 5},
	"tiny-gemma3":   {Arch: "gemma3", Layers: 6, DModel: 256, FFN: 512, Heads: 4, KVHeads: 1, HeadDim: 64, Vocab: 512, Context: 512, Theta: 1e6, Window: 5, LinearRope: 8},
	"tiny-qwen3moe": {Arch: "qwen3moe", Layers: 2, DModel: 256, FFN: 768, Heads: 8, KVHeads: 4, HeadDim: 32, Vocab: 512, Context: 512, Theta: 1e6, Experts: 8, ExpertsUsed: 2, ExpertFFN: 256},
	"tiny-mixtral":  {Arch: "llama", Layers: 2, DModel: 256, FFN: 512, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 512, Context: 512, Theta: 1e6, Experts: 4, ExpertsUsed: 2, ExpertFFN: 512},
	"tiny-phi3":     {Arch: "phi3", Layers: 2, DModel: 256, FFN: 512, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 512, Context: 512, Theta: 10000, LongRopeContext: 64},
	"tiny-gpt2":     {Arch: "gpt2", Layers: 2, DModel: 256, FFN: 1024, Heads: 4, KVHeads: 4, HeadDim: 64, Vocab: 512, Context: 512},
	"tiny-llama3":   {Arch: "llama", Layers: 2, DModel: 256, FFN: 512, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 512, Context: 512, Theta: 5e5, Llama3Rope: true},
	"tiny-qwen2":    {Arch: "qwen2", Layers: 2, DModel: 256, FFN: 512, Heads: 8, KVHeads: 2, HeadDim: 32, Vocab: 512, Context: 512, Theta: 1e6},
	"tiny-qwen3":    {Arch: "qwen3", Layers: 4, DModel: 256, FFN: 768, Heads: 8, KVHeads: 4, HeadDim: 32, Vocab: 2048, Context: 512, Theta: 1e6},
	"bonsai-1.7b":   {Arch: "qwen3", Layers: 28, DModel: 2048, FFN: 6144, Heads: 16, KVHeads: 8, HeadDim: 128, Vocab: 151936, Context: 32768, Theta: 1e6},
	"bonsai-4b":     {Arch: "qwen3", Layers: 36, DModel: 2560, FFN: 9728, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Context: 32768, Theta: 1e6},
	// Qwen3-30B-A3B's geometry: 128 experts, 8 per token.
	"qwen3moe-30b-a3b": {Arch: "qwen3moe", Layers: 48, DModel: 2048, FFN: 6144, Heads: 32, KVHeads: 4, HeadDim: 128, Vocab: 151936, Context: 32768, Theta: 1e6, Experts: 128, ExpertsUsed: 8, ExpertFFN: 768},
	"bonsai-8b":        {Arch: "qwen3", Layers: 36, DModel: 4096, FFN: 12288, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Context: 32768, Theta: 1e6},
}

// ShapeNames lists Shapes' keys in order.
func ShapeNames() []string {
	var names []string
	for n := range Shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Generate builds a GGUF model of the given shape whose matrices have
// random weights stored in typ (norms stay F32), deterministic in seed. The
// tokenizer is byte-level with no merges, padded with unused tokens.
func Generate(s Shape, typ gguf.Type, seed uint64) (*gguf.Writer, error) {
	return GenerateMix(s, Uniform(typ), seed)
}

// A Mix is the types a generated file's matrices take: one for all
// (Uniform), or a recipe of llama.cpp's quantizer such as Q4_K_M.
type Mix struct {
	Name   string
	Base   gguf.Type   // the type of every matrix the recipe does not name
	Others []gguf.Type // the types it names
	// FileType is llama.cpp's general.file_type for the recipe (0: none
	// written).
	FileType uint32
	// typeOf is a matrix's type by its kind (the tensor name after
	// "blk.N."), its layer, the shape and whether the LM head is the
	// embedding; nil: Base for all.
	typeOf func(kind string, layer int, s Shape, tied bool) gguf.Type
}

// Uniform is the mix of one type.
func Uniform(t gguf.Type) Mix { return Mix{Name: t.String(), Base: t} }

// Mixes are llama.cpp's K-quant file types, as its quantizer
// (llama_tensor_get_type) gives a model without an importance matrix:
// Q4_K_M keeps Q4_K but for the LM head (the embedding where the two are
// one), and attn_v and ffn_down in the first and last eighth of the layers
// and every third between, in Q6_K (a fused QKV in Q5_K); Q5_K_M is the
// same on Q5_K (a fused QKV in Q6_K). A mixture's router and learned
// positions stay float; with 8 experts attn_k and attn_v are Q8_0 and
// attn_output Q5_K.
var Mixes = map[string]Mix{
	"Q4_K_M": kMix("Q4_K_M", gguf.Q4_K, gguf.Q5_K, 15),
	"Q5_K_M": kMix("Q5_K_M", gguf.Q5_K, gguf.Q6_K, 17),
}

// kMix is a _K_M recipe on base, with a fused QKV in qkv.
func kMix(name string, base, qkv gguf.Type, fileType uint32) Mix {
	return Mix{Name: name, Base: base, Others: []gguf.Type{gguf.Q5_K, gguf.Q6_K, gguf.Q8_0, gguf.F32}, FileType: fileType,
		typeOf: func(kind string, layer int, s Shape, tied bool) gguf.Type {
			moreBits := layer < s.Layers/8 || layer >= 7*s.Layers/8 || (layer-s.Layers/8)%3 == 2
			eight := s.Experts == 8
			switch {
			case kind == "ffn_gate_inp.weight" || kind == "position_embd.weight":
				return gguf.F32
			case kind == "output.weight" || tied && kind == "token_embd.weight":
				return gguf.Q6_K
			case kind == "attn_qkv.weight":
				return qkv
			case eight && (kind == "attn_k.weight" || kind == "attn_v.weight"):
				return gguf.Q8_0
			case eight && kind == "attn_output.weight":
				return gguf.Q5_K
			case (kind == "attn_v.weight" || kind == "ffn_down.weight" || kind == "ffn_down_exps.weight") && moreBits:
				return gguf.Q6_K
			}
			return base
		}}
}

// MixOf is the mix a file says it is (general.file_type), among Mixes.
func MixOf(f *gguf.File) (Mix, bool) {
	v, err := f.Uint32("general.file_type")
	if err != nil {
		return Mix{}, false
	}
	for _, m := range Mixes {
		if m.FileType == v {
			return m, true
		}
	}
	return Mix{}, false
}

// ParseMix reads a type name (gguf.ParseType's) or a mix's (Mixes).
func ParseMix(name string) (Mix, error) {
	if m, ok := Mixes[strings.ToUpper(name)]; ok {
		return m, nil
	}
	t, err := gguf.ParseType(name)
	if err != nil {
		return Mix{}, fmt.Errorf("unknown type %q: want %s", name, TypeChoices())
	}
	return Uniform(t), nil
}

// TypeChoices names what ParseMix reads: the tensor types a file can be
// generated in, and the mixes.
func TypeChoices() string {
	var types []string
	for _, t := range quant.Supported() {
		types = append(types, t.String())
	}
	return fmt.Sprintf("a tensor type (%s) or a mix of llama.cpp's quantizer (%s)",
		strings.Join(types, ", "), strings.Join(slices.Sorted(maps.Keys(Mixes)), ", "))
}

// GenerateMix is Generate with the types of mix.
func GenerateMix(s Shape, mix Mix, seed uint64) (*gguf.Writer, error) {
	typ := mix.Base
	mixTypes := append([]gguf.Type{typ}, mix.Others...)
	byType := map[gguf.Type]*quant.Format{}
	for _, t := range mixTypes {
		f, err := quant.For(t)
		if err != nil {
			return nil, err
		}
		byType[t] = f
	}
	traits, ok := model.ArchOf(s.Arch)
	if !ok {
		return nil, fmt.Errorf("model: cannot generate architecture %q", s.Arch)
	}
	tied := traits.Gemma // Gemma's LM head is its embedding
	// formatOf is the format of a matrix of the kind in layer (-1: none),
	// one of the mix's types.
	formatOf := func(kind string, layer int) *quant.Format {
		if mix.typeOf == nil {
			return byType[typ]
		}
		return byType[mix.typeOf(kind, layer, s, tied)]
	}
	// The same check model.Load makes: a file it would refuse is not made.
	if s.Experts > 0 && typ == gguf.TQ2_0_G128 {
		return nil, fmt.Errorf("model: a mixture's expert tensors in %s are not supported, so the model would not load: choose another type", typ)
	}
	// Sizes become uint32 metadata: check them before they can wrap.
	for _, d := range []struct {
		name string
		v    int
	}{{"Layers", s.Layers}, {"DModel", s.DModel}, {"FFN", s.FFN}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads},
		{"HeadDim", s.HeadDim}, {"Vocab", s.Vocab}, {"Context", s.Context}} {
		if d.v <= 0 || d.v > model.MaxDim {
			return nil, fmt.Errorf("model: shape %s = %d is out of range: want 1..%d", d.name, d.v, model.MaxDim)
		}
	}
	if s.Heads%s.KVHeads != 0 {
		return nil, fmt.Errorf("model: shape Heads %d is not a multiple of KVHeads %d", s.Heads, s.KVHeads)
	}
	// GPT-2's metadata has no KV head count or head width to say otherwise.
	if traits.Pos == model.PosLearned && (s.KVHeads != s.Heads || s.HeadDim*s.Heads != s.DModel) {
		return nil, fmt.Errorf("model: %s has one K and V head per query head of width DModel/Heads (shape has %d heads, %d KV heads, head width %d, d_model %d)", s.Arch, s.Heads, s.KVHeads, s.HeadDim, s.DModel)
	}
	if traits.Pos == model.PosRope {
		if !(s.Theta >= 1 && s.Theta <= 1e12) {
			return nil, fmt.Errorf("model: shape Theta = %g is out of range: want a number in [1, 1e12]", s.Theta)
		}
	}
	for _, t := range mixTypes {
		f := byType[t]
		for _, w := range []int{s.DModel, s.FFN, s.Heads * s.HeadDim, max(s.ExpertFFN, f.BlockSize)} {
			if w%f.BlockSize != 0 {
				return nil, fmt.Errorf("model: width %d is not a multiple of %s's %d-element blocks", w, f.Type, f.BlockSize)
			}
		}
	}
	w := gguf.NewWriter()
	p := s.Arch + "."
	var control []string
	if s.Arch == "phi3" {
		// llama.cpp looks these up by name in a model named phi3 (to set
		// their attributes), and fails to load one without them.
		control = []string{"<unk>", "<s>", "</s>"}
	}
	if s.Vocab < 257+len(control) {
		return nil, fmt.Errorf("model: vocabulary of %d cannot hold the 256 byte tokens and %d control tokens", s.Vocab, 1+len(control))
	}
	tokens, types := byteVocab(s.Vocab, control...)
	type kv struct {
		k string
		v any
	}
	kvs := []kv{
		{"general.architecture", s.Arch},
		{"general.name", fmt.Sprintf("random %s %s (seed %d)", s.Arch, mix.Name, seed)},
		{p + "block_count", uint32(s.Layers)},
		{p + "context_length", uint32(s.Context)},
		{p + "embedding_length", uint32(s.DModel)},
		{p + "feed_forward_length", uint32(s.FFN)},
		{p + "attention.head_count", uint32(s.Heads)},
	}
	if mix.FileType != 0 {
		kvs = append(kvs, kv{"general.file_type", mix.FileType})
	}
	// The keys llama.cpp's converter writes for the family.
	pre := "qwen2"
	if traits.Norm == model.NormLayer {
		pre = "gpt-2" // llama.cpp writes and expects this spelling, not "gpt2"
		kvs = append(kvs, kv{p + "attention.layer_norm_epsilon", float32(1e-5)})
	} else {
		kvs = append(kvs, kv{p + "attention.layer_norm_rms_epsilon", float32(1e-6)})
	}
	if traits.Pos == model.PosRope {
		kvs = append(kvs,
			kv{p + "attention.head_count_kv", uint32(s.KVHeads)},
			kv{p + "attention.key_length", uint32(s.HeadDim)},
			kv{p + "attention.value_length", uint32(s.HeadDim)},
			kv{p + "rope.freq_base", float32(s.Theta)})
	}
	if traits.SWA > 0 {
		kvs = append(kvs, kv{p + "attention.sliding_window", uint32(s.Window)})
	}
	if s.Experts != 0 {
		kvs = append(kvs, kv{p + "expert_count", uint32(s.Experts)}, kv{p + "expert_used_count", uint32(s.ExpertsUsed)})
		if s.ExpertFFN != s.FFN { // Mixtral's experts are the FFN's width, with no key of their own
			kvs = append(kvs, kv{p + "expert_feed_forward_length", uint32(s.ExpertFFN)})
		}
	}
	if s.LongRopeContext != 0 {
		kvs = append(kvs, kv{p + "rope.scaling.original_context_length", uint32(s.LongRopeContext)},
			kv{p + "rope.scaling.attn_factor", float32(longRopeAttnFactor(s.Context, s.LongRopeContext))})
	}
	if s.LinearRope != 0 {
		kvs = append(kvs, kv{p + "rope.scaling.type", "linear"}, kv{p + "rope.scaling.factor", float32(s.LinearRope)})
	}
	if traits.Softcaps { // Gemma 2's
		kvs = append(kvs, kv{p + "attn_logit_softcapping", float32(50)}, kv{p + "final_logit_softcapping", float32(30)})
	}
	kvs = append(kvs,
		kv{"tokenizer.ggml.model", "gpt2"},
		kv{"tokenizer.ggml.pre", pre},
		kv{"tokenizer.ggml.tokens", tokens},
		kv{"tokenizer.ggml.token_type", types},
		kv{"tokenizer.ggml.merges", []string{}},
		kv{"tokenizer.ggml.eos_token_id", uint32(256)})
	for _, kv := range kvs {
		if err := w.AddKV(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	g := generator{w: w, seed: seed}
	g.matrix("token_embd.weight", formatOf("token_embd.weight", -1), s.DModel, s.Vocab)
	if traits.Pos == model.PosLearned {
		g.matrix("position_embd.weight", formatOf("position_embd.weight", -1), s.DModel, s.Context)
	}
	norm := func(name string, n int) {
		g.gain(name+".weight", n)
		if traits.Norm == model.NormLayer {
			g.bias(name+".bias", n)
		}
	}
	for l := 0; l < s.Layers; l++ {
		n := func(x string) string { return fmt.Sprintf("blk.%d.%s", l, x) }
		q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
		norm(n("attn_norm"), s.DModel)
		if traits.FusedQKV {
			g.matrix(n("attn_qkv.weight"), formatOf("attn_qkv.weight", l), s.DModel, q+2*kv)
			if traits.QKVBias {
				g.bias(n("attn_qkv.bias"), q+2*kv)
			}
		} else {
			g.matrix(n("attn_q.weight"), formatOf("attn_q.weight", l), s.DModel, q)
			g.matrix(n("attn_k.weight"), formatOf("attn_k.weight", l), s.DModel, kv)
			g.matrix(n("attn_v.weight"), formatOf("attn_v.weight", l), s.DModel, kv)
			if traits.QKVBias {
				g.bias(n("attn_q.bias"), q)
				g.bias(n("attn_k.bias"), kv)
				g.bias(n("attn_v.bias"), kv)
			}
		}
		if traits.QKNorm {
			g.gain(n("attn_q_norm.weight"), s.HeadDim)
			g.gain(n("attn_k_norm.weight"), s.HeadDim)
		}
		g.matrix(n("attn_output.weight"), formatOf("attn_output.weight", l), q, s.DModel)
		if traits.Gemma {
			g.gain(n("post_attention_norm.weight"), s.DModel)
			g.gain(n("post_ffw_norm.weight"), s.DModel)
		}
		norm(n("ffn_norm"), s.DModel)
		switch {
		case s.Experts != 0:
			g.matrix(n("ffn_gate_inp.weight"), formatOf("ffn_gate_inp.weight", l), s.DModel, s.Experts)
			g.experts(n("ffn_gate_exps.weight"), formatOf("ffn_gate_exps.weight", l), s.DModel, s.ExpertFFN, s.Experts)
			g.experts(n("ffn_up_exps.weight"), formatOf("ffn_up_exps.weight", l), s.DModel, s.ExpertFFN, s.Experts)
			g.experts(n("ffn_down_exps.weight"), formatOf("ffn_down_exps.weight", l), s.ExpertFFN, s.DModel, s.Experts)
		case traits.FusedUp:
			g.matrix(n("ffn_up.weight"), formatOf("ffn_up.weight", l), s.DModel, 2*s.FFN)
		case traits.MLP.Gated():
			g.matrix(n("ffn_gate.weight"), formatOf("ffn_gate.weight", l), s.DModel, s.FFN)
			g.matrix(n("ffn_up.weight"), formatOf("ffn_up.weight", l), s.DModel, s.FFN)
		default:
			g.matrix(n("ffn_up.weight"), formatOf("ffn_up.weight", l), s.DModel, s.FFN)
		}
		if s.Experts == 0 {
			g.matrix(n("ffn_down.weight"), formatOf("ffn_down.weight", l), s.FFN, s.DModel)
		}
		if traits.Bias {
			g.bias(n("attn_output.bias"), s.DModel)
			g.bias(n("ffn_up.bias"), s.FFN)
			g.bias(n("ffn_down.bias"), s.DModel)
		}
	}
	norm("output_norm", s.DModel)
	if !tied {
		g.matrix("output.weight", formatOf("output.weight", -1), s.DModel, s.Vocab)
	}
	if s.LongRopeContext != 0 && g.err == nil {
		// Factors growing from 1 to the context ratio over the pairs, as
		// Phi-3's long factors do; the short ones stay near 1.
		half := s.HeadDim / 2
		long, short := make([]float32, half), make([]float32, half)
		ratio := float64(s.Context) / float64(s.LongRopeContext)
		for i := range half {
			f := float64(i) / float64(half-1)
			long[i] = float32(math.Pow(ratio, f))
			short[i] = float32(1 + 0.1*f)
		}
		g.err = w.AddTensor(model.RopeLongTensor, gguf.F32, []int64{int64(half)}, f32bytes(long))
		if g.err == nil {
			g.err = w.AddTensor(model.RopeShortTensor, gguf.F32, []int64{int64(half)}, f32bytes(short))
		}
	}
	if s.Llama3Rope && g.err == nil {
		g.err = w.AddTensor(model.RopeFreqsTensor, gguf.F32, []int64{int64(s.HeadDim / 2)}, f32bytes(model.Llama3FreqFactors(s.HeadDim, s.Theta, 8, 1, 4, 8192)))
	}
	return w, g.err
}

// longRopeAttnFactor is Phi-3's LongRoPE magnitude scale for a context
// stretched from orig to ctx, as HuggingFace computes it and llama.cpp's
// converter writes it: sqrt(1 + ln(ctx/orig) / ln(orig)).
func longRopeAttnFactor(ctx, orig int) float64 {
	scale := float64(ctx) / float64(orig)
	if scale <= 1 {
		return 1
	}
	return math.Sqrt(1 + math.Log(scale)/math.Log(float64(orig)))
}

// byteVocab is a byte-level vocabulary: the 256 byte tokens, an end token
// and the control tokens given, then unused fillers up to n.
func byteVocab(n int, control ...string) ([]string, []int32) {
	tokens := append([]string(nil), tokenizer.ByteTokens()...)
	types := make([]int32, n)
	for i := range types {
		types[i] = 1
	}
	for _, c := range append([]string{"<|endoftext|>"}, control...) {
		types[len(tokens)] = 3
		tokens = append(tokens, c)
	}
	for i := len(tokens); i < n; i++ {
		tokens = append(tokens, fmt.Sprintf("<|unused_%d|>", i))
		types[i] = 5
	}
	return tokens, types
}

type generator struct {
	w       *gguf.Writer
	seed    uint64
	tensors uint64
	err     error
}

// rng is the random stream of chunk of the tensor numbered tensor.
func (g *generator) rng(tensor, chunk uint64) *rand.Rand {
	return rand.New(rand.NewPCG(g.seed, tensor<<32|chunk))
}

// matrix adds a [rows, cols] weight (ggml dims [cols, rows]) with entries
// uniform in ±sqrt(3/cols), so each output has unit variance for unit inputs.
// Its bytes are made as the file is written, so that generating a model
// holds one tensor at a time.
func (g *generator) matrix(name string, f *quant.Format, cols, rows int) {
	g.randomRows(name, f, []int64{int64(cols), int64(rows)}, cols, rows, 64)
}

// experts adds n expert matrices of [rows, cols] as one tensor of dims
// [cols, rows, n], made as the file is written like matrix's.
func (g *generator) experts(name string, f *quant.Format, cols, rows, n int) {
	g.randomRows(name, f, []int64{int64(cols), int64(rows), int64(n)}, cols, n*rows, rows)
}

// randomRows adds a tensor of total rows of cols entries uniform in
// ±sqrt(3/cols), made in parallel in groups of group rows, each group from
// its own random stream so that the bytes do not depend on the schedule.
func (g *generator) randomRows(name string, f *quant.Format, dims []int64, cols, total, group int) {
	if g.err != nil {
		return
	}
	g.tensors++
	tensor := g.tensors
	g.err = g.w.AddTensorFunc(name, f.Type, dims, func(out []byte) error {
		rowBytes := cols / f.BlockSize * f.BlockBytes
		limit := float32(math.Sqrt(3 / float64(cols)))
		var wg sync.WaitGroup
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		for c := range (total + group - 1) / group {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				r := g.rng(tensor, uint64(c))
				buf := make([]float32, cols)
				for row := c * group; row < min((c+1)*group, total); row++ {
					for i := range buf {
						buf[i] = (2*r.Float32() - 1) * limit
					}
					f.Quantize(out[row*rowBytes:(row+1)*rowBytes], buf)
				}
			})
		}
		wg.Wait()
		return nil
	})
}

// gain adds a norm weight near 1.
func (g *generator) gain(name string, n int) { g.vector(name, n, 1, 0.1) }

// bias adds a small bias.
func (g *generator) bias(name string, n int) { g.vector(name, n, 0, 0.1) }

func (g *generator) vector(name string, n int, center, spread float32) {
	if g.err != nil {
		return
	}
	g.tensors++
	r := g.rng(g.tensors, 0)
	v := make([]float32, n)
	for i := range v {
		v[i] = center + (2*r.Float32()-1)*spread
	}
	g.err = g.w.AddTensor(name, gguf.F32, []int64{int64(n)}, f32bytes(v))
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// Random generates a model like Generate and loads it from memory.
func Random(s Shape, typ gguf.Type, seed uint64) (*model.Model, error) {
	return RandomMix(s, Uniform(typ), seed)
}

// RandomMix is Random with the types of mix.
func RandomMix(s Shape, mix Mix, seed uint64) (*model.Model, error) {
	typ := mix.Name
	w, err := GenerateMix(s, mix, seed)
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, w.Size())) // the one copy of the weights
	if _, err := w.WriteTo(buf); err != nil {
		return nil, err
	}
	f, err := gguf.Parse(buf.Bytes(), fmt.Sprintf("random %s %s", s.Arch, typ))
	if err != nil {
		return nil, err
	}
	return model.Load(f)
}
