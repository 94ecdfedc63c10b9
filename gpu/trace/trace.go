// Package trace holds what a prefill captured: tokens, model facts and named
// tensors, saved as a NumPy .npz with a JSON manifest so Python can read it.
package trace

import (
	"fmt"
	"slices"
	"strings"
)

// Tensor is a captured float32 array in row-major order.
type Tensor struct {
	Shape []int
	Data  []float32
}

// At returns the element at the given index, one coordinate per dimension.
func (t *Tensor) At(idx ...int) float32 {
	off := 0
	for i, d := range t.Shape {
		off = off*d + idx[i]
	}
	return t.Data[off]
}

// Model is what a reader of a trace needs to know about the model.
type Model struct {
	Name    string `json:"name"`
	Arch    string `json:"architecture"`
	Layers  int    `json:"layers"`
	DModel  int    `json:"d_model"`
	FFN     int    `json:"ffn"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	HeadDim int    `json:"head_dim"`
	Vocab   int    `json:"vocab"`
}

// Trace is the result of one prefill.
type Trace struct {
	Model   Model
	Backend string
	Tokens  []int32  // this prefill's tokens
	Pieces  []string // their display strings
	Pos0    int      // position of Tokens[0]
	// Predicted holds the argmax token of each computed logit row, when asked for.
	Predicted []int32
	Names     []string // capture order
	Tensors   map[string]*Tensor
	// Lens is the logit lens, when computed (gpu.Engine.LogitLens).
	Lens *Lens
}

// Lens is the logit lens: the final norm and unembedding applied to each
// layer's resid_post. Prob[l][t] is the top token's probability at layer l
// and position t, Token its id and Piece its display string.
type Lens struct {
	Prob  [][]float32 `json:"prob"`
	Token [][]int32   `json:"token"`
	Piece [][]string  `json:"piece"`
}

// New returns an empty trace.
func New() *Trace { return &Trace{Tensors: map[string]*Tensor{}} }

// Put stores a tensor under name, keeping capture order.
func (t *Trace) Put(name string, x *Tensor) {
	if _, ok := t.Tensors[name]; !ok {
		t.Names = append(t.Names, name)
	}
	t.Tensors[name] = x
}

// Get returns a captured tensor; the error lists what was captured.
func (t *Trace) Get(name string) (*Tensor, error) {
	if x, ok := t.Tensors[name]; ok {
		return x, nil
	}
	have := slices.Clone(t.Names)
	if len(have) > 8 {
		have = append(have[:8], fmt.Sprintf("... (%d in all)", len(t.Names)))
	}
	return nil, fmt.Errorf("trace: %s was not captured (captured: %s)", name, strings.Join(have, ", "))
}

// Has reports whether name was captured.
func (t *Trace) Has(name string) bool {
	_, ok := t.Tensors[name]
	return ok
}
