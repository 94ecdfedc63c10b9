package nb

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/stratalab/strata/model"
)

// maxWeightBytes bounds the float64 matrix WE or WU makes of the whole
// vocabulary: a large model's (151,936 tokens by 2,048) would be 2.5 GB.
const maxWeightBytes = 1 << 30

// WE is TransformerLens's W_E: the token embedding's rows, [tokens,
// d_model], of the tokens given (as Token takes them), or of the whole
// vocabulary when none are. It is the matrix as the model file holds it;
// hook_embed is W_E times the architecture's scale (Gemma's √d_model).
func (m *Model) WE(tokens ...any) *mat.Dense {
	m.ready()
	return m.vocabMatrix("WE", m.engine().Model.Embed, tokens, false)
}

// WU is TransformerLens's W_U: the unembedding, [d_model, tokens], a
// column per token given (as Token takes them; the whole vocabulary when
// none are), without the final norm's gain (HeadWeights and CopyingScores
// fold it in). Column i is Unembed(tokens[i]).
func (m *Model) WU(tokens ...any) *mat.Dense {
	m.ready()
	return m.vocabMatrix("WU", m.engine().Model.Output, tokens, true)
}

// vocabMatrix is w's rows for tokens (all without), as rows or, when
// columns, as columns.
func (m *Model) vocabMatrix(call string, w *model.Weight, tokens []any, columns bool) *mat.Dense {
	d := m.engine().Model.DModel
	ids := make([]int, len(tokens))
	for i, t := range tokens {
		id, err := m.tokenID(t)
		if err != nil {
			panic(fmt.Errorf("nb.%s: token %d: %w", call, i, err))
		}
		ids[i] = int(id)
	}
	if len(tokens) == 0 {
		if n := int64(w.Rows) * int64(d) * 8; n > maxWeightBytes {
			panic(fmt.Errorf("nb.%s: the whole vocabulary of %d tokens is %.1f GB as float64: name the tokens wanted", call, w.Rows, float64(n)/1e9))
		}
		ids = make([]int, w.Rows)
		for i := range ids {
			ids[i] = i
		}
	}
	out := mat.NewDense(len(ids), d, nil)
	if columns {
		out = mat.NewDense(d, len(ids), nil)
	}
	for i, id := range ids {
		row := m.decode(call, w, id, id+1)
		for j, v := range row {
			if columns {
				out.Set(j, i, float64(v))
			} else {
				out.Set(i, j, float64(v))
			}
		}
	}
	return out
}

// WO is TransformerLens's W_O[layer, head]: what the head writes to the
// residual stream per unit of its hook_z, [d_head, d_model].
func (m *Model) WO(layer, head int) *mat.Dense {
	m.ready()
	c := &m.engine().Model.Config
	if layer < 0 || layer >= c.Layers || head < 0 || head >= c.Heads {
		panic(fmt.Errorf("nb.WO: layer %d head %d: the model has %d layers of %d heads", layer, head, c.Layers, c.Heads))
	}
	o := m.engine().Model.Blocks[layer].O
	return m.headOut(layer, head, m.decode("WO", o, 0, o.Rows))
}

// HeadAt is one head's vector at position pos (negative counts from the
// end) of a [positions, heads, d_head] point (attn.hook_z, hook_q, hook_k,
// hook_v) as a Host hook gets it: z[pos, head, :] in TransformerLens. It
// shares data, so writing to it edits the point. It panics on another
// shape or an index outside it (in a Host function, an error of the
// prefill).
func HeadAt(shape []int, data []float32, pos, head int) []float32 {
	if len(shape) != 3 || len(data) != shape[0]*shape[1]*shape[2] {
		panic(fmt.Errorf("nb.HeadAt: a point of shape %v holding %d values; want [positions, heads, d_head] (attn.hook_z, hook_q, hook_k, hook_v)", shape, len(data)))
	}
	p := pos
	if p < 0 {
		p += shape[0]
	}
	if p < 0 || p >= shape[0] || head < 0 || head >= shape[1] {
		panic(fmt.Errorf("nb.HeadAt: position %d, head %d: the point has %d positions (-1 is the last) and %d heads", pos, head, shape[0], shape[1]))
	}
	at := (p*shape[1] + head) * shape[2]
	return data[at : at+shape[2] : at+shape[2]]
}
