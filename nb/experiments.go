package nb

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/trace"
)

// RepeatedRandom returns n random ordinary tokens (tokenizer.IsOrdinary:
// no special, unused or byte-fallback tokens, half of a small SPM
// vocabulary) followed by the same n again (BOS first where the tokenizer
// adds one): the standard probe for induction heads, whose period is n.
func (m *Model) RepeatedRandom(n int, seed uint64) []int32 {
	m.ready()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	tok := m.engine().Model.Tok
	var ids []int32
	if bos := m.Tokens(""); len(bos) > 0 {
		ids = append(ids, bos...)
	}
	if n < 0 || n > (m.engine().Model.Context-len(ids))/2 {
		panic(fmt.Errorf("nb.RepeatedRandom: n = %d: twice n tokens must fit the model's context of %d (n is 0..%d)", n, m.engine().Model.Context, (m.engine().Model.Context-len(ids))/2))
	}
	drawable := false // else the draws below would never end
	for id := range int32(m.engine().Model.Vocab) {
		if drawable = tok.IsOrdinary(id); drawable {
			break
		}
	}
	if n > 0 && !drawable {
		panic(errors.New("nb.RepeatedRandom: the vocabulary has no ordinary token to draw (every one is special, unused or a byte)"))
	}
	var half []int32
	for len(half) < n {
		id := int32(r.IntN(m.engine().Model.Vocab))
		if tok.IsOrdinary(id) {
			half = append(half, id)
		}
	}
	return append(append(ids, half...), half...)
}

// LogitDiffName names LogitDiff(good, bad) for a title, each token as
// Python prints a string (Repr): logit(' err') − logit(' nil').
func (m *Model) LogitDiffName(good, bad any) string {
	m.ready()
	name := func(t any) string {
		id, err := m.tokenID(t)
		if err != nil {
			panic(fmt.Errorf("nb.LogitDiffName: %w", err))
		}
		return "logit(" + Repr(m.Pieces([]int32{id})[0]) + ")"
	}
	return name(good) + " − " + name(bad)
}

// LogitDiff is a patching metric: the last position's logit of good minus
// that of bad, two different tokens, each text of one token (as Token
// takes it: " Mary" and " John") or an id.
func (m *Model) LogitDiff(good, bad any) func(*trace.Trace) float64 {
	m.ready()
	token := func(t any) int32 {
		id, err := m.tokenID(t)
		if err != nil {
			panic(fmt.Errorf("nb.LogitDiff: %w", err))
		}
		return id
	}
	g, b := token(good), token(bad)
	if g == b {
		panic(fmt.Errorf("nb.LogitDiff: %#v and %#v are the same token %q: their difference is always 0", good, bad, m.Pieces([]int32{g})[0]))
	}
	return func(tr *trace.Trace) float64 {
		m.owns("LogitDiff", tr)
		shape := tr.Shape("logits")
		if shape == nil {
			_, err := tr.Get("logits") // says what was captured
			panic(err)
		}
		if len(shape) != 2 || shape[0] < 1 || shape[1] <= int(max(g, b)) {
			panic(fmt.Errorf("nb.LogitDiff: logits of shape %v cannot hold tokens %d and %d", shape, g, b))
		}
		// The last row alone, copied: the trace's memory is not handed out,
		// so closing it gives its memory to the sweep's next prefill.
		l, err := tr.Rows("logits", shape[0]-1, shape[0])
		if err != nil {
			panic(err)
		}
		return float64(l.Data[g] - l.Data[b])
	}
}

// PatchResid is activation patching over the residual stream: for every
// layer and position it runs the corrupted prompt with that layer's
// resid_pre at that position taken from the clean prompt's run, and records
// metric. Both prompts must have the same number of tokens; opts go to every
// prefill (nb.AllLogits() for a loss metric). Patched is [layer][position].
// TransformerLens's get_act_patch_resid_pre; PatchPositions patches the
// other points.
func (m *Model) PatchResid(clean, corrupt any, metric func(*trace.Trace) float64, opts ...PrefillOption) *Patching {
	m.ready()
	return m.patchPositions("PatchResid", clean, corrupt, metric, "hook_resid_pre", opts)
}

