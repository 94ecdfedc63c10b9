package trace_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	cpubackend "github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/niltest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// captured returns a function that makes a new trace of every point, all
// logits and the logit lens, of a small random model on the CPU.
func captured(t *testing.T) func() *trace.Trace {
	m, err := synth.Random(synth.Shapes["tiny-llama"], gguf.F32, 1)
	require.NoError(t, err)
	e, err := engine.NewEngine(m, cpubackend.New(1))
	require.NoError(t, err)
	return func() *trace.Trace {
		s, err := e.NewSession(8)
		require.NoError(t, err)
		defer s.Close()
		tr, err := s.Prefill(context.Background(), []int32{1, 2, 3, 4, 1, 2, 3, 4}, engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll})
		require.NoError(t, err)
		require.NoError(t, e.LogitLens(tr))
		return tr
	}
}

// The sweep of issue 47 over nil: every exported function of trace, and
// every exported method of its types on a nil, an empty and a real
// receiver, given nil and zero arguments (and -1 for integers), returns:
// an error or a zero result, never a panic but one its doc comment says
// (an accessor's out of range, as a slice's, or a Put of nothing).
func TestEveryExportedCallTakesNil(t *testing.T) {
	api := niltest.Exported(t, ".")
	t.Chdir(t.TempDir()) // what a call given "" writes lands here
	funcs := map[string]any{
		"PrevTokenScores": trace.PrevTokenScores, "InductionScores": trace.InductionScores,
		"RepeatPeriod": trace.RepeatPeriod, "Padded": trace.Padded, "ReplaceFolders": trace.ReplaceFolders,
		"CheckFolder": trace.CheckFolder, "TopOf": trace.TopOf, "WriteAtomic": trace.WriteAtomic,
		"Load": trace.Load, "Table": trace.Table, "SpecOf": trace.SpecOf, "Points": trace.Points,
		"KnownPoint": trace.KnownPoint, "LayerPoint": trace.LayerPoint, "SplitPoint": trace.SplitPoint, "IsAttentionMap": trace.IsAttentionMap,
		"ShapeOf": trace.ShapeOf, "SameAs": trace.SameAs, "PointHint": trace.PointHint,
		"HeadScores": trace.HeadScores, "DuplicateTokenScores": trace.DuplicateTokenScores,
		"ProbRank": trace.ProbRank, "New": trace.New, "MakeData": trace.MakeData, "LayerOf": trace.LayerOf,
	}
	real := captured(t)
	tr := real()
	resid := func() *trace.Matrix { m, err := real().Resid(0); require.NoError(t, err); return m }
	stack := func() *trace.Stack { s, err := real().AccumulatedResid(); require.NoError(t, err); return s }
	receivers := map[string][]func() any{
		"Trace":     {func() any { return (*trace.Trace)(nil) }, func() any { return trace.New() }, func() any { return real() }},
		"Tensor":    {func() any { return (*trace.Tensor)(nil) }, func() any { return &trace.Tensor{} }, func() any { return tr.Tensor("blocks.0.attn.hook_pattern") }},
		"Matrix":    {func() any { return (*trace.Matrix)(nil) }, func() any { return &trace.Matrix{} }, func() any { return resid() }},
		"Stack":     {func() any { return (*trace.Stack)(nil) }, func() any { return &trace.Stack{} }, func() any { return stack() }},
		"Lens":      {func() any { return (*trace.Lens)(nil) }, func() any { return &trace.Lens{} }, func() any { return real().Lens }},
		"Model":     {func() any { return trace.Model{} }, func() any { return tr.Model }},
		"Scores":    {func() any { return trace.Scores(nil) }, func() any { return trace.Scores{{}, nil} }},
		"HeadList":  {func() any { return trace.HeadList(nil) }},
		"HeadScore": {func() any { return trace.HeadScore{} }},
		"Needs":     {func() any { return trace.Needs(0) }},
		"NonFinite": {func() any { return trace.NonFinite{} }},
	}
	niltest.Sweep(t, "trace", api, funcs, receivers, niltest.Policy{Prefix: "trace: "})
}
