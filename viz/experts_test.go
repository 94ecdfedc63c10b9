package viz

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/trace"
)

// Routing at a real mixture's width (128 experts): in layer 0 every token
// goes to experts 5 and 100, in layer 1 they spread. The figure fits the
// page, and its darkest cells are those two, 95 cells apart in the bottom
// row (layer 0); routed the same way in layer 1 too, they fill two rows.
func TestExpertUsageDrawsWhereTokensWent(t *testing.T) {
	const experts, k, tokens = 128, 2, 8
	tr := trace.New()
	tr.Model = trace.Model{Name: "hand moe", Layers: 2, DModel: 4, Heads: 1, KVHeads: 1, HeadDim: 4, Vocab: 8, Experts: experts}
	tr.Tokens = make([]int32, tokens)
	tr.Pieces = make([]string, tokens)
	for i := range tr.Pieces {
		tr.Pieces[i] = "t"
	}
	ids0, ids1 := make([]float32, tokens*k), make([]float32, tokens*k)
	for i := range tokens {
		ids0[i*k], ids0[i*k+1] = 5, 100
		ids1[i*k], ids1[i*k+1] = float32(i), float32(i+64)
	}
	tr.Put("blocks.0.mlp.hook_expert_ids", &trace.Tensor{Shape: []int{tokens, k}, Data: ids0})
	tr.Put("blocks.1.mlp.hook_expert_ids", &trace.Tensor{Shape: []int{tokens, k}, Data: ids1})
	f, err := ExpertUsage(tr)
	require.NoError(t, err)
	require.LessOrEqual(t, float64(f.Width), float64(maxWidth))
	box := darkBox(t, f)
	require.False(t, box.Empty())
	// One cell's width in pixels, from the box: it spans experts 5..100.
	cell := float64(box.Dx()) / 96
	require.Greater(t, cell, 2.0, "cells at least 2 px wide")
	// With layer 1 routed the same way, the dark box is two rows tall.
	tr.Put("blocks.1.mlp.hook_expert_ids", &trace.Tensor{Shape: []int{tokens, k}, Data: ids0})
	both, err := ExpertUsage(tr)
	require.NoError(t, err)
	box2 := darkBox(t, both)
	require.Equal(t, box.Dx(), box2.Dx())
	require.InDelta(t, 2*float64(box.Dy()), float64(box2.Dy()), 0.1*float64(box2.Dy()), "one row dark, then two")
	require.Equal(t, box.Max.Y, box2.Max.Y, "layer 0 is the bottom row")

	dense := trace.New()
	dense.Model = trace.Model{Name: "dense", Layers: 1}
	dense.Tokens, dense.Pieces = []int32{1}, []string{"a"}
	_, err = ExpertUsage(dense)
	require.ErrorContains(t, err, "dense has no experts")
}
