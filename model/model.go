package model

import (
	"fmt"
	"math"

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
// decoded to float32; matrices stay packed.
type Layer struct {
	AttnNorm, FFNNorm   []float32
	Q, K, V, O          *Weight
	QBias, KBias, VBias []float32 // qwen2 only
	QNorm, KNorm        []float32 // qwen3 only, length HeadDim
	Gate, Up, Down      *Weight
}

// Model is a loaded model: configuration, weights and tokenizer.
type Model struct {
	Config
	Embed   *Weight // [Vocab rows, DModel cols]
	Blocks  []Layer
	OutNorm []float32
	Output  *Weight // LM head; the same as Embed when TiedEmbd
	Tok     *tokenizer.Tokenizer
	File    *gguf.File
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
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Close releases the file mapping; the model must not be used afterwards.
func (m *Model) Close() error {
	if m == nil {
		return nil
	}
	return m.File.Close()
}

// Load binds a parsed GGUF file's tensors to a model.
func Load(f *gguf.File) (*Model, error) {
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
	if _, ok := f.Tensor("output.weight"); ok {
		m.Output = b.matrix("output.weight", c.DModel, c.Vocab)
	} else {
		c.TiedEmbd = true
		m.Output = m.Embed
	}
	// The block count is metadata: check the file holds that many blocks
	// before sizing anything by it, so a crafted count costs nothing.
	if need := int64(c.Layers) * tensorsPerBlock; need > int64(len(f.Tensors)) {
		return nil, fmt.Errorf("model: %s.block_count = %d needs at least %d tensors, but the file has %d", c.Arch, c.Layers, need, len(f.Tensors))
	}
	if last := fmt.Sprintf("blk.%d.attn_norm.weight", c.Layers-1); b.err == nil {
		if _, ok := f.Tensor(last); !ok {
			return nil, fmt.Errorf("model: %s.block_count = %d but tensor %s is missing", c.Arch, c.Layers, last)
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
		l.Q = b.matrix(n("attn_q.weight"), c.DModel, c.QDim())
		l.K = b.matrix(n("attn_k.weight"), c.DModel, c.KVDim())
		l.V = b.matrix(n("attn_v.weight"), c.DModel, c.KVDim())
		l.O = b.matrix(n("attn_output.weight"), c.QDim(), c.DModel)
		if c.QKVBias {
			l.QBias = b.vector(n("attn_q.bias"), c.QDim())
			l.KBias = b.vector(n("attn_k.bias"), c.KVDim())
			l.VBias = b.vector(n("attn_v.bias"), c.KVDim())
		}
		if c.QKNorm {
			l.QNorm = b.vector(n("attn_q_norm.weight"), c.HeadDim)
			l.KNorm = b.vector(n("attn_k_norm.weight"), c.HeadDim)
		}
		l.FFNNorm = b.vector(n("ffn_norm.weight"), c.DModel)
		l.Gate = b.matrix(n("ffn_gate.weight"), c.DModel, c.FFN)
		l.Up = b.matrix(n("ffn_up.weight"), c.DModel, c.FFN)
		l.Down = b.matrix(n("ffn_down.weight"), c.FFN, c.DModel)
	}
	if _, ok := f.Tensor(ropeFreqs); ok {
		c.Rope.FreqFactors = b.vector(ropeFreqs, c.Rope.Dim/2)
		for i, v := range c.Rope.FreqFactors {
			if !(v > 0 && !math.IsInf(float64(v), 0)) {
				return nil, fmt.Errorf("model: tensor %s: factor %d is %g, want a positive number", ropeFreqs, i, v)
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

// ropeFreqs is the tensor of RoPE frequency factors (Rope.FreqFactors).
const ropeFreqs = "rope_freqs.weight"

// tensorsPerBlock is the fewest tensors a block has (norms, Q, K, V, O and
// the three MLP matrices).
const tensorsPerBlock = 9

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
	perLayer := int64(2*c.DModel) + int64(c.DModel)*int64(c.QDim()+2*c.KVDim()) + int64(c.QDim())*int64(c.DModel) + 3*int64(c.DModel)*int64(c.FFN)
	if c.QKVBias {
		perLayer += int64(c.QDim() + 2*c.KVDim())
	}
	if c.QKNorm {
		perLayer += int64(2 * c.HeadDim)
	}
	n := int64(c.Layers)*perLayer + int64(c.Vocab)*int64(c.DModel) + int64(c.DModel)
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
