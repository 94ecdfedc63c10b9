// Package trace holds what a prefill captured: tokens, model facts and named
// tensors, saved as a NumPy .npz with a JSON manifest so Python can read it.
package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
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

// NonFinite counts the NaN and infinite values of a capture.
type NonFinite struct {
	NaN    int `json:"nan,omitempty"`
	PosInf int `json:"pos_inf,omitempty"`
	NegInf int `json:"neg_inf,omitempty"`
}

// Any reports whether there is any non-finite value.
func (n NonFinite) Any() bool { return n.NaN+n.PosInf+n.NegInf > 0 }

func (n NonFinite) String() string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{n.NaN, "NaN"}, {n.PosInf, "+Inf"}, {n.NegInf, "-Inf"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "finite"
	}
	return strings.Join(parts, ", ")
}

// NonFiniteIn counts the non-finite values of the named capture. The -Inf
// that masks attention scores above the diagonal is not counted: it is
// how causal attention works, not a fault.
func (t *Trace) NonFiniteIn(name string) NonFinite {
	var n NonFinite
	x, ok := t.Tensors[name]
	if !ok {
		return n
	}
	masked := func(int) bool { return false }
	if strings.HasSuffix(name, "attn.hook_attn_scores") && len(x.Shape) == 3 {
		q, k := x.Shape[1], x.Shape[2] // [heads, T, Pos0+T]
		pos0 := k - q
		masked = func(i int) bool { return i%k > pos0+(i/k)%q }
	}
	for i, v := range x.Data {
		switch {
		case v != v:
			n.NaN++
		case math.IsInf(float64(v), 1):
			n.PosInf++
		case math.IsInf(float64(v), -1) && !masked(i):
			n.NegInf++
		}
	}
	return n
}

// FirstNonFinite returns the first capture, in capture order (the order
// the prefill reached them), that holds NaN or Inf, and its counts; ""
// when every value is finite.
func (t *Trace) FirstNonFinite() (string, NonFinite) {
	for _, name := range t.Names {
		if n := t.NonFiniteIn(name); n.Any() {
			return name, n
		}
	}
	return "", NonFinite{}
}

// LayerOf is the layer of a per-layer capture name ("blocks.N. ..."), or
// -1 for hook_embed, ln_final.hook_normalized and logits.
func LayerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blocks.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	if !ok || err != nil || l < 0 {
		return -1
	}
	return l
}

// jsonFloat writes a non-finite float as a string, which encoding/json
// refuses to write as a number.
type jsonFloat float32

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Infinity"`), nil
	}
	return json.Marshal(float32(f))
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "NaN":
			*f = jsonFloat(math.NaN())
		case "Infinity":
			*f = jsonFloat(math.Inf(1))
		case "-Infinity":
			*f = jsonFloat(math.Inf(-1))
		default:
			return fmt.Errorf("trace: %q is not a number", s)
		}
		return nil
	}
	var v float32
	err := json.Unmarshal(b, &v)
	*f = jsonFloat(v)
	return err
}

type lensJSON struct {
	Prob  [][]jsonFloat `json:"prob"`
	Token [][]int32     `json:"token"`
	Piece [][]string    `json:"piece"`
}

// MarshalJSON writes the lens; a NaN probability (from a model that went
// non-finite) is written as "NaN".
func (l Lens) MarshalJSON() ([]byte, error) {
	j := lensJSON{Token: l.Token, Piece: l.Piece}
	if l.Prob != nil {
		j.Prob = make([][]jsonFloat, len(l.Prob))
	}
	for i, row := range l.Prob {
		j.Prob[i] = make([]jsonFloat, len(row))
		for k, p := range row {
			j.Prob[i][k] = jsonFloat(p)
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *Lens) UnmarshalJSON(b []byte) error {
	var j lensJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = Lens{Token: j.Token, Piece: j.Piece}
	if j.Prob != nil {
		l.Prob = make([][]float32, len(j.Prob))
	}
	for i, row := range j.Prob {
		l.Prob[i] = make([]float32, len(row))
		for k, p := range row {
			l.Prob[i][k] = float32(p)
		}
	}
	return nil
}
