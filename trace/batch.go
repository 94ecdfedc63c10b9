package trace

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Padded stacks the named capture of a batch's traces (one per prompt, as
// engine.Session.PrefillBatch returns them) into TransformerLens's
// [batch, pos, ...] tensor: each trace's rows, then zeros up to the longest
// (padding_side "right"). rows[i] is trace i's number of rows: positions
// past it are padding, to be masked out of any reduction. Attention maps
// ([heads, queries, keys] each) stack as [batch, heads, queries, keys],
// padded on the right along queries and keys: patterns with 0 (no
// probability on padding), scores with -Inf (as the causal mask), and
// rows[i] counts trace i's queries.
func Padded(trs []*Trace, name string) (x *Tensor, rows []int, err error) {
	if len(trs) == 0 {
		return nil, nil, errors.New("trace: Padded of no traces")
	}
	parts := make([]*Tensor, len(trs))
	for i, tr := range trs {
		if tr == nil {
			return nil, nil, fmt.Errorf("trace: Padded: trace %d is nil", i)
		}
		shape := tr.Shape(name)
		if shape == nil {
			_, err := tr.Get(name) // says what was captured
			return nil, nil, fmt.Errorf("trace: Padded: trace %d: %w", i, err)
		}
		if err := paddable(tr, name, shape); err != nil {
			return nil, nil, fmt.Errorf("trace: Padded: trace %d: %w", i, err)
		}
		// Rows copies: the traces' own memory is not handed out.
		if parts[i], err = tr.Rows(name, 0, shape[0]); err != nil {
			return nil, nil, err
		}
	}
	if IsAttentionMap(name) {
		return paddedMaps(parts, name)
	}
	longest := 0
	for i, p := range parts {
		if len(p.Shape) == 0 || !slices.Equal(p.Shape[1:], parts[0].Shape[1:]) {
			return nil, nil, fmt.Errorf("trace: Padded: trace %d's %s is %v, trace 0's %v: only the first dimension may differ", i, name, p.Shape, parts[0].Shape)
		}
		rows = append(rows, p.Shape[0])
		longest = max(longest, p.Shape[0])
	}
	row := elements(parts[0].Shape[1:])
	x = &Tensor{Shape: append([]int{len(trs), longest}, parts[0].Shape[1:]...), Data: make([]float32, len(trs)*longest*row)}
	for i, p := range parts {
		copy(x.Data[i*longest*row:], p.Data)
	}
	return x, rows, nil
}

// paddable refuses a capture whose rows are not its trace's positions from
// 0, where that trace says its tokens: rows stacked from position 0 would
// be misplaced.
func paddable(tr *Trace, name string, shape []int) error {
	if tr.Pos0 != 0 {
		return fmt.Errorf("it continues a prompt from position %d: Padded stacks prompts prefilled from position 0", tr.Pos0)
	}
	rows := shape[0]
	if IsAttentionMap(name) && len(shape) == 3 {
		rows = shape[1]
	}
	if n := len(tr.Tokens); n > 0 && rows != n {
		return fmt.Errorf("%s has %d rows for %d tokens: not a row a position (logits of the last position only? prefill with every position's: engine.LogitsAll, nb.AllLogits)", name, rows, n)
	}
	return nil
}

// paddedMaps is Padded for attention maps.
func paddedMaps(parts []*Tensor, name string) (*Tensor, []int, error) {
	var heads, queries, keys int
	rows := make([]int, len(parts))
	for i, p := range parts {
		if len(p.Shape) != 3 || p.Shape[0] != parts[0].Shape[0] {
			return nil, nil, fmt.Errorf("trace: Padded: trace %d's %s is %v, trace 0's %v: maps must be [heads, queries, keys] with the same heads", i, name, p.Shape, parts[0].Shape)
		}
		heads, rows[i] = p.Shape[0], p.Shape[1]
		queries, keys = max(queries, p.Shape[1]), max(keys, p.Shape[2])
	}
	var fill float32 // a pattern's padding holds no probability
	if _, local := SplitPoint(name); local == AttnScores {
		fill = float32(math.Inf(-1))
	}
	x := &Tensor{Shape: []int{len(parts), heads, queries, keys}, Data: make([]float32, len(parts)*heads*queries*keys)}
	if fill != 0 {
		for i := range x.Data {
			x.Data[i] = fill
		}
	}
	for b, p := range parts {
		q, k := p.Shape[1], p.Shape[2]
		for h := range heads {
			for r := range q {
				copy(x.Data[((b*heads+h)*queries+r)*keys:], p.Data[(h*q+r)*k:(h*q+r+1)*k])
			}
		}
	}
	return x, rows, nil
}
