package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/niltest"
)

// The sweep of issue 47 over nil: every exported function of engine, and
// every exported method of its types on a nil and a real receiver, given
// nil and zero arguments (and -1 for integers), returns: an error or a
// zero result, never a panic.
func TestEveryExportedCallTakesNil(t *testing.T) {
	api := niltest.Exported(t, ".")
	funcs := map[string]any{
		"MicroBatches": engine.MicroBatches, "CaptureAll": engine.CaptureAll, "CaptureOf": engine.CaptureOf,
		"NewEngine": engine.NewEngine, "NewTieredEngine": engine.NewTieredEngine,
		"EstimateMemory": engine.EstimateMemory, "EstimateBatch": engine.EstimateBatch,
		"PerPrompt": engine.PerPrompt, "AblateHead": engine.AblateHead, "MeanAblateHead": engine.MeanAblateHead,
		"AblateExpert": engine.AblateExpert, "ForceExpert": engine.ForceExpert, "Scale": engine.Scale,
		"AddVector": engine.AddVector, "Patch": engine.Patch, "PatchHead": engine.PatchHead,
		"ParsePlacement": engine.ParsePlacement, "Needs": engine.Needs, "NewPlan": engine.NewPlan,
		"PlanPlacement": engine.PlanPlacement, "ParsePrecision": engine.ParsePrecision,
		"TraceModel": engine.TraceModel, "OneTier": engine.OneTier,
	}
	m := genModel(t, "tiny-llama", gguf.F32, 1)
	e := newEngine(t, m)
	session := func() any {
		s, err := e.NewSession(0)
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return s
	}
	run := func() any {
		s := session().(*engine.Session)
		r, err := s.Start(context.Background(), []int32{1, 2, 3}, engine.Options{Capture: engine.CaptureAll()})
		require.NoError(t, err)
		t.Cleanup(r.Close)
		return r
	}
	plan := func() any {
		p, err := engine.NewPlan(m, engine.OneTier(m.Layers), []int{0}, engine.PlanRequest{Capacity: 8, Tokens: 8})
		require.NoError(t, err)
		return p
	}
	receivers := map[string][]func() any{
		"Engine":     {func() any { return (*engine.Engine)(nil) }, func() any { return e }},
		"Session":    {func() any { return (*engine.Session)(nil) }, session},
		"Run":        {func() any { return (*engine.Run)(nil) }, run},
		"Draws":      {func() any { return (*engine.Draws)(nil) }, func() any { return engine.Sampler{Temperature: 1}.Start() }},
		"Capture":    {func() any { return engine.Capture{} }, func() any { return engine.CaptureAll() }},
		"Estimate":   {func() any { return engine.Estimate{} }},
		"Placement":  {func() any { return engine.Placement{} }, func() any { return engine.OneTier(m.Layers) }},
		"Plan":       {func() any { return engine.Plan{} }, plan},
		"Sampler":    {func() any { return engine.Sampler{} }},
		"StopReason": {func() any { return engine.StopReason(0) }},
		"TierNeed":   {func() any { return engine.TierNeed{} }},
	}
	niltest.Sweep(t, "engine", api, funcs, receivers, niltest.Policy{Prefix: "engine: "})
}
