package nb_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// Issue 15.1: one nb.Model used from many goroutines (as GoNB cells and
// user code do) died on Vulkan (concurrent map writes in the stream,
// malloc corruption, SIGSEGV) and gave wrong logits on CPU with no error.
// Now the model's calls take turns: every result equals the serial one,
// and a step-wise run that another goroutine's call ended says so.
func TestOneModelFromManyGoroutinesMatchesSerial(t *testing.T) {
	for _, c := range []struct {
		backend           string
		goroutines, steps int // lavapipe is slow: fewer there
	}{{"cpu", 8, 3}, {"vulkan", 4, 2}} {
		if testing.Short() {
			c.goroutines = 4
		}
		t.Run(c.backend, func(t *testing.T) {
			m, err := nb.TryOpen("", nb.Backend(c.backend))
			if errors.Is(err, vulkan.ErrNoDevice) {
				t.Skipf("this machine has no Vulkan device: %v", err)
			}
			require.NoError(t, err)
			sharedModelAgreesWithSerial(t, m, c.goroutines, c.steps)
		})
	}
}

func sharedModelAgreesWithSerial(t *testing.T, m *nb.Model, goroutines, rounds int) {
	prompts := []string{"func main() {", "for i := 0; i < n; i++ {", "package strings", "x := []int{1, 2, 3}"}
	opts := []nb.PrefillOption{nb.Capture("blocks.*.hook_resid_post", "blocks.1.attn.hook_pattern"), nb.AllLogits()}
	const genTokens = 3
	wantTrace := make([]*trace.Trace, len(prompts))
	wantGen := make([]string, len(prompts))
	for i, p := range prompts {
		wantTrace[i] = m.Prefill(p, opts...)
		wantGen[i] = m.Generate(p, genTokens).Text
	}
	wantSteps := m.Start(prompts[0]).Finish()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				i := (g + r) % len(prompts)
				switch (g + r) % 3 {
				case 0:
					tr, err := m.TryPrefill(prompts[i], opts...)
					if err != nil {
						fail("prefill %d: %v", i, err)
						continue
					}
					for _, name := range wantTrace[i].Names {
						if !equal(wantTrace[i].Tensor(name).Data, tr.Tensor(name).Data) {
							fail("prefill %d: %s differs from the serial run", i, name)
						}
					}
				case 1:
					if got := m.Generate(prompts[i], genTokens).Text; got != wantGen[i] {
						fail("generate %d: %q, serially %q", i, got, wantGen[i])
					}
				case 2:
					// Another goroutine's call may end a step-wise run between
					// its steps: then it says so, and otherwise it is exact.
					func() {
						defer func() {
							if p := recover(); p != nil && !strings.Contains(fmt.Sprint(p), "took its buffers") {
								fail("steps: %v", p)
							}
						}()
						s := m.Start(prompts[0])
						for s.Next() {
						}
						if err := s.Err(); err != nil {
							if !strings.Contains(err.Error(), "took its buffers") {
								fail("steps: %v", err)
							}
							return
						}
						tr := s.Finish()
						if !equal(wantSteps.Tensor("logits").Data, tr.Tensor("logits").Data) {
							fail("steps: logits differ from the serial run")
						}
					}()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures)

	// And the model is as good as new.
	require.Equal(t, wantTrace[0].Tensor("logits").Data, m.Prefill(prompts[0], opts...).Tensor("logits").Data)
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Issue 15.8: generating past the context panicked in nb.Generate. It now
// stops at the end of the context, returns what it made and says why.
func TestGenerateStopsAtTheEndOfTheContext(t *testing.T) {
	// A small random model (context 512) keeps filling the context quick.
	w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.F32, 3)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, w.WriteFile(path))
	m := nb.Open(path, nb.Backend("cpu"))
	prompt := "abc"
	ids := m.Tokens(prompt)
	c := m.Config().Context
	g, err := m.TryGenerate(prompt, 100000)
	require.NoError(t, err)
	if !testing.Short() {
		var out string
		require.NotPanics(t, func() { out = m.Generate(prompt, 100000).Text })
		require.Equal(t, g.Text, out)
	}
	t.Logf("%d tokens, stopped by %v", len(g.Tokens), g.Stop)
	switch g.Stop {
	case engine.StopContext:
		require.Len(t, g.Tokens, c-len(ids)+1, "the whole context was used")
	case engine.StopEOS:
		require.Less(t, len(g.Tokens), c-len(ids)+1)
	default:
		t.Fatalf("stopped by %v", g.Stop)
	}

	// With Continue, the room left is what the previous call left.
	m.Prefill(make([]int32, c-3))
	g, err = m.TryGenerate([]int32{5}, 100, nb.Continue())
	require.NoError(t, err)
	if g.Stop != engine.StopEOS {
		require.Equal(t, engine.StopContext, g.Stop)
		require.Len(t, g.Tokens, 3)
	}

	g, err = m.TryGenerate(prompt, 2)
	require.NoError(t, err)
	if g.Stop != engine.StopEOS {
		require.Equal(t, engine.StopLength, g.Stop)
		require.Len(t, g.Tokens, 2)
	}
	_, err = m.TryGenerate(make([]int32, c+1), 5)
	require.ErrorIs(t, err, engine.ErrCacheFull)
	require.ErrorContains(t, err, fmt.Sprintf("the prompt is %d tokens, which exceed the KV cache of %d positions (the model's context is %d tokens)", c+1, c, c))
}

