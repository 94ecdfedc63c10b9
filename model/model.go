package model

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model/tokenizer"
)

// Weight is a matrix as stored in the file: Rows output features of Cols
// inputs each, packed in Format. Data aliases the file's mapping.
type Weight struct {
	Name   string
	Rows   int
	Cols   int
	Format *quant.Format
	Data   []byte
}

// Type is the weight's storage type.
func (w *Weight) Type() gguf.Type { return w.Format.Type }

// Layer holds one transformer block's weights. Norm gains and biases are
// decoded to float32; matrices stay packed. A bias the architecture does
// not have is nil.
type Layer struct {
	AttnNorm, FFNNorm         []float32
	AttnNormBias, FFNNormBias []float32 // LayerNorm only
	AttnPostNorm, FFNPostNorm []float32 // Gemma's norms of each block's outputs
	Q, K, V, O                *Weight
	QBias, KBias, VBias       []float32 // qwen2, gpt2
	OBias                     []float32 // gpt2
	QNorm, KNorm              []float32 // qwen3 only, length HeadDim
	Gate, Up, Down            *Weight   // Gate only for a gated MLP; none for experts
	UpBias, DownBias          []float32 // gpt2
	// Router scores the experts of a mixture, [Experts rows, DModel cols];
	// Experts are their MLPs, each a slice of the file's expert tensors.
	Router  *Weight
	Experts []Expert
}

// Expert is one expert's MLP of a mixture: SwiGLU of width ExpertFFN.
type Expert struct {
	Gate, Up, Down *Weight
}

// Model is a loaded model: configuration, weights and tokenizer.
type Model struct {
	Config
	Embed       *Weight // [Vocab rows, DModel cols]
	PosEmbed    *Weight // [Context rows, DModel cols]; learned positions only
	Blocks      []Layer
	OutNorm     []float32
	OutNormBias []float32 // LayerNorm only
	Output      *Weight   // LM head; the same as Embed when TiedEmbd
	Tok         *tokenizer.Tokenizer
	File        *gguf.File
}

