package nb_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

func TestPrefillCapturesWhatWasAsked(t *testing.T) {
	m := nb.Open("")
	tr := m.Prefill("func main() {", nb.Capture("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post"))
	T := len(tr.Tokens)
	require.Equal(t, m.Pieces(tr.Tokens), tr.Pieces)
	require.Len(t, tr.Names, 2*m.Config().Layers+1, "patterns, resid_post, and the last position's logits")
	require.Equal(t, []int{m.Config().Heads, T, T}, tr.Tensor("blocks.0.attn.hook_pattern").Shape)
	require.Len(t, tr.Predicted, 1)

	first := nb.Layers(1, 1)
	tr = m.Prefill("func main() {", nb.Capture("blocks.*.hook_resid_post"), first)
	require.True(t, tr.Has("blocks.1.hook_resid_post"))
	require.False(t, tr.Has("blocks.0.hook_resid_post"))

	_, err := m.TryPrefill(3.5)
	require.ErrorContains(t, err, "a prompt is a string or token ids")
	require.Panics(t, func() { m.Prefill("x", nb.Capture("nope")) })
}

func TestStepsEndLikeAOneShotPrefill(t *testing.T) {
	m := nb.Open("")
	prompt := "for i := 0; i < n; i++ {"
	want := m.Prefill(prompt, nb.Capture("*"))
	s := m.Start(prompt)
	layers := []int{}
	for s.Next() {
		layers = append(layers, s.Layer())
		require.True(t, s.Trace().Has(trace.LayerPoint(s.Layer(), "hook_resid_post")))
	}
	require.Equal(t, []int{0, 1, 2, 3}, layers)
	require.Equal(t, 3, s.Layer(), "past the last layer, the last layer ran last")
	got := s.Finish()
	require.Equal(t, 3, s.Layer())
	for _, n := range want.Names {
		require.Equal(t, want.Tensor(n).Data, got.Tensor(n).Data, n)
	}
}

// Steps report errors without panicking: nil steps, and steps a later
// prefill took over; Close hands an unfinished run's buffers back.
func TestStepsSayWhyTheyStopped(t *testing.T) {
	var none *nb.Steps
	require.EqualError(t, none.Err(), "nb: nil *Steps (use Model.Start)")
	require.False(t, none.Next())
	require.Equal(t, -1, none.Layer())

	m := nb.Open("")
	s := m.Start("x := 1")
	require.True(t, s.Next())
	require.NoError(t, s.Err())
	m.Prefill("y := 2")
	require.False(t, s.Next())
	require.Error(t, s.Err(), "the prefill took the steps' buffers")

	s = m.Start("x := 1")
	require.True(t, s.Next())
	s.Close()
	require.False(t, s.Next())
	require.Equal(t, m.Prefill("x := 1").Predicted, m.Start("x := 1").Finish().Predicted, "the model works on")
}