// Issue 15.9: layer ranges selecting nothing captured only the logits, and
// Layers(-5,-2) captured every layer.
func TestLayersOutsideTheModelAreRefused(t *testing.T) {
	m := nb.Open("", nb.Backend("cpu")) // 4 layers
	for _, c := range []struct {
		first, last int
		want        string
	}{
		{3, 1, "layer range 3..1 selects no layer"},
		{5, 9, "layer range 5..9 selects no layer: the model has 4 layers, 0..3"},
		{-5, -2, "the first layer -5 is negative"},
		{0, 4, "layer 4 is past the model's last layer 3"},
	} {
		_, err := m.TryPrefill("x", nb.Capture("blocks.*.hook_resid_post"), nb.Layers(c.first, c.last))
		require.ErrorContains(t, err, c.want)
		_, err = m.TryPrefill("x", nb.Layers(c.first, c.last)) // capturing nothing
		require.ErrorContains(t, err, c.want)
		require.Panics(t, func() { m.Start("x", nb.Layers(c.first, c.last)) })
		_, err = m.TryStart("x", nb.Layers(c.first, c.last))
		require.ErrorContains(t, err, c.want)
	}
	// Start without Capture keeps the layers asked for.
	tr := m.Start("x", nb.Layers(2, 2)).Finish()
	require.True(t, tr.Has("blocks.2.hook_resid_post"))
	require.False(t, tr.Has("blocks.1.hook_resid_post"))
	require.False(t, tr.Has("blocks.3.hook_resid_post"))
}

// Issue 15.13: LogitDiff("", "x") silently compared BOS.
func TestLogitDiffRefusesTextWithoutTokens(t *testing.T) {
	m := nb.Open("", nb.Backend("cpu"))
	require.PanicsWithError(t, `nb.LogitDiff: "" encodes to no token (besides BOS): give some text`, func() { m.LogitDiff("", "x") })
	require.Panics(t, func() { m.LogitDiff("x", "") })
	diff := m.LogitDiff(" x", " y")
	require.NotPanics(t, func() { diff(m.Prefill("a")) })
}

// A nil model, as left by a failed Open, is an error rather than a nil dereference.
func TestNilModelIsAnError(t *testing.T) {
	var m *nb.Model
	_, err := m.TryPrefill("x")
	require.ErrorContains(t, err, "nil *Model")
	_, err = m.TryGenerate("x", 1)
	require.ErrorContains(t, err, "nil *Model")
	require.Panics(t, func() { m.Prefill("x") })
	// Every analysis call names the problem instead of dereferencing nil.
	calls := map[string]func(){
		"Token":            func() { m.Token(" x") },
		"Unembed":          func() { m.Unembed(3) },
		"LogitDirection":   func() { m.LogitDirection(1, 2) },
		"HeadResults":      func() { m.HeadResults(nil, 0) },
		"FinalNorm":        func() { m.FinalNorm(nil, nil) },
		"AccumulatedResid": func() { m.AccumulatedResid(nil, true) },
		"DecomposeResid":   func() { m.DecomposeResid(nil, true) },
		"StackHeadResults": func() { m.StackHeadResults(nil, true) },
		"DLA":              func() { m.DLA(nil, nil, -1) },
		"HeadDLA":          func() { m.HeadDLA(nil, nil, -1) },
		"TokenLens":        func() { m.TokenLens(nil, 1) },
		"SteeringVector":   func() { m.SteeringVector("a", "b", 0, 0) },
		"Position":         func() { m.Position("a", "a") },
		"RepeatedRandom":   func() { m.RepeatedRandom(4, 1) },
		"LogitDiff":        func() { m.LogitDiff("a", "b") },
		"Loss":             func() { m.Loss("a") },
		"HeadScores":       func() { m.HeadScores("a", nb.PrevToken) },
		"AblateHeads":      func() { m.AblateHeads("a", nil, nb.ZeroAblation) },
		"PatchResid":       func() { m.PatchResid("a", "b", nil) },
		"PatchHeads":       func() { m.PatchHeads("a", "b", nil) },
	}
	for name, call := range calls {
		require.PanicsWithError(t, "nb: nil *Model (Open failed, or the model was never opened)", call, name)
	}
}