// Open maps and loads a GGUF model file.
func Open(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := Load(f)
	if err != nil {
		f.Close()
		if strings.Contains(err.Error(), path) { // the file's own errors name it
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Close releases the file mapping: at once, or, while an engine's call on
// another goroutine reads the weights, as that call ends (gguf.File.Hold).
// Later engine calls fail with gguf.ErrClosed; the weights' Data must not
// be read afterwards.
func (m *Model) Close() error {
	if m == nil {
		return nil
	}
	return m.File.Close()
}

// Load binds a parsed GGUF file's tensors to a model.
func Load(f *gguf.File) (*Model, error) {
	if f == nil {
		return nil, errors.New("model: no GGUF file (nil)")
	}
	c, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	m := &Model{File: f}
	b := binder{f: f}
	m.Embed = b.matrix("token_embd.weight", c.DModel, -1)
	if m.Embed != nil {
		c.Vocab = m.Embed.Rows
	}
	m.OutNorm = b.vector("output_norm.weight", c.DModel)
	if c.Norm == NormLayer {
		m.OutNormBias = b.vector("output_norm.bias", c.DModel)
	}
	if c.Pos == PosLearned {
		m.PosEmbed = b.matrix("position_embd.weight", c.DModel, -1)
		if m.PosEmbed != nil && m.PosEmbed.Rows < c.Context {
			return nil, fmt.Errorf("model: tensor position_embd.weight has %d positions, fewer than %s.context_length %d", m.PosEmbed.Rows, c.Arch, c.Context)
		}
	}
	if _, ok := f.Tensor("output.weight"); ok {
		m.Output = b.matrix("output.weight", c.DModel, c.Vocab)
	} else {
		c.TiedEmbd = true
		m.Output = m.Embed
	}
	// The block count is metadata: check the file holds that many blocks
	// before sizing anything by it, so a crafted count costs nothing.
	if need := int64(c.Layers) * c.tensorsPerBlock(); need > int64(len(f.Tensors)) {
		return nil, fmt.Errorf("model: %s.block_count = %d needs at least %d tensors, but the file has %d", c.Arch, c.Layers, need, len(f.Tensors))
	}
	if last := fmt.Sprintf("blk.%d.attn_norm.weight", c.Layers-1); b.err == nil {
		if _, ok := f.Tensor(last); !ok {
			return nil, fmt.Errorf("model: %s.block_count = %d but tensor %s is missing", c.Arch, c.Layers, last)
		}
	}
	// Fewer blocks than the file holds ran a truncated model silently.
	for _, t := range f.Tensors {
		rest, ok := strings.CutPrefix(t.Name, "blk.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); err == nil && i >= c.Layers {
			return nil, fmt.Errorf("model: %s.block_count = %d but the file holds tensor %s, of block %d", c.Arch, c.Layers, t.Name, i)
		}
	}
	m.Blocks = make([]Layer, c.Layers)
	for i := range m.Blocks {
		if b.err != nil {
			break
		}
		n := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
		l := &m.Blocks[i]
		l.AttnNorm = b.vector(n("attn_norm.weight"), c.DModel)
		l.FFNNorm = b.vector(n("ffn_norm.weight"), c.DModel)
		if c.Norm == NormLayer {
			l.AttnNormBias = b.vector(n("attn_norm.bias"), c.DModel)
			l.FFNNormBias = b.vector(n("ffn_norm.bias"), c.DModel)
		}
		if c.PostNorms {
			l.AttnPostNorm = b.vector(n("post_attention_norm.weight"), c.DModel)
			l.FFNPostNorm = b.vector(n("post_ffw_norm.weight"), c.DModel)
		}
		// Phi-3 files have the fused matrix or, from some converters, the
		// three; llama.cpp takes either.
		_, fused := f.Tensor(n("attn_qkv.weight"))
		_, split := f.Tensor(n("attn_q.weight"))
		if c.FusedQKV && (fused || !split) {
			qkv := b.matrix(n("attn_qkv.weight"), c.DModel, c.QDim()+2*c.KVDim())
			l.Q, l.K, l.V = splitRows(qkv, c.QDim(), c.KVDim(), c.KVDim())
		} else {
			l.Q = b.matrix(n("attn_q.weight"), c.DModel, c.QDim())
			l.K = b.matrix(n("attn_k.weight"), c.DModel, c.KVDim())
			l.V = b.matrix(n("attn_v.weight"), c.DModel, c.KVDim())
		}
		l.O = b.matrix(n("attn_output.weight"), c.QDim(), c.DModel)
		switch {
		case c.QKVBias && c.FusedQKV:
			if v := b.vector(n("attn_qkv.bias"), c.QDim()+2*c.KVDim()); v != nil {
				l.QBias, l.KBias, l.VBias = v[:c.QDim()], v[c.QDim():c.QDim()+c.KVDim()], v[c.QDim()+c.KVDim():]
			}
		case c.QKVBias:
			l.QBias = b.vector(n("attn_q.bias"), c.QDim())
			l.KBias = b.vector(n("attn_k.bias"), c.KVDim())
			l.VBias = b.vector(n("attn_v.bias"), c.KVDim())
		}
		if c.QKNorm {
			l.QNorm = b.vector(n("attn_q_norm.weight"), c.HeadDim)
			l.KNorm = b.vector(n("attn_k_norm.weight"), c.HeadDim)
		}
		switch {
		case c.MoE():
			l.Router = b.matrix(n("ffn_gate_inp.weight"), c.DModel, c.Experts)
			gates := b.experts(n("ffn_gate_exps.weight"), c.DModel, c.ExpertFFN, c.Experts)
			ups := b.experts(n("ffn_up_exps.weight"), c.DModel, c.ExpertFFN, c.Experts)
			downs := b.experts(n("ffn_down_exps.weight"), c.ExpertFFN, c.DModel, c.Experts)
			if b.err == nil {
				l.Experts = make([]Expert, c.Experts)
				for e := range l.Experts {
					l.Experts[e] = Expert{Gate: gates[e], Up: ups[e], Down: downs[e]}
				}
			}
		case c.FusedGateUp:
			both := b.matrix(n("ffn_up.weight"), c.DModel, 2*c.FFN)
			l.Gate, l.Up, _ = splitRows(both, c.FFN, c.FFN)
		case c.MLP.Gated():
			l.Gate = b.matrix(n("ffn_gate.weight"), c.DModel, c.FFN)
			l.Up = b.matrix(n("ffn_up.weight"), c.DModel, c.FFN)
		default:
			l.Up = b.matrix(n("ffn_up.weight"), c.DModel, c.FFN)
		}
		if !c.MoE() {
			l.Down = b.matrix(n("ffn_down.weight"), c.FFN, c.DModel)
		}
		if c.Bias {
			l.OBias = b.vector(n("attn_output.bias"), c.DModel)
			l.UpBias = b.vector(n("ffn_up.bias"), c.FFN)
			l.DownBias = b.vector(n("ffn_down.bias"), c.DModel)
		}
	}
	if _, ok := f.Tensor(RopeLongTensor); ok {
		if err := c.loadLongRope(f, &b); err != nil {
			return nil, err
		}
	}
	if _, ok := f.Tensor(RopeFreqsTensor); ok {
		c.Rope.FreqFactors = b.vector(RopeFreqsTensor, c.Rope.Dim/2)
		for i, v := range c.Rope.FreqFactors {
			if !(v > 0 && !math.IsInf(float64(v), 0)) {
				return nil, fmt.Errorf("model: tensor %s: factor %d is %g, want a positive number", RopeFreqsTensor, i, v)
			}
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	if m.Tok, err = tokenizer.FromGGUF(f); err != nil {
		return nil, err
	}
	if m.Tok.VocabSize() != c.Vocab {
		return nil, fmt.Errorf("model: tokenizer has %d tokens but token_embd.weight has %d rows", m.Tok.VocabSize(), c.Vocab)
	}
	m.Config = c
	return m, nil
}

// RopeFreqsTensor is the tensor of RoPE frequency factors (Rope.FreqFactors).
const RopeFreqsTensor = "rope_freqs.weight"

// Phi-3's long-context RoPE factors: long for a context past the original
// one, short within it.
const RopeLongTensor, RopeShortTensor = "rope_factors_long.weight", "rope_factors_short.weight"

// loadLongRope reads Phi-3's two sets of RoPE factors and the original
// context that chooses between them.
func (c *Config) loadLongRope(f *gguf.File, b *binder) error {
	key := c.Arch + ".rope.scaling.original_context_length"
	orig, err := f.Int(key)
	if err != nil {
		return fmt.Errorf("model: %s has %s but %w", c.Arch, RopeLongTensor, err)
	}
	if err := intInRange(key, orig); err != nil {
		return err
	}
	long, short := b.vector(RopeLongTensor, c.Rope.Dim/2), b.vector(RopeShortTensor, c.Rope.Dim/2)
	if b.err != nil {
		return b.err
	}
	for name, v := range map[string][]float32{RopeLongTensor: long, RopeShortTensor: short} {
		for i, x := range v {
			if !(x > 0 && !math.IsInf(float64(x), 0)) {
				return fmt.Errorf("model: tensor %s: factor %d is %g, want a positive number", name, i, x)
			}
		}
	}
	c.Rope.Scaling.OrigContext = orig
	c.Rope.FreqFactors = short
	lr := c.Rope
	lr.FreqFactors = long
	c.LongRope = &lr
	return nil
}

// tensorsPerBlock is how many tensors each block of the architecture has.
func (c *Config) tensorsPerBlock() int64 {
	n := int64(2 + 1 + 2) // the two norms, O, up and down
	if c.FusedQKV {
		n++
	} else {
		n += 3
	}
	if c.MLP.Gated() && !c.FusedGateUp {
		n++ // gate, or the experts' gates
	}
	if c.MoE() {
		n++ // the router
	}
	switch {
	case c.QKVBias && c.FusedQKV:
		n++
	case c.QKVBias:
		n += 3
	}
	if c.QKNorm {
		n += 2
	}
	if c.Bias {
		n += 3
	}
	if c.Norm == NormLayer {
		n += 2
	}
	if c.PostNorms {
		n += 2
	}
	return n
}

// splitRows cuts a fused weight into consecutive row ranges of the given
// sizes, sharing its data: ggml stores a matrix row by row, whole blocks per
// row, so a range of rows is a range of bytes.
func splitRows(w *Weight, sizes ...int) (q, k, v *Weight) {
	if w == nil {
		return nil, nil, nil
	}
	rowBytes := len(w.Data) / w.Rows
	parts := make([]*Weight, 3)
	names := []string{"[0]", "[1]", "[2]"}
	r := 0
	for i, n := range sizes {
		parts[i] = &Weight{Name: w.Name + names[i], Rows: n, Cols: w.Cols, Format: w.Format, Data: w.Data[r*rowBytes : (r+n)*rowBytes : (r+n)*rowBytes]}
		r += n
	}
	return parts[0], parts[1], parts[2]
}

// binder looks tensors up and checks their shapes, keeping the first error.
type binder struct {
	f   *gguf.File
	err error
}

func (b *binder) tensor(name string) *gguf.TensorInfo {
	if b.err != nil {
		return nil
	}
	t, ok := b.f.Tensor(name)
	if !ok {
		b.err = fmt.Errorf("model: tensor %s is missing", name)
		return nil
	}
	return t
}

// matrix binds a 2-D weight of dims [cols, rows] (ggml order); rows < 0 accepts any.
func (b *binder) matrix(name string, cols, rows int) *Weight {
	t := b.tensor(name)
	if t == nil {
		return nil
	}
	if len(t.Dims) != 2 || t.Dims[0] != int64(cols) || (rows >= 0 && t.Dims[1] != int64(rows)) {
		want := fmt.Sprintf("[%d %d]", cols, rows)
		if rows < 0 {
			want = fmt.Sprintf("[%d N]", cols)
		}
		b.err = fmt.Errorf("model: tensor %s has shape %v, want %s", name, t.Dims, want)
		return nil
	}
	data := b.f.Data(t)
	format, err := quant.For(t.Type)
	if err == nil && t.Type == gguf.TQ2_0_G128 {
		data, err = canonicalTQ2(b.f, t)
	}
	if err != nil {
		b.err = fmt.Errorf("model: tensor %s: %w", name, err)
		return nil
	}
	return &Weight{Name: name, Rows: int(t.Dims[1]), Cols: cols, Format: format, Data: data}
}

// experts binds a 3-D tensor of dims [cols, rows, n] (ggml order) as n
// matrices, each a slice of its data: ggml stores the experts one after the
// other, row by row.
func (b *binder) experts(name string, cols, rows, n int) []*Weight {
	t := b.tensor(name)
	if t == nil {
		return nil
	}
	if len(t.Dims) != 3 || t.Dims[0] != int64(cols) || t.Dims[1] != int64(rows) || t.Dims[2] != int64(n) {
		b.err = fmt.Errorf("model: tensor %s has shape %v, want [%d %d %d]", name, t.Dims, cols, rows, n)
		return nil
	}
	format, err := quant.For(t.Type)
	if err == nil && t.Type == gguf.TQ2_0_G128 {
		err = fmt.Errorf("expert tensors in %s are not supported", t.Type)
	}
	if err != nil {
		b.err = fmt.Errorf("model: tensor %s: %w", name, err)
		return nil
	}
	data := b.f.Data(t)
	slab := len(data) / n
	out := make([]*Weight, n)
	for e := range out {
		out[e] = &Weight{Name: fmt.Sprintf("%s[%d]", name, e), Rows: rows, Cols: cols, Format: format, Data: data[e*slab : (e+1)*slab : (e+1)*slab]}
	}
	return out
}

// canonicalTQ2 recognises which of the TQ2_0_g128 layouts in the wild the
// tensor uses and returns it in the standard one (codes first, then d).
func canonicalTQ2(f *gguf.File, t *gguf.TensorInfo) ([]byte, error) {
	layout, err := quant.DetectTQ2(f.Extent(t), t.Elements())
	if err != nil {
		return nil, err
	}
	if layout == quant.TQ2Standard {
		return f.Data(t), nil
	}
	return quant.CanonicalTQ2(f.Data(t), layout)
}

// vector binds a 1-D tensor of n elements, decoded to float32.
func (b *binder) vector(name string, n int) []float32 {
	t := b.tensor(name)
	if t == nil {
		return nil
	}
	if len(t.Dims) != 1 || t.Dims[0] != int64(n) {
		b.err = fmt.Errorf("model: tensor %s has shape %v, want [%d]", name, t.Dims, n)
		return nil
	}
	format, err := quant.For(t.Type)
	if err != nil {
		b.err = fmt.Errorf("model: tensor %s: %w", name, err)
		return nil
	}
	v := make([]float32, n)
	format.Dequantize(v, b.f.Data(t))
	return v
}

// Params counts the model's parameters (tied embeddings once).
func (m *Model) Params() int64 {
	c := &m.Config
	mlpMatrices := int64(2)
	if c.MLP.Gated() {
		mlpMatrices = 3
	}
	mlp := mlpMatrices * int64(c.DModel) * int64(c.FFN)
	if c.MoE() {
		mlp = int64(c.Experts) * (3*int64(c.DModel)*int64(c.ExpertFFN) + int64(c.DModel))
	}
	perLayer := int64(2*c.DModel) + int64(c.DModel)*int64(c.QDim()+2*c.KVDim()) + int64(c.QDim())*int64(c.DModel) + mlp
	if c.QKVBias {
		perLayer += int64(c.QDim() + 2*c.KVDim())
	}
	if c.Bias {
		perLayer += int64(2*c.DModel + c.FFN)
	}
	if c.Norm == NormLayer || c.PostNorms {
		perLayer += int64(2 * c.DModel)
	}
	if c.QKNorm {
		perLayer += int64(2 * c.HeadDim)
	}
	n := int64(c.Layers)*perLayer + int64(c.Vocab)*int64(c.DModel) + int64(c.DModel)
	if c.Norm == NormLayer {
		n += int64(c.DModel)
	}
	if m.PosEmbed != nil {
		n += int64(m.PosEmbed.Rows) * int64(c.DModel)
	}
	if !c.TiedEmbd {
		n += int64(c.Vocab) * int64(c.DModel)
	}
	return n
}

// Resident is the memory the open model holds before any prefill, in bytes:
// its tensor data and the file's header, both mapped and read, and the
// tokenizer's tables. A model built in memory (no File) counts its tokenizer.
func (m *Model) Resident() (weights, other int64) {
	if m.File != nil {
		for _, t := range m.File.Tensors {
			weights += t.Size
		}
		other = m.File.DataOffset
	}
	if m.Tok != nil {
		other += m.Tok.Footprint()
	}
	return weights, other
}
