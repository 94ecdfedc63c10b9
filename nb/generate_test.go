package nb_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// generateByPrefills is a generation written the slow, plain way: the whole
// sequence prefilled again for each token, from a fresh cache, with the
// same options; the token is the prediction, or a draw from the last row.
func generateByPrefills(t *testing.T, m *nb.Model, prompt string, n int, s engine.Sampler, opts ...nb.Option) []int32 {
	ids := m.Tokens(prompt)
	draws := s.Start()
	prefill := make([]nb.PrefillOption, len(opts))
	for i, o := range opts {
		prefill[i] = o
	}
	var out []int32
	for range n {
		tr := m.Prefill(ids, prefill...)
		id, err := draws.Pick(tr)
		require.NoError(t, err)
		tr.Close()
		out = append(out, id)
		ids = append(ids, id)
	}
	return out
}

func TestSampledGenerationDrawsFromEachStepsLogits(t *testing.T) {
	m := nb.Open("")
	const prompt = "func main() {"
	s := engine.Sampler{Temperature: 0.9, TopP: 0.95, Seed: 7}
	g, err := m.TryGenerate(prompt, 12, nb.Sample(s))
	require.NoError(t, err)
	require.Equal(t, engine.StopLength, g.Stop)
	require.Equal(t, generateByPrefills(t, m, prompt, 12, s), g.Tokens)

	again, err := m.TryGenerate(prompt, 12, nb.Sample(s))
	require.NoError(t, err)
	require.Equal(t, g.Tokens, again.Tokens, "the same seed")
	other, err := m.TryGenerate(prompt, 12, nb.Sample(engine.Sampler{Temperature: 0.9, TopP: 0.95, Seed: 8}))
	require.NoError(t, err)
	require.NotEqual(t, g.Tokens, other.Tokens, "another seed")

	greedy := m.Generate(prompt, 12)
	require.Equal(t, greedy, m.Generate(prompt, 12, nb.Sample(engine.Sampler{Temperature: 1, TopK: 1, Seed: 3})), "top-k 1 is greedy")
}

func TestSteeredGenerationSteersEveryStep(t *testing.T) {
	m := nb.Open("")
	const prompt = "for i := n; i < 0; i"
	vec := m.SteeringVector("for i := n; i > 0; i", prompt, 1, m.Position(prompt, " <"))
	plain := m.Generate(prompt, 8)
	for _, c := range []struct {
		name  string
		steer nb.Option
	}{
		{"every position", nb.Steer(1, vec, 4)},
		{"one position of the prompt", nb.Steer(1, vec, 4, m.Position(prompt, " <"))},
		{"and an ablation", nb.Hooks(engine.AblateHead(3, 3))},
	} {
		g, err := m.TryGenerate(prompt, 8, c.steer)
		require.NoError(t, err, c.name)
		require.Equal(t, generateByPrefills(t, m, prompt, 8, engine.Sampler{}, c.steer), g.Tokens, c.name)
		require.NotEqual(t, plain, g.Text, c.name)
	}
}

// PromptHooks act in the prompt only: a hook at given rows given as Hooks
// also acts on row 0 of each generated token's step.
func TestPromptHooksActInThePromptOnly(t *testing.T) {
	m := nb.Open("")
	const prompt = "for i := n; i < 0; i"
	at := m.Position(prompt, " <")
	vec := m.SteeringVector("for i := n; i > 0; i", prompt, 1, at)
	add := engine.AddVector(trace.LayerPoint(1, "hook_resid_pre"), vec, 4, []int{at})
	steered := m.Generate(prompt, 8, nb.Steer(1, vec, 4, at))
	require.Equal(t, steered, m.Generate(prompt, 8, nb.PromptHooks(add)))
	first := engine.AddVector(trace.LayerPoint(1, "hook_resid_pre"), vec, 4, []int{0})
	require.NotEqual(t, m.Generate(prompt, 8, nb.PromptHooks(first)), m.Generate(prompt, 8, nb.Hooks(first)), "row 0 of every step")
	tr := m.Prefill(prompt, nb.PromptHooks(add), nb.Capture("blocks.1.hook_resid_pre"))
	require.Equal(t, nb.Must(m.Prefill(prompt, nb.Hooks(add), nb.Capture("blocks.1.hook_resid_pre")).Get("blocks.1.hook_resid_pre")).Data,
		nb.Must(tr.Get("blocks.1.hook_resid_pre")).Data, "in a prefill, as Hooks")
}

// A prefill's options and a generation's are apart in their types (Capture
// given to Generate, or Sample to Prefill, does not compile); a sampler
// that cannot draw is refused at the call.
func TestGenerateRefusesASamplerWithoutATemperature(t *testing.T) {
	m := nb.Open("")
	var _ nb.GenerateOption = nb.Sample(engine.Sampler{})
	var _ nb.PrefillOption = nb.Capture("*")
	for _, both := range []nb.Option{nb.Hooks(), nb.Fast(), nb.Continue()} {
		var _, _ = nb.PrefillOption(both), nb.GenerateOption(both)
	}
	_, err := m.TryGenerate("x", 2, nb.Sample(engine.Sampler{TopP: 0.5}))
	require.ErrorContains(t, err, "set a temperature above 0")
}

// Continuing after a generation goes on from all of it: its last token,
// chosen but not yet run, runs first.
func TestContinuingAfterAGenerationKeepsItsLastToken(t *testing.T) {
	m := nb.Open("")
	ids := m.Tokens("func main() {")
	a, err := m.TryGenerate(ids, 3)
	require.NoError(t, err)
	require.Equal(t, engine.StopLength, a.Stop)
	next := []int32{m.Token("\n")}
	b, err := m.TryGenerate(next, 4, nb.Continue())
	require.NoError(t, err)
	whole := append(append(slices.Clip(ids), a.Tokens...), next...)
	fresh, err := m.TryGenerate(whole, 4)
	require.NoError(t, err)
	require.Equal(t, fresh.Tokens, b.Tokens)

	m.Generate("func main() {", 3)
	tr := m.Prefill(next, nb.Continue())
	require.Equal(t, len(ids)+2, tr.Pos0, "the generation's last token is in this prefill")
	require.Equal(t, append(a.Tokens[2:3:3], next...), tr.Tokens)
	m.Generate("func main() {", 3)
	m.Prefill(ids)
	tr = m.Prefill(next, nb.Continue())
	require.Equal(t, next, tr.Tokens, "a call that starts over forgets it")
	require.Equal(t, len(ids), tr.Pos0)
}