// A token id given as an int is checked before it becomes an int32: 2^32+5
// is not token 5.
func TestTokenIDsOutsideTheVocabularyAreRefused(t *testing.T) {
	m := nb.Open("", nb.Backend("cpu"))
	for _, id := range []any{1<<32 + 5, -1, int32(-3), m.Config().Vocab} {
		require.PanicsWithError(t, fmt.Sprintf("nb: token %v is outside the vocabulary of %d", id, m.Config().Vocab), func() { m.Token(id) }, "%v", id)
	}
	require.Panics(t, func() { m.Unembed(1<<32 + 5) })
	require.Equal(t, int32(5), m.Token(5))
}

// A SentencePiece tokenizer puts a space before a prompt: " Lily" was the
// tokens " " and " Lily", and a metric of first tokens compared " " with " ".
// A token's text is now taken as a prompt or, failing that, as text within
// one, so " Lily", "Lily" and "." each name one token.
func TestLogitDiffTakesOneTokenASide(t *testing.T) {
	m := nb.Open(sharedtest.Stories(t), nb.Backend("cpu"))
	lily := m.Token("Lily")
	require.Equal(t, " Lily", m.Pieces([]int32{lily})[0])
	require.Equal(t, lily, m.Token(" Lily"))
	require.Equal(t, ".", m.Pieces([]int32{m.Token(".")})[0])
	require.PanicsWithError(t, `nb.LogitDiff: "Lily" and " Lily" are the same token " Lily": their difference is always 0`,
		func() { m.LogitDiff("Lily", " Lily") })
	require.PanicsWithError(t, `nb.LogitDiff: " Lily Tim" is 3 tokens [" " " Lily" " Tim"], not one (a token may also be given by its id)`,
		func() { m.LogitDiff(" Lily Tim", "x") })
	tr := m.Prefill("Once upon a time there was a little girl named", nb.Capture("logits"))
	logits := nb.Must(tr.Get("logits"))
	last := logits.Data[(logits.Shape[0]-1)*logits.Shape[1]:]
	tim := m.Token("Tim")
	want := float64(last[lily] - last[tim])
	require.InDelta(t, want, m.LogitDiff(" Lily", " Tim")(tr), 1e-6)
	require.InDelta(t, want, m.LogitDiff(lily, int(tim))(tr), 1e-6, "ids")
	require.Greater(t, want, 1.0, "the model expects Lily here")
}

// Continued text was tokenized as a new prompt: a BOS and SentencePiece's
// space mid-sequence, which heads then attended to.
func TestContinuedTextIsTokenizedAsPartOfTheWhole(t *testing.T) {
	m := nb.Open(sharedtest.Stories(t), nb.Backend("cpu"))
	whole := m.Prefill("Once upon a time there was", nb.Capture("logits"))
	m.Prefill("Once upon a time")
	rest := m.Prefill(" there was", nb.Continue(), nb.Capture("logits"))
	require.Equal(t, []string{" there", " was"}, m.Pieces(rest.Tokens))
	require.Equal(t, whole.Tokens[len(whole.Tokens)-2:], rest.Tokens)
	a, b := nb.Must(whole.Get("logits")), nb.Must(rest.Get("logits"))
	require.InDeltaSlice(t, a.Data[len(a.Data)-len(b.Data):], b.Data, 1e-4, "the same last position")
	// Continuing an empty session is a fresh prompt, with its BOS.
	fresh := nb.Open(sharedtest.Stories(t), nb.Backend("cpu"))
	require.Equal(t, whole.Tokens, fresh.Prefill("Once upon a time there was", nb.Continue()).Tokens)
}

// Open("", "cpu", "vulkan") once opened on the CPU and said nothing of "vulkan".
func TestOpenTakesOneBackend(t *testing.T) {
	_, err := nb.TryOpen("", nb.Backend("cpu"), nb.Backend("vulkan"))
	require.EqualError(t, err, `nb: open "": one backend, not 2 (["cpu" "vulkan"]): to split a model over devices, use Placement`)
}
