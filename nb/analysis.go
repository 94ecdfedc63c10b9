package nb

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/floats"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/trace"
)

// Must returns v, or panics with err: for the calls of trace and viz,
// which return errors, in notebook cells, e.g. nb.Must(tr.Pattern(3, 0)).
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Head score kinds, so notebooks need not import trace.
const (
	Induction      = trace.Induction
	PrevToken      = trace.PrevToken
	DuplicateToken = trace.DuplicateToken
)

// Loss runs the prompt with logits at every position and returns the
// per-token cross-entropy loss: element i is the loss of predicting token
// i+1 at position i (len(tokens)-1 values). opts go to the prefill (Fast,
// Hooks, Context).
func (m *Model) Loss(prompt any, opts ...PrefillOption) []float64 {
	m.ready()
	tr := m.Prefill(prompt, append(opts[:len(opts):len(opts)], AllLogits())...)
	defer tr.Close()
	return Must(tr.TokenLoss())
}

// MeanLoss is a metric for sweeps: the mean per-token loss from position
// from on (negative counts from the end). The prefills it scores need
// nb.AllLogits().
func (m *Model) MeanLoss(from int) func(*trace.Trace) float64 {
	m.ready()
	return func(tr *trace.Trace) float64 {
		m.owns("MeanLoss", tr)
		// A position of this trace: the metric scores traces of any length.
		pos := from
		if pos < 0 {
			pos += len(tr.Tokens)
		}
		switch n := len(tr.Tokens); {
		case n < 2:
			panic(fmt.Errorf("nb.MeanLoss(%d): the trace of %s has no losses: a position's loss is that of the next token", from, human.Count(n, "token")))
		case pos < 0 || pos >= n-1:
			panic(fmt.Errorf("nb.MeanLoss(%d): the trace of %d tokens has losses at positions 0..%d (or -%d..-2 from the end)", from, n, n-2, n))
		}
		return Must(tr.MeanLoss(pos))
	}
}

// HeadScores runs prompt capturing every attention pattern and scores every
// head: nb.Induction (on m.RepeatedRandom), nb.PrevToken or
// nb.DuplicateToken. opts go to the prefill.
func (m *Model) HeadScores(prompt any, kind trace.HeadKind, opts ...PrefillOption) trace.Scores {
	m.ready()
	tr := m.Prefill(prompt, append(opts[:len(opts):len(opts)], Capture("blocks.*.attn.hook_pattern"))...)
	defer tr.Close()
	return Must(trace.HeadScores(tr, kind))
}

// Token returns the id of text that encodes to exactly one token (without
// the BOS the tokenizer adds to prompts; as a prompt's text or as text
// inside one, so that "." is a token for SentencePiece, which puts a space
// before a prompt), or id itself given an int or int32.
func (m *Model) Token(token any) int32 {
	m.ready()
	id, err := m.tokenID(token)
	if err != nil {
		panic(fmt.Errorf("nb: %w", err))
	}
	return id
}

// tokenID is Token's id, or why there is none.
func (m *Model) tokenID(token any) (int32, error) {
	inVocab := func(id int) (int32, error) {
		if id < 0 || id >= m.engine().Model.Vocab {
			return 0, fmt.Errorf("token %d is outside the vocabulary of %d", id, m.engine().Model.Vocab)
		}
		return int32(id), nil
	}
	switch t := token.(type) {
	case int32:
		return inVocab(int(t))
	case int:
		return inVocab(t) // checked before the conversion, which would wrap
	case string:
		return m.singleToken(t)
	}
	return 0, fmt.Errorf("a token is a string, int or int32, not %T", token)
}

// singleToken is the id of text that encodes to exactly one token, as a
// prompt (without its BOS) or else as text within one: SentencePiece puts a
// space before a prompt, so " Lily" is the tokens " " and " Lily" as a
// prompt and " Lily" within one, and "." is " " and "." as a prompt.
// Text holding m.Pieces' escapes is read as shown first (`\t` the tab, as
// Position reads it), then as typed (`\t` a backslash and a t, which
// m.Pieces shows as `\\t`).
func (m *Model) singleToken(text string) (int32, error) {
	shown, escaped := undisplay(text)
	if escaped {
		id, err := m.singleTokenAsTyped(shown)
		if err == nil {
			return id, nil
		}
		if id, err2 := m.singleTokenAsTyped(text); err2 == nil {
			return id, nil
		}
		return 0, fmt.Errorf("%w%s", err, displayHint(text))
	}
	id, err := m.singleTokenAsTyped(text)
	if err != nil {
		return 0, fmt.Errorf("%w%s", err, displayHint(text))
	}
	return id, nil
}