func TestContinueUsesTheCache(t *testing.T) {
	m := nb.Open("")
	ids := m.Tokens("package main\n\nimport \"fmt\"\n")
	whole := m.Prefill(ids, nb.Capture("blocks.3.hook_resid_post"))
	m.Prefill(ids[:5])
	rest := m.Prefill(ids[5:], nb.Continue(), nb.Capture("blocks.3.hook_resid_post"))
	require.Equal(t, 5, rest.Pos0)
	d := m.Config().DModel
	got, want := rest.Tensor("blocks.3.hook_resid_post").Data, whole.Tensor("blocks.3.hook_resid_post").Data[5*d:]
	for i := range want {
		require.InDelta(t, want[i], got[i], float64(1e-4*(1+abs(want[i]))))
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestRepeatedRandomAndPatching(t *testing.T) {
	m := nb.Open("")
	ids := m.RepeatedRandom(10, 1)
	bos := len(m.Tokens(""))
	require.Len(t, ids, bos+20)
	require.Equal(t, ids[bos:bos+10], ids[bos+10:])

	clean, corrupt := m.Tokens("x := a + b"), m.Tokens("x := a - b")
	diff := -1
	for i := range clean {
		if clean[i] != corrupt[i] {
			require.Equal(t, -1, diff, "the prompts differ in one token")
			diff = i
		}
	}
	metric := m.LogitDiff(" b", " c")
	cleanScore, corruptScore := metric(m.Prefill(clean)), metric(m.Prefill(corrupt))
	res := m.PatchResid(clean, corrupt, metric).Patched
	require.Len(t, res, m.Config().Layers)
	// At layer 0 the residual stream is the embedding: patching the one
	// differing position gives the clean run, any other changes nothing.
	for p := range clean {
		want := corruptScore
		if p == diff {
			want = cleanScore
		}
		require.InDelta(t, want, res[0][p], 1e-9, "position %d", p)
	}
}

func TestShowOutsideANotebookWritesFiles(t *testing.T) {
	nb.ShowDir = t.TempDir()
	nb.Show(fakeFigure{}, nil)
	files, err := os.ReadDir(nb.ShowDir)
	require.NoError(t, err)
	require.Len(t, files, 1)
	data, err := os.ReadFile(filepath.Join(nb.ShowDir, files[0].Name()))
	require.NoError(t, err)
	require.Equal(t, "png", string(data))
	nb.Show(nil, errors.New("shown, not panicking"))
}

type fakeFigure struct{}

func (fakeFigure) Encode(w io.Writer, format string) error {
	_, err := w.Write([]byte(format))
	return err
}

// The default model learned structure: an induction head and a
// previous-token head, scored as usual over a batch of repeated random
// token sequences (the mean over 8 sequences per head; MODEL.md).
func TestDefaultModelHasInductionAndPreviousTokenHeads(t *testing.T) {
	m := nb.Open("")
	const period, batch = 40, 8
	L, H := m.Config().Layers, m.Config().Heads
	ind, prev := make([]float64, L*H), make([]float64, L*H)
	for seed := range uint64(batch) {
		tr := m.Prefill(m.RepeatedRandom(period, seed+1), nb.Capture("blocks.*.attn.hook_pattern"))
		for l := 0; l < L; l++ {
			p := tr.Tensor(trace.LayerPoint(l, "attn.hook_pattern"))
			si, err := trace.InductionScores(p, period)
			require.NoError(t, err)
			sp, err := trace.PrevTokenScores(p)
			require.NoError(t, err)
			for h := 0; h < H; h++ {
				ind[l*H+h] += si[h] / batch
				prev[l*H+h] += sp[h] / batch
			}
		}
	}
	bi, bp := slices.Index(ind, slices.Max(ind)), slices.Index(prev, slices.Max(prev))
	t.Logf("induction: layer %d head %d scores %.3f; previous-token: layer %d head %d scores %.3f", bi/H, bi%H, ind[bi], bp/H, bp%H, prev[bp])
	require.GreaterOrEqual(t, ind[bi], 0.5)
	require.GreaterOrEqual(t, prev[bp], 0.5)
}

// On a SentencePiece vocabulary half of whose ids are byte fallback
// (stories260K: 256 of 512), the induction probe draws only tokens of
// text: byte tokens made its first copy cost 15.9 nats a token, past
// a uniform guess's ln(512) = 6.2.
func TestRepeatedRandomDrawsOrdinaryTokens(t *testing.T) {
	m := nb.Open(sharedtest.Stories(t), nb.Backend("cpu"))
	ids := m.RepeatedRandom(100, 3)
	for _, id := range ids[1:] {
		require.True(t, m.Engine().Model.Tok.IsOrdinary(id), "token %d %q", id, m.Pieces([]int32{id})[0])
	}
}

// Outside a live notebook Explore has no sliders to offer: it says so
// beside the one figure it writes (a new user saw only a file's path).
func TestExploreOutsideANotebookSaysSo(t *testing.T) {
	nb.ShowDir = t.TempDir()
	m := nb.Open("", nb.Backend("cpu"))
	tr := m.Prefill("x := 1", nb.Capture("blocks.0.attn.hook_pattern"))
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	nb.Explore(tr, time.Second)
	os.Stdout = stdout
	require.NoError(t, w.Close())
	said, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, string(said), "nb.Explore: no live notebook here, so no sliders: layer 0 head 0 is shown")
	files, err := os.ReadDir(nb.ShowDir)
	require.NoError(t, err)
	require.Len(t, files, 1)
}
