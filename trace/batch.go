package trace

import (
	"errors"
	"fmt"
	"slices"
)

// Padded stacks the named capture of a batch's traces (one per prompt, as
// engine.Session.PrefillBatch returns them) into TransformerLens's
// [batch, pos, ...] tensor: each trace's rows, then zeros up to the longest
// (padding_side "right"). rows[i] is trace i's number of rows: positions
// past it are padding, to be masked out of any reduction.
func Padded(trs []*Trace, name string) (x *Tensor, rows []int, err error) {
	if len(trs) == 0 {
		return nil, nil, errors.New("trace: Padded of no traces")
	}
	parts := make([]*Tensor, len(trs))
	longest := 0
	for i, tr := range trs {
		if tr == nil {
			return nil, nil, fmt.Errorf("trace: Padded: trace %d is nil", i)
		}
		shape := tr.Shape(name)
		if shape == nil {
			_, err := tr.Get(name) // says what was captured
			return nil, nil, fmt.Errorf("trace: Padded: trace %d: %w", i, err)
		}
		if len(shape) == 0 || !slices.Equal(shape[1:], trs[0].Shape(name)[1:]) {
			return nil, nil, fmt.Errorf("trace: Padded: trace %d's %s is %v, trace 0's %v: only the first dimension may differ", i, name, shape, trs[0].Shape(name))
		}
		// Rows copies: the traces' own memory is not handed out.
		if parts[i], err = tr.Rows(name, 0, shape[0]); err != nil {
			return nil, nil, err
		}
		rows = append(rows, shape[0])
		longest = max(longest, shape[0])
	}
	row := elements(parts[0].Shape[1:])
	x = &Tensor{Shape: append([]int{len(trs), longest}, parts[0].Shape[1:]...), Data: make([]float32, len(trs)*longest*row)}
	for i, p := range parts {
		copy(x.Data[i*longest*row:], p.Data)
	}
	return x, rows, nil
}
