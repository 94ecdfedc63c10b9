package viz

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/trace"
)

// prefill runs tokens through m with the given capture.
func prefill(t testing.TB, m *model.Model, tokens []int32, c engine.Capture) *trace.Trace {
	t.Helper()
	e, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	tr, err := s.Prefill(context.Background(), tokens, engine.Options{Capture: c, Logits: engine.LogitsAll})
	require.NoError(t, err)
	return tr
}

// storiesTrace prefills prompt on stories260K with every point captured
// and the logit lens, skipping when the model is absent.
func storiesTrace(t testing.TB, prompt string) *trace.Trace {
	t.Helper()
	m := storiesModel(t)
	tokens, err := m.Tok.Encode(prompt, tokenizer.Options{})
	require.NoError(t, err)
	return withLens(t, m, prefill(t, m, tokens, engine.CaptureAll()))
}

// synthModel is a generated tiny-qwen3 with random F32 weights.
func synthModel(t testing.TB) *model.Model {
	t.Helper()
	w, err := synth.Generate(synth.Shapes["tiny-qwen3"], gguf.F32, 5)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), "tiny-qwen3")
	require.NoError(t, err)
	m, err := model.Load(f)
	require.NoError(t, err)
	return m
}

// storiesModel opens stories260K, skipping when it is absent.
func storiesModel(t testing.TB) *model.Model {
	t.Helper()
	m, err := model.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// withLens adds the engine's logit lens to tr.
func withLens(t testing.TB, m *model.Model, tr *trace.Trace) *trace.Trace {
	t.Helper()
	e, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	require.NoError(t, e.LogitLens(tr))
	return tr
}
