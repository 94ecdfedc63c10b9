package nb_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// Odd prompts on one model and one session, in sequence: each either runs
// (invalid UTF-8 becomes byte tokens; special-token text stays text) or is
// refused with an error that says why, and a prefill afterwards gives what a
// freshly opened model gives.
func TestOddPromptsThenAPrefillAsIfNothingHappened(t *testing.T) {
	cases := []struct {
		name string
		// path takes the subtest's t: a skip (shared model absent) must
		// come from the goroutine of the test it skips.
		path func(t *testing.T) string
		// roundTrip: decoding gives the text back. Not yet for the
		// SentencePiece encoder, which after invalid UTF-8 byte-encodes the
		// following "▁" (E2 96 81) instead of starting a "▁b" piece, so
		// "\xff bad" decodes as "\xff▁bad" (model/tokenizer, reported).
		roundTrip bool
	}{
		{"default (byte-level BPE)", func(*testing.T) string { return "" }, true},
		{"stories260K (SentencePiece)", func(t *testing.T) string { return sharedtest.Stories(t) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			m, err := nb.TryOpen(path, nb.Backend("cpu"))
			require.NoError(t, err)
			tok, c := m.Engine().Model.Tok, m.Config()
			bos := tok.BOS()

			// Invalid UTF-8 (a lone continuation byte, a UTF-16 surrogate, NUL) runs as byte tokens.
			for _, text := range []string{"\xff\xfe bad", "\xed\xa0\x80", "a\x00b"} {
				tr, err := m.TryPrefill(text)
				require.NoError(t, err, "%q", text)
				require.Equal(t, m.Tokens(text), tr.Tokens)
				require.Greater(t, len(tr.Tokens), 1, "%q", text)
				dec, err := tok.Decode(tr.Tokens[1:])
				require.NoError(t, err)
				if tc.roundTrip {
					require.Equal(t, text, strings.TrimPrefix(dec, " "), "the bytes survive the round trip")
				}
			}

			// Special-token text is ordinary text: the BOS piece written in
			// the prompt does not become the BOS token.
			special := tok.Piece(bos)
			tr, err := m.TryPrefill(special + "hi" + special)
			require.NoError(t, err)
			require.Equal(t, bos, tr.Tokens[0])
			require.NotContains(t, tr.Tokens[1:], bos, "%q was parsed as a control token", special)

			refused := []struct {
				prompt any
				opts   []nb.PrefillOption
				want   string
			}{
				{[]int32{}, nil, "the prompt is empty"},
				{[]int32{bos, int32(c.Vocab)}, nil, "is outside the vocabulary"},
				{[]int{-1}, nil, "token -1 at index 0 is outside the vocabulary"},
				{strings.Repeat("once upon a time ", c.Context), nil, fmt.Sprintf("which exceed the KV cache of %d positions (the model's context is %d tokens)", c.Context, c.Context)},
				{[]int{1<<32 + 5}, nil, fmt.Sprintf("token 4294967301 at index 0 is outside the vocabulary of %d", c.Vocab)},
				{[]int{int(bos), -1 << 40}, nil, "token -1099511627776 at index 1 is outside the vocabulary"},
				{"x", []nb.PrefillOption{nb.Capture("blocks.*.no_such_hook")}, "matches no capture point"},
				{3.5, nil, "a prompt is a string or token ids"},
			}
			for _, r := range refused {
				_, err := m.TryPrefill(r.prompt, r.opts...)
				require.ErrorContains(t, err, r.want, "prompt %.40v", r.prompt)
			}

			// A continuation whose positions run past the cache.
			fill := make([]int32, c.Context-2)
			fill[0] = bos
			_, err = m.TryPrefill(fill)
			require.NoError(t, err)
			_, err = m.TryPrefill([]int32{5, 6, 7}, nb.Continue())
			require.ErrorContains(t, err, fmt.Sprintf("3 tokens at position %d exceed the KV cache of %d positions", c.Context-2, c.Context))

			// A cancelled prefill.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err = m.TryPrefill("abc", nb.Context(ctx))
			require.True(t, errors.Is(err, context.Canceled), "got %v", err)

			const prompt = "Once upon a time"
			got := m.Prefill(prompt, nb.AllLogits())
			fresh, err := nb.TryOpen(path, nb.Backend("cpu"))
			require.NoError(t, err)
			want := fresh.Prefill(prompt, nb.AllLogits())
			require.Equal(t, want.Tokens, got.Tokens)
			require.Equal(t, want.Tensor("logits").Data, got.Tensor("logits").Data)
			require.True(t, slices.Equal(want.Predicted, got.Predicted))
		})
	}
}