// patchable are the layer points PatchPositions takes: a row per position.
var patchable = []string{"hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
	"attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "mlp.hook_pre", "mlp.hook_post"}

// PatchPositions is PatchResid for another of each layer's points: one of
// hook_resid_pre, hook_resid_mid, hook_resid_post, hook_attn_out,
// hook_mlp_out (TransformerLens's get_act_patch_resid_pre, ...,
// get_act_patch_attn_out, get_act_patch_mlp_out); attn.hook_q, hook_k,
// hook_v or hook_z (every head at the position at once; PatchHeadPositions
// takes one head at a time); mlp.hook_pre or mlp.hook_post (a dense MLP's
// hidden units). Patched is [layer][position].
func (m *Model) PatchPositions(clean, corrupt any, metric func(*trace.Trace) float64, point string, opts ...PrefillOption) *Patching {
	m.ready()
	return m.patchPositions("PatchPositions", clean, corrupt, metric, point, opts)
}

// patchPositions is the sweep of PatchPositions and PatchResid, name's.
func (m *Model) patchPositions(name string, clean, corrupt any, metric func(*trace.Trace) float64, point string, opts []PrefillOption) *Patching {
	m.checkSweep(name, metric, opts)
	if !slices.Contains(patchable, point) {
		panic(fmt.Errorf("nb.%s: %q is not one of %s", name, point, strings.Join(patchable, ", ")))
	}
	corruptIDs, src, p := m.baselines(name, clean, corrupt, metric, "blocks.*."+point, opts)
	defer src.Close()
	p.Patched = make(trace.Scores, m.engine().Model.Layers)
	for l := range p.Patched {
		p.Patched[l] = make([]float64, len(corruptIDs))
		for pos := range corruptIDs {
			patch := Hooks(engine.Patch(trace.LayerPoint(l, trace.Point(point)), src, []int{pos}))
			p.Patched[l][pos] = m.score(metric, corruptIDs, append(opts[:len(opts):len(opts)], patch)...)
		}
	}
	warnNonFinite(name, p.Patched, layerPos)
	return p
}

// PromptTest is TransformerLens's utils.test_prompt: how the model rates
// each token of an answer after a prompt (teacher-forced: each answer token
// follows the ones before it), and what it ranks highest there. Print it.
type PromptTest struct {
	Prompt, Answer []string // their pieces; the prompt's with BOS
	Steps          []AnswerStep
}

// AnswerStep is one answer token: its rank (0: the model's top choice),
// logit and probability, and the k tokens the model ranks highest there.
type AnswerStep struct {
	Token string
	Rank  int
	Logit float32
	Prob  float64
	Top   []RankedToken
}

// RankedToken is one of the tokens a model ranks highest.
type RankedToken struct {
	Token string
	Logit float32
	Prob  float64
}

// String is the token quoted, its probability and its logit.
func (r RankedToken) String() string {
	return fmt.Sprintf("%s %.1f%% (logit %.2f)", quotePiece(r.Token), 100*r.Prob, r.Logit)
}

// TopTokens are the k tokens the model ranks highest at position pos of
// tr's logits (negative counts from the end; every position's with
// AllLogits), with their text and probability: TopLogits with what a
// reader wants of it.
func (m *Model) TopTokens(tr *trace.Trace, pos, k int) []RankedToken {
	m.owns("TopTokens", tr)
	if k < 1 {
		panic(fmt.Errorf("nb.TopTokens: k is %d; want at least 1", k))
	}
	shape := tr.Shape("logits")
	if len(shape) != 2 {
		_, err := tr.Get("logits") // says what was captured
		panic(fmt.Errorf("nb.TopTokens: %w", err))
	}
	// The logits' rows are the last positions': every one with AllLogits.
	p := pos
	if p < 0 {
		p += len(tr.Tokens)
	}
	row := p - (len(tr.Tokens) - shape[0])
	if p < 0 || p >= len(tr.Tokens) || row < 0 {
		panic(fmt.Errorf("nb.TopTokens: position %d has no logits: the trace has %d positions (-1 is the last) and logits for the last %d (prefill with nb.AllLogits() for every one)", pos, len(tr.Tokens), shape[0]))
	}
	all, err := tr.TopLogits(row, m.engine().Model.Vocab) // the softmax reads them all
	if err != nil {
		panic(fmt.Errorf("nb.TopTokens: %w", err))
	}
	return m.ranked(all, k)
}

// ranked is the first k of a row's whole ranking (trace.TopOf, highest
// first) with each token's text and probability under the row's softmax.
func (m *Model) ranked(all []trace.TokenLogit, k int) []RankedToken {
	var sum float64 // from the largest logit, all[0]'s
	for _, t := range all {
		sum += math.Exp(float64(t.Logit) - float64(all[0].Logit))
	}
	out := make([]RankedToken, min(k, len(all)))
	for i, t := range all[:len(out)] {
		out[i] = RankedToken{Token: m.Pieces([]int32{t.ID})[0], Logit: t.Logit, Prob: math.Exp(float64(t.Logit)-float64(all[0].Logit)) / sum}
	}
	return out
}

// TestPrompt prefills prompt followed by answer (text tokenized as it
// continues the prompt, so a leading space is the answer's own: " Mary";
// or token ids, without a BOS) and reports each answer token's rank and
// probability and the top k tokens there. opts go to the prefill.
func (m *Model) TestPrompt(prompt, answer any, k int, opts ...PrefillOption) PromptTest {
	m.ready()
	if k < 1 {
		panic(fmt.Errorf("nb.TestPrompt: k is %d; want at least 1", k))
	}
	ids := Must(m.tokens(prompt))
	var ans []int32
	var err error
	if text, ok := answer.(string); ok {
		ans, err = m.engine().Model.Tok.Encode(text, tokenizer.Options{Continue: true})
	} else {
		ans, err = m.tokens(answer)
	}
	if err != nil {
		panic(fmt.Errorf("nb.TestPrompt: answer %s: %w", describe(answer), err))
	}
	if len(ids) == 0 || len(ans) == 0 {
		panic(fmt.Errorf("nb.TestPrompt: the prompt (%d tokens) and the answer (%d tokens) each need one token or more", len(ids), len(ans)))
	}
	tr := m.Prefill(append(slices.Clip(ids), ans...), append(opts[:len(opts):len(opts)], AllLogits())...)
	defer tr.Close()
	out := PromptTest{Prompt: m.Pieces(ids), Answer: m.Pieces(ans)}
	for i, id := range ans {
		row := len(ids) - 1 + i
		logits := Must(tr.Rows("logits", row, row+1)).Data
		prob, rank := trace.ProbRank(logits, int(id))
		step := AnswerStep{Token: out.Answer[i], Rank: rank, Logit: logits[id], Prob: prob, Top: m.ranked(trace.TopOf(logits, len(logits)), k)}
		out.Steps = append(out.Steps, step)
	}
	return out
}

// String lays the test out as TransformerLens prints it.
func (p PromptTest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "prompt: %s\nanswer: %s\n", quotePieces(p.Prompt), quotePieces(p.Answer))
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "answer token %s: rank %d, logit %.2f, probability %.2f%%\n", quotePiece(s.Token), s.Rank, s.Logit, 100*s.Prob)
		for i, t := range s.Top {
			fmt.Fprintf(&b, "  top %d: logit %.2f, probability %.2f%%, %s\n", i, t.Logit, 100*t.Prob, quotePiece(t.Token))
		}
	}
	return b.String()
}