// singleTokenAsTyped is singleToken for the text as it is.
func (m *Model) singleTokenAsTyped(text string) (int32, error) {
	bos := m.Tokens("")
	asPrompt := m.Tokens(text)
	if len(asPrompt) >= len(bos) && slices.Equal(asPrompt[:len(bos)], bos) {
		asPrompt = asPrompt[len(bos):]
	}
	if len(asPrompt) == 1 {
		return asPrompt[0], nil
	}
	within, err := m.engine().Model.Tok.Encode(text, tokenizer.Options{Continue: true})
	if err != nil {
		return 0, err
	}
	switch {
	case len(within) == 1:
		return within[0], nil
	case len(asPrompt) == 0:
		return 0, fmt.Errorf("%q encodes to no token (besides BOS): give some text", text)
	}
	return 0, fmt.Errorf("%q is %d tokens %s, not one (a token may also be given by its id)", text, len(asPrompt), quotePieces(m.Pieces(asPrompt)))
}

// unescapes is what undisplay makes of a backslash and each letter.
var unescapes = map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', '\\': '\\'}

// undisplay reverses tokenizer.Display's escapes (\n, \t, \r, \\, \xNN);
// ok is false when text holds none.
func undisplay(text string) (string, bool) {
	if !strings.Contains(text, `\`) {
		return "", false
	}
	var b strings.Builder
	changed := false
	for i := 0; i < len(text); i++ {
		if text[i] == '\\' && i+1 < len(text) {
			if c, ok := unescapes[text[i+1]]; ok {
				b.WriteByte(c)
				i, changed = i+1, true
				continue
			}
			if text[i+1] == 'x' && i+3 < len(text) {
				if v, err := strconv.ParseUint(text[i+2:i+4], 16, 8); err == nil {
					b.WriteByte(byte(v))
					i, changed = i+3, true
					continue
				}
			}
		}
		b.WriteByte(text[i])
	}
	return b.String(), changed
}

// quotePieces lists pieces in quotes as m.Pieces shows them: %q would
// escape their escapes again (a tab, `\t`, as "\\t"). A quote in a piece
// is written \", which cannot be read otherwise: a backslash of the text
// shows as \\.
func quotePieces(pieces []string) string {
	quoted := make([]string, len(pieces))
	for i, p := range pieces {
		quoted[i] = quotePiece(p)
	}
	return "[" + strings.Join(quoted, " ") + "]"
}

// quotePiece quotes a piece as shown: its escapes are already written.
func quotePiece(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }

// displayHint explains the mark token views draw for a space, when text
// holds it.
func displayHint(text string) string {
	if strings.Contains(text, "·") {
		return " (in token views · stands for a space)"
	}
	return ""
}

// Unembed returns the unembedding row of a token (string or id): the
// direction whose dot product with ln_final's output is that token's logit.
func (m *Model) Unembed(token any) []float32 {
	m.ready()
	id := m.Token(token)
	return m.decode("Unembed", m.engine().Model.Output, int(id), int(id)+1)
}

// LogitDirection is Unembed(good) - Unembed(bad): dotted with a stack, the
// attribution to the logit difference.
func (m *Model) LogitDirection(good, bad any) []float32 {
	m.ready()
	g, b := m.Unembed(good), m.Unembed(bad)
	for i := range g {
		g[i] -= b[i]
	}
	return g
}

// decode dequantizes rows [lo, hi) of w, [rows][Cols] row-major. w lives
// in the model file's mapping: a file changed on disk is an error, as the
// engine's, never a fault that kills the notebook's kernel (SIGBUS); a
// Close meanwhile leaves the mapping to the end of the read.
func (m *Model) decode(what string, w *model.Weight, lo, hi int) []float32 {
	f := m.engine().Model.File
	release, err := f.Hold()
	if err != nil {
		panic(fmt.Errorf("nb.%s: %w", what, err))
	}
	defer release()
	if err := f.Changed(); err != nil {
		panic(fmt.Errorf("nb.%s: %w", what, err))
	}
	rowBytes := w.Cols / w.Format.BlockSize * w.Format.BlockBytes
	out := make([]float32, (hi-lo)*w.Cols)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				panic(fmt.Errorf("nb.%s: memory fault reading %s at %#x: was the model file changed on disk while in use? (%v)", what, w.Name, f.Addr(), r))
			}
			panic(r)
		}
	}()
	w.Format.Dequantize(out, w.Data[lo*rowBytes:hi*rowBytes])
	return out
}

// HeadResults is TransformerLens's blocks.L.attn.hook_result, each head's
// output to the residual stream, [T, heads, d_model], from the trace's
// captured hook_z and the layer's W_O, computed on the host.
func (m *Model) HeadResults(tr *trace.Trace, layer int) *trace.Tensor {
	m.owns("HeadResults", tr)
	if layer < 0 || layer >= m.engine().Model.Layers {
		panic(fmt.Errorf("nb.HeadResults: layer %d: the model has %d", layer, m.engine().Model.Layers))
	}
	o := m.engine().Model.Blocks[layer].O
	return Must(tr.HeadResults(layer, m.decode("HeadResults", o, 0, o.Rows)))
}

// CaptureDLA captures what the residual stacks and direct logit attribution
// read: the embeddings (token, and position where the model learns them),
// every attention and MLP output, every hook_z (for heads) and every
// resid_post (the final one sets the norm's scale).
func CaptureDLA() PrefillOnly {
	return Capture("hook_*embed", "blocks.*.hook_attn_out", "blocks.*.hook_mlp_out", "blocks.*.attn.hook_z", "blocks.*.hook_resid_post")
}

// FinalNorm applies the final norm's scaling, taken from the trace's final
// resid_post, and its gain to each component of s (TransformerLens's
// apply_ln_to_stack): trace.Stack.ApplyFinalNorm for an RMSNorm,
// ApplyFinalLayerNorm (which centres each component) for a LayerNorm.
func (m *Model) FinalNorm(tr *trace.Trace, s *trace.Stack) *trace.Stack {
	m.owns("FinalNorm", tr)
	final, err := tr.Resid(m.engine().Model.Layers)
	final = needsDLA("FinalNorm", final, err)
	if m.engine().Model.Norm == model.NormLayer {
		return Must(s.ApplyFinalLayerNorm(final, m.engine().Model.OutNorm, m.engine().Model.NormEps))
	}
	return Must(s.ApplyFinalNorm(final, m.engine().Model.OutNorm, m.engine().Model.NormEps))
}

// needsDLA is Must for the residual stacks, whose missing-capture error
// names nb.CaptureDLA(): the trace's hint names only the first missing
// point, and following it would lead to the next.
func needsDLA[T any](call string, v T, err error) T {
	if errors.Is(err, trace.ErrNotCaptured) {
		panic(fmt.Errorf("nb.%s: %w (prefill with nb.CaptureDLA(): it captures all that the residual stacks and DLA read)", call, err))
	}
	return Must(v, err)
}

func (m *Model) maybeNorm(tr *trace.Trace, s *trace.Stack, applyLN bool) *trace.Stack {
	if applyLN {
		return m.FinalNorm(tr, s)
	}
	return s
}

// AccumulatedResid is TransformerLens's accumulated_resid(apply_ln=...):
// the residual stream before each layer and after the last.
func (m *Model) AccumulatedResid(tr *trace.Trace, applyLN bool) *trace.Stack {
	m.owns("AccumulatedResid", tr)
	s, err := tr.AccumulatedResid()
	return m.maybeNorm(tr, needsDLA("AccumulatedResid", s, err), applyLN)
}

// DecomposeResid is TransformerLens's decompose_resid(apply_ln=...): the
// embedding and every layer's attention and MLP output, which sum to the
// final resid_post.
func (m *Model) DecomposeResid(tr *trace.Trace, applyLN bool) *trace.Stack {
	m.owns("DecomposeResid", tr)
	s, err := tr.DecomposeResid()
	return m.maybeNorm(tr, needsDLA("DecomposeResid", s, err), applyLN)
}

// StackHeadResults is TransformerLens's stack_head_results(apply_ln=...):
// every head's output, labelled "L0H0", ...
func (m *Model) StackHeadResults(tr *trace.Trace, applyLN bool) *trace.Stack {
	m.owns("StackHeadResults", tr)
	wO := make([][]float32, m.engine().Model.Layers)
	for l := range wO {
		o := m.engine().Model.Blocks[l].O
		wO[l] = m.decode("StackHeadResults", o, 0, o.Rows)
	}
	s, err := tr.StackHeadResults(wO)
	return m.maybeNorm(tr, needsDLA("StackHeadResults", s, err), applyLN)
}

// Contribution is one component's direct logit attribution.
type Contribution struct {
	Label string
	Logit float64
}

func (c Contribution) String() string { return fmt.Sprintf("%s %+.3f", c.Label, c.Logit) }

// DLA is direct logit attribution per component at position pos (negative
// counts from the end): each term of DecomposeResid, through the final
// norm, dotted with dir (m.Unembed(token) or m.LogitDirection(good, bad)).
// The terms sum to the logit (difference) at pos, less the final norm's
// bias along dir for a LayerNorm model (GPT-2), which is no component's;
// for Gemma 2, to the logit before its soft-cap.
// The trace needs CaptureDLA().
func (m *Model) DLA(tr *trace.Trace, dir []float32, pos int) []Contribution {
	m.owns("DLA", tr)
	s := m.DecomposeResid(tr, true)
	v := Must(s.Dot(dir, pos))
	out := make([]Contribution, len(v))
	for i := range v {
		out[i] = Contribution{s.Labels[i], v[i]}
	}
	return out
}

// HeadDLA is direct logit attribution per head, [layer][head], at position
// pos: each head's output (HeadResults) through the final norm, dotted with
// dir. A layer's heads sum to its attn_out term of DLA, less the output
// projection's bias where the model has one (GPT-2's b_O), and not at all
// where attn_out is normalised after the heads are summed (Gemma).
func (m *Model) HeadDLA(tr *trace.Trace, dir []float32, pos int) trace.Scores {
	m.owns("HeadDLA", tr)
	v := Must(m.StackHeadResults(tr, true).Dot(dir, pos))
	h := m.engine().Model.Heads
	out := make(trace.Scores, m.engine().Model.Layers)
	for l := range out {
		out[l] = v[l*h : (l+1)*h]
	}
	return out
}

// CaptureNeuronDLA captures what NeuronDLA reads: every layer's MLP
// activations (mlp.hook_post, what W_out multiplies) and resid_post (the
// final one sets the norm's scale).
func CaptureNeuronDLA() PrefillOnly {
	return Capture("blocks.*.mlp.hook_post", "blocks.*.hook_resid_post")
}

// NeuronDLA is direct logit attribution per MLP neuron, [layer][neuron], at
// position pos (negative counts from the end): each neuron's activation
// times its row of W_out (TransformerLens's [d_mlp, d_model]; a column of
// the GGUF's ffn_down), through the final norm, dotted with dir.
// TransformerLens has it as stack_neuron_results(apply_ln=True) @ dir. A
// layer's neurons sum to its mlp_out term of DLA, less W_out's bias where
// the model has one (GPT-2). Neither a mixture of experts nor an MLP whose
// output is normalised again (Gemma) has per-neuron terms, and both are
// refused. The trace needs CaptureNeuronDLA().
func (m *Model) NeuronDLA(tr *trace.Trace, dir []float32, pos int) NeuronScores {
	m.owns("NeuronDLA", tr)
	c := &m.engine().Model.Config
	switch {
	case c.MoE():
		panic(errors.New("nb.NeuronDLA: the model's MLPs are mixtures of experts: each token's neurons are its experts', with no one W_out to attribute through"))
	case c.PostNorms:
		panic(errors.New("nb.NeuronDLA: the model normalises each MLP's output after its neurons are summed, so a neuron has no direct term of its own"))
	case len(dir) != c.DModel:
		panic(fmt.Errorf("nb.NeuronDLA: a direction of %d values; the residual stream has %d", len(dir), c.DModel))
	}
	final, err := tr.Resid(c.Layers)
	final = needsNeuronDLA(final, err)
	row := pos
	if row < 0 {
		row += final.Rows
	}
	if row < 0 || row >= final.Rows {
		panic(fmt.Errorf("nb.NeuronDLA: position %d is out of range: the trace has %d (-1 is the last)", pos, final.Rows))
	}
	pos = row
	// What the final norm makes of a component x along dir is x . v.
	v := make([]float64, c.DModel)
	x := final.Row(pos)
	var mean, ss float64
	if c.Norm == model.NormLayer {
		for i := range v {
			mean += float64(x[i]) / float64(c.DModel)
		}
	}
	for i, xi := range x {
		ss += (float64(xi) - mean) * (float64(xi) - mean)
		v[i] = float64(m.engine().Model.OutNorm[i]) * float64(dir[i])
	}
	if c.Norm == model.NormLayer { // centring x is centring v, its dual
		floats.AddConst(-floats.Sum(v)/float64(c.DModel), v)
	}
	floats.Scale(1/math.Sqrt(ss/float64(c.DModel)+float64(c.NormEps)), v)
	out := make(NeuronScores, c.Layers)
	for l := range out {
		post := needsNeuronDLA(tr.Rows(trace.LayerPoint(l, "mlp.hook_post"), pos, pos+1))
		down := m.engine().Model.Blocks[l].Down // [d_model rows, ffn columns]
		out[l] = make([]float64, down.Cols)
		// W_out^T v, decoded a block of rows at a time: a large model's
		// whole W_out is half a gigabyte of float32s a layer.
		const block = 256
		for lo := 0; lo < down.Rows; lo += block {
			hi := min(lo+block, down.Rows)
			w := m.decode("NeuronDLA", down, lo, hi)
			for i := lo; i < hi; i++ {
				for n, wi := range w[(i-lo)*down.Cols : (i-lo+1)*down.Cols] {
					out[l][n] += float64(wi) * v[i]
				}
			}
		}
		for n := range out[l] {
			out[l][n] *= float64(post.Data[n])
		}
	}
	return out
}

// needsNeuronDLA is Must naming CaptureNeuronDLA where a point is missing.
func needsNeuronDLA[T any](v T, err error) T {
	if errors.Is(err, trace.ErrNotCaptured) {
		panic(fmt.Errorf("nb.NeuronDLA: %w (prefill with nb.CaptureNeuronDLA(): it captures all that NeuronDLA reads)", err))
	}
	return Must(v, err)
}

// NeuronScores holds one value per MLP neuron, [layer][neuron].
type NeuronScores [][]float64

// NeuronScore is one neuron's value; it prints as "L2N37 +1.234".
type NeuronScore struct {
	Layer, Neuron int
	Score         float64
}

func (n NeuronScore) String() string { return fmt.Sprintf("L%dN%d %+.3f", n.Layer, n.Neuron, n.Score) }

// NeuronList is neurons in rank order.
type NeuronList []NeuronScore

func (l NeuronList) String() string {
	parts := make([]string, len(l))
	for i, n := range l {
		parts[i] = n.String()
	}
	return strings.Join(parts, ", ")
}

// Top returns the k highest-scoring neurons (ties by layer, then neuron).
func (s NeuronScores) Top(k int) NeuronList { return neuronList(trace.Scores(s).Top(k)) }

// Bottom returns the k lowest-scoring neurons, lowest first.
func (s NeuronScores) Bottom(k int) NeuronList { return neuronList(trace.Scores(s).Bottom(k)) }

func neuronList(h trace.HeadList) NeuronList {
	out := make(NeuronList, len(h))
	for i, x := range h {
		out[i] = NeuronScore{x.Layer, x.Head, x.Score}
	}
	return out
}

// TokenLens is the logit lens for one token (string or id): its
// probability and rank at each layer and position. The trace needs every
// layer's resid_post (Capture("blocks.*.hook_resid_post")).
func (m *Model) TokenLens(tr *trace.Trace, token any) *trace.TokenLens {
	m.owns("TokenLens", tr)
	return Must(m.engine().TokenLens(tr, m.Token(token)))
}

// LensTop is the logit lens at one position with the k tokens each layer
// ranks highest: what the model would predict there if it stopped after
// each layer (the final norm with that layer's own scale, then the
// unembedding, as Lens). TransformerLens has it as the top k of
// model.unembed(ln_final(resid)) per layer. The trace needs every layer's
// resid_post (Capture("blocks.*.hook_resid_post")); pos counts from the
// end when negative.
func (m *Model) LensTop(tr *trace.Trace, pos, k int) LensRanking {
	m.owns("LensTop", tr)
	if k < 1 {
		panic(fmt.Errorf("nb.LensTop: k is %d; want at least 1", k))
	}
	rows, err := m.engine().LensLogits(tr, pos)
	if err != nil {
		panic(fmt.Errorf("nb.LensTop: %w", err))
	}
	if pos < 0 {
		pos += len(tr.Tokens)
	}
	out := LensRanking{Position: pos, Pos0: tr.Pos0, Token: m.Pieces(tr.Tokens[pos : pos+1])[0]}
	for _, logits := range rows {
		out.Layers = append(out.Layers, m.ranked(trace.TopOf(logits, len(logits)), k))
	}
	return out
}

// LensRanking is what LensTop returns: Layers[l] are the top tokens after
// layer l, highest first.
type LensRanking struct {
	Position int    // the trace's row, as LensTop took it (from 0)
	Pos0     int    // the trace's first row's position in the KV cache
	Token    string // the token there, whose successor is predicted
	Layers   [][]RankedToken
}

// String lays the lens out a layer a line.
func (l LensRanking) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "logit lens at position %d", l.Position)
	if l.Pos0 > 0 {
		fmt.Fprintf(&b, " of this prefill (%d in the KV cache)", l.Pos0+l.Position)
	}
	fmt.Fprintf(&b, ", after %s:\n", quotePiece(l.Token))
	for i, top := range l.Layers {
		fmt.Fprintf(&b, "  layer %d:", i)
		for _, t := range top {
			fmt.Fprintf(&b, " %s %.1f%%", quotePiece(t.Token), 100*t.Prob)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// SteeringVector is the difference of the residual stream entering layer
// (resid_pre) at position pos between prompts a and b (negative pos counts
// from each prompt's end): adding it steers toward a, away from b. Use it
// with Steer, or engine.AddVector at trace.LayerPoint(layer, "hook_resid_pre").
// opts go to both prefills.
func (m *Model) SteeringVector(a, b any, layer, pos int, opts ...PrefillOption) []float32 {
	m.ready()
	row := func(prompt any) []float32 {
		name := trace.LayerPoint(layer, "hook_resid_pre")
		tr := m.Prefill(prompt, append(opts[:len(opts):len(opts)], Capture(name))...)
		defer tr.Close()
		r := Must(tr.Point(name))
		p := pos
		if p < 0 {
			p += r.Rows
		}
		if p < 0 || p >= r.Rows {
			panic(fmt.Errorf("nb.SteeringVector: position %d is outside %s's %d tokens", pos, describe(prompt), r.Rows))
		}
		return r.Row(p)
	}
	va, vb := row(a), row(b)
	for i := range va {
		va[i] -= vb[i]
	}
	return va
}

// Steer adds alpha*vec to the residual stream entering layer, at the
// given positions of the prefill (every position when none are given;
// negative ones count from the end; one named twice is steered once): the
// use SteeringVector's result is made for. In a generation, the positions
// given are the prompt's; with none, the generated tokens are steered too.
func Steer(layer int, vec []float32, alpha float32, positions ...int) Option {
	return func(s *settings) {
		s.o.Hooks = append(s.o.Hooks, engine.AddVector(trace.LayerPoint(layer, "hook_resid_pre"), vec, alpha, positions))
		if positions != nil {
			s.promptOnly = append(s.promptOnly, len(s.o.Hooks)-1)
		}
	}
}

// Position returns the position of the first token of prompt whose piece
// (as m.Pieces shows it) is piece, for hooks and steering at one token.
func (m *Model) Position(prompt any, piece string) int {
	m.ready()
	ids := Must(m.tokens(prompt))
	pieces := m.Pieces(ids)
	// As shown ("\\treturn") or as typed, with a real tab ("\treturn").
	for _, p := range []string{piece, tokenizer.Display(piece)} {
		if i := slices.Index(pieces, p); i >= 0 {
			return i
		}
	}
	panic(fmt.Errorf("nb.Position: no token of the prompt is %q; its pieces are %s%s", piece, quotePieces(pieces), displayHint(piece)))
}

// describe names a prompt in an error: text quoted, ids by their count.
func describe(prompt any) string {
	if text, ok := prompt.(string); ok {
		return fmt.Sprintf("%q", text)
	}
	return fmt.Sprintf("the prompt of %T", prompt)
}