// Analyses that decode weights on the host (Unembed, HeadResults, the
// stacks and attributions) read the model file's mapping: after the file
// shrank on disk they crashed the process with SIGBUS; now they say so, as
// a prefill does.
func TestHostAnalysesOfAModelChangedOnDiskAreErrors(t *testing.T) {
	src, err := os.ReadFile(sharedtest.Stories(t))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "copy.gguf")
	require.NoError(t, os.WriteFile(path, src, 0o644))
	m := nb.Open(path, nb.Backend("cpu"))
	tr := m.Prefill("Once upon a time", nb.CaptureDLA())
	defer tr.Close()
	require.NotEmpty(t, m.Unembed(" Lily"))
	require.NoError(t, os.Truncate(path, int64(len(src)/2)))
	for name, call := range map[string]func(){
		"Unembed":          func() { m.Unembed(" Lily") },
		"LogitDirection":   func() { m.LogitDirection(" Lily", " Tim") },
		"HeadResults":      func() { m.HeadResults(tr, 1) },
		"StackHeadResults": func() { m.StackHeadResults(tr, true) },
	} {
		var got error
		func() {
			defer func() { got, _ = recover().(error) }()
			call()
		}()
		require.ErrorContains(t, got, "changed on disk since it was opened", name)
	}
}

func TestNilModelsAndTracesAreNamed(t *testing.T) {
	var m *nb.Model
	require.PanicsWithError(t, "nb: nil *Model (Open failed, or the model was never opened)", func() { m.Pieces([]int32{1}) })
	open := cpuModel(t)
	require.PanicsWithError(t, "nb.HeadResults of a nil trace", func() { open.HeadResults(nil, 0) })
}

// A trace that another model made is refused by name: its vocabulary,
// layers and d_model would index this model's weights wrongly (HeadResults
// returned garbage, LogitDiff a number, DLA a panic about layers).
func TestTracesOfAnotherModelAreRefused(t *testing.T) {
	other := cpuModel(t)
	tr := other.Prefill("func f() {", nb.CaptureDLA(), nb.Capture("blocks.*.hook_resid_post"), nb.AllLogits())
	m := openGenerated(t, "tiny-llama")
	dir := m.Unembed(int32(1))
	for name, call := range map[string]func(){
		"HeadResults":      func() { m.HeadResults(tr, 0) },
		"AccumulatedResid": func() { m.AccumulatedResid(tr, false) },
		"DecomposeResid":   func() { m.DecomposeResid(tr, true) },
		"StackHeadResults": func() { m.StackHeadResults(tr, true) },
		"DLA":              func() { m.DLA(tr, dir, -1) },
		"HeadDLA":          func() { m.HeadDLA(tr, dir, -1) },
		"LogitLens":        func() { m.LogitLens(tr) },
		"TokenLens":        func() { m.TokenLens(tr, int32(1)) },
		"LogitDiff":        func() { m.LogitDiff(int32(1), int32(2))(tr) },
		"FinalNorm":        func() { m.FinalNorm(tr, nil) },
		"LensTop":          func() { m.LensTop(tr, -1, 3) },
	} {
		var got error
		func() {
			defer func() { got, _ = recover().(error) }()
			call()
		}()
		require.ErrorIs(t, got, trace.ErrOtherModel, name)
		require.ErrorContains(t, got, "nb."+name+": the trace is from another model: it was made by gostd-qwen3-4m (qwen3)", name)
	}
	// Its own model reads it.
	require.Len(t, other.DLA(tr, other.Unembed(" {"), -1), 1+2*other.Config().Layers)
}

// Close lets go of the model; every later call says it is closed, and a
// second Close does nothing.
func TestClosedModelsSaySo(t *testing.T) {
	m := nb.Open("", nb.Backend("cpu"))
	require.Len(t, m.Prefill("x := 1").Tokens, 5)
	require.NoError(t, m.Close())
	_, err := m.TryPrefill("x := 1")
	require.EqualError(t, err, "nb: the Model is closed (or was never opened with nb.Open)")
	require.PanicsWithError(t, "nb: the Model is closed (or was never opened with nb.Open)", func() { m.Tokens("x") })
	_, err = m.TryGenerate("x", 2)
	require.ErrorContains(t, err, "closed")
	require.NoError(t, m.Close())
	var none *nb.Model
	require.NoError(t, none.Close())
}

// Issue 47.6 and 47.7: a panic in a Device hook function escaped Try (a
// Host one's was an error), and PatchHead from a nil trace dereferenced it
// in one. Both are errors of the prefill, and the model works after.
func TestDeviceHookPanicsAndNilPatchesAreErrors(t *testing.T) {
	m := cpuModel(t)
	want := m.Prefill("func main() {").Predicted
	_, err := m.TryPrefill("func main() {", nb.Hooks(engine.PatchHead(0, 1, nil)))
	require.ErrorContains(t, err, "hook: PatchHead(0, 1) has no source trace (nil)")
	panics := engine.Hook{Point: "blocks.0.hook_resid_pre", Device: func(string, []int) ([]engine.DeviceEdit, error) {
		panic("a user's bug")
	}}
	_, err = m.TryPrefill("func main() {", nb.Hooks(panics))
	require.ErrorContains(t, err, "its Device function panicked: a user's bug")
	require.Equal(t, want, m.Prefill("func main() {").Predicted, "the model works after")
}

// mappings counts the mappings of path in this process (Linux).
func mappings(t *testing.T, path string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps here")
	}
	return strings.Count(string(maps), path)
}

// Issue 47.8: nb.Model had no Close, and each Open mapped the file and
// uploaded the weights again: 200 Opens grew RSS from 18 MB to 1,087 MB
// with 201 mappings of the file. Models of one file share one engine, each
// with its own session, and Close frees it with the last.
func TestOpenSharesTheEngineAndCloseFreesIt(t *testing.T) {
	w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.F32, 3)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, w.WriteFile(path))
	first := nb.Open(path, nb.Backend("cpu"))
	firstEngine := first.Engine()
	want := first.Prefill("abc").Predicted
	var opened []*nb.Model
	for range 200 { // a notebook re-running its open cell
		m := nb.Open(path, nb.Backend("cpu"))
		require.Same(t, firstEngine, m.Engine())
		require.Equal(t, want, m.Prefill("abc").Predicted)
		opened = append(opened, m)
	}
	require.Equal(t, 1, mappings(t, path), "one mapping of the file for 201 open Models")
	for _, m := range opened {
		require.NoError(t, m.Close())
		require.NoError(t, m.Close(), "again: nothing")
	}
	require.Equal(t, want, first.Prefill("abc").Predicted, "the last open Model still works")
	_, err = opened[0].TryPrefill("abc")
	require.EqualError(t, err, "nb: the Model is closed (or was never opened with nb.Open)")
	require.PanicsWithError(t, "nb: the Model is closed (or was never opened with nb.Open)", func() { opened[0].Prefill("abc") })
	require.NoError(t, first.Close())
	require.Zero(t, mappings(t, path), "the last Close unmaps the file")

	// Opened again, it is a new engine; a Close while another goroutine's
	// call is in progress waits for it.
	again := nb.Open(path, nb.Backend("cpu"))
	require.NotSame(t, firstEngine, again.Engine())
	type result struct {
		tokens []int32
		err    error
	}
	done := make(chan result, 1)
	go func() {
		tr, err := again.TryPrefill("abc")
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{tokens: tr.Predicted}
	}()
	require.NoError(t, again.Close())
	if r := <-done; r.err != nil {
		require.EqualError(t, r.err, "nb: the Model is closed (or was never opened with nb.Open)", "Close came first")
	} else {
		require.Equal(t, want, r.tokens, "the call in progress ended whole")
	}
	require.Zero(t, mappings(t, path))
}

// Issue 47.12: nil stacks and patchings are named, not dereferenced.
func TestNilStacksAndPatchingsAreNamed(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("func main() {", nb.CaptureDLA())
	require.PanicsWithError(t, "trace: final norm of a nil stack or residual stream (stack false, final true)", func() { m.FinalNorm(tr, nil) })
	var p *nb.Patching
	require.PanicsWithError(t, "nb: Normalized of a nil *Patching", func() { p.Normalized() })
}
