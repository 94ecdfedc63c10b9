package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// PrefillBatch runs a batch of prompts as one prefill in a new session
// (Session.PrefillBatch), whose KV cache holds them all and is freed as it
// returns. RoPE is that of a session of the model's whole context (Phi-3's
// long factors where it has them), as NewSession(0) takes.
func (e *Engine) PrefillBatch(ctx context.Context, prompts [][]int32, o Options) ([]*trace.Trace, error) {
	if e == nil || e.Model == nil || e.Backend == nil {
		return nil, errNoEngine
	}
	c := &e.Model.Config
	lens := make([]int, len(prompts))
	for i, p := range prompts {
		lens[i] = len(p)
	}
	// The cache holds the largest micro-batch (the session refuses a
	// batch that cannot be split).
	rows, start := 0, 0
	ends, err := MicroBatches(c, lens, o, 0)
	if err != nil {
		ends = []int{len(lens)}
	}
	for _, end := range ends {
		n := 0
		for _, m := range lens[start:end] {
			n += m
		}
		rows, start = max(rows, n), end
	}
	s, err := e.newSession(c.Context, max(rows, 1))
	if err != nil {
		return nil, fmt.Errorf("engine: KV cache of a batch of %d prompts, %d tokens: %w", len(prompts), rows, err)
	}
	defer s.Close()
	return s.PrefillBatch(ctx, prompts, o)
}

// PrefillBatch runs a batch of prompts as one prefill and returns one trace
// per prompt, each equal to what Prefill gives that prompt alone from
// position 0 in this session: bit for bit on the CPU backend, within the
// backends' parity tolerance on a GPU.
//
// The prompts' rows are packed one after another, with no padding, so that
// every matrix product, norm and MLP runs once over all of them; each prompt
// attends only to itself, from position 0, with its own positions for RoPE
// or learned position embeddings, and its keys and values in its own part of
// the session's KV cache, which grows to hold them all (past the model's
// context if need be; each prompt stays within the session's capacity). The
// batch starts from an empty cache, as after Reset, and leaves the session
// at position 0: its prompts lie side by side in the cache, none to
// continue. A refused batch leaves the session as it was. Reusing a
// session for batch after batch reuses its cache and buffers.
//
// The results are one trace per prompt rather than TransformerLens's
// padded [B, T, ...] tensors: prompts of different lengths need no padding
// or attention mask, each trace has its prompt's tokens and positions, and
// every analysis of a trace (logit lens, losses, attribution, figures)
// applies to a prompt of a batch unchanged. Options apply to every prompt:
// Logits selects rows of each prompt (LogitsLast: each prompt's last row),
// and each hook is called once per prompt, with that prompt's rows and
// shape, as in a prefill of that prompt alone, so a hook written for one
// prompt works in a batch (PerPrompt gives each prompt its own hooks, to
// patch each from its own source, say).
//
// Attention scores and patterns, captured or hooked, are each prompt's
// own [heads, T_i, T_i], as alone (a batch packs them one after another,
// not padded to the longest prompt). The capture budget is counted for the whole batch: a batch whose captures
// pass it runs as micro-batches of consecutive prompts that fit
// (MicroBatches), one after another in the session, with the same results;
// only a prompt over the budget alone is refused.
func (s *Session) PrefillBatch(ctx context.Context, prompts [][]int32, o Options) ([]*trace.Trace, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.unlock()
	if ctx == nil {
		return nil, errors.New("engine: nil context (use context.Background())")
	}
	c := &s.e.Model.Config
	if len(prompts) == 0 {
		return nil, errors.New("engine: batch of no prompts")
	}
	lens := make([]int, len(prompts))
	for i, p := range prompts {
		switch {
		case len(p) == 0:
			return nil, fmt.Errorf("engine: prompt %d of the batch is empty", i)
		case len(p) > s.capacity:
			return nil, fmt.Errorf("engine: prompt %d of the batch is %d tokens, which exceed the KV cache of %d positions (the model's context is %d tokens): %w", i, len(p), s.capacity, c.Context, ErrCacheFull)
		}
		if err := checkTokens(c, p, fmt.Sprintf("prompt %d: ", i)); err != nil {
			return nil, err
		}
		lens[i] = len(p)
	}
	if err := checkPerPrompt(o.Hooks, len(prompts)); err != nil {
		return nil, err
	}
	pos := s.Pos()
	s.pos.Store(0) // the layout's, and the batch's, start
	l, err := s.checkPacked(lens, o)
	ends := []int{len(prompts)}
	if errors.Is(err, ErrOverBudget) && len(prompts) > 1 {
		if ends, err = MicroBatches(c, lens, o, 0); err == nil {
			l, err = s.checkPacked(lens[:ends[0]], o)
		}
	}
	if err != nil {
		s.pos.Store(int64(pos)) // a refused batch leaves the session as it was
		return nil, err
	}
	s.endRun(errSuperseded)
	var out []*trace.Trace
	fail := func(err error) ([]*trace.Trace, error) {
		for _, tr := range out {
			tr.Close()
		}
		return nil, err
	}
	start := 0
	for i, end := range ends {
		if i > 0 {
			if l, err = s.checkPacked(lens[start:end], o); err != nil {
				return fail(err)
			}
		}
		l.prompt0 = start
		trs, err := s.runBatch(ctx, l, prompts[start:end], o)
		if err != nil {
			return fail(err)
		}
		out = append(out, trs...)
		start = end
	}
	return out, nil
}

// runBatch runs prompts, laid out as l, as one prefill from position 0.
func (s *Session) runBatch(ctx context.Context, l *layout, prompts [][]int32, o Options) ([]*trace.Trace, error) {
	var packed []int32
	for _, p := range prompts {
		packed = append(packed, p...)
	}
	if len(packed) > s.held {
		if err := s.hold(len(packed)); err != nil {
			return nil, fmt.Errorf("engine: KV cache of a batch of %d prompts, %d tokens: %w", len(prompts), len(packed), err)
		}
	}
	r, err := s.begin(ctx, l, packed, o)
	if err != nil {
		return nil, err
	}
	tr, err := r.finish()
	s.pos.Store(0)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	return r.split(tr, prompts)
}

// MicroBatches splits a batch of prompts of the given lengths into runs of
// consecutive prompts, in order, each as long as fits: its captures within
// o's budget (Options.Budget; 0 is DefaultBudget) and, where limit > 0,
// all it needs (EstimateBatch) within limit bytes. It returns the end of
// each run, one past its last prompt. A prompt that does not fit alone is
// an error naming it (wrapping ErrOverBudget where its captures pass the
// budget).
func MicroBatches(c *model.Config, lens []int, o Options, limit int64) ([]int, error) {
	budget := o.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	fits := func(lens []int) bool {
		est := EstimateBatch(c, lens, o)
		return est.Capture <= budget && (limit <= 0 || est.Total() <= limit)
	}
	if len(lens) == 0 || fits(lens) {
		return []int{len(lens)}, nil
	}
	var ends []int
	for start := 0; start < len(lens); {
		if !fits(lens[start : start+1]) {
			est := EstimateBatch(c, lens[start:start+1], o)
			if est.Capture > budget {
				return nil, fmt.Errorf("engine: prompt %d of the batch (%d tokens) alone captures %s, over the budget of %s (narrow the capture globs or layers, or raise Options.Budget; nb.Budget in a notebook): %w",
					start, lens[start], human.Bytes(est.Capture), human.Bytes(budget), ErrOverBudget)
			}
			return nil, fmt.Errorf("engine: prompt %d of the batch (%d tokens) alone needs %s (scratch %s, capture %s, KV cache %s), over the limit of %s",
				start, lens[start], human.Bytes(est.Total()), human.Bytes(est.Scratch), human.Bytes(est.Capture), human.Bytes(est.Cache), human.Bytes(limit))
		}
		end := start + 1
		for end < len(lens) && fits(lens[start:end+1]) {
			end++
		}
		ends = append(ends, end)
		start = end
	}
	return ends, nil
}

// seqRows calls fn for each prompt of the batch with its first row in the
// packed rows and its number of rows: rows per prompt are its tokens, or
// its LM-head rows for the points after the layers (head).
func (l *layout) seqRows(head bool, fn func(i, first, rows int)) {
	counts := l.lens
	if head {
		counts = l.headRows
	}
	first := 0
	for i, n := range counts {
		fn(i, first, n)
		first += n
	}
}

// batched reports whether the run packs several prompts.
func (l *layout) batched() bool { return len(l.lens) > 1 }

// hook applies the run's hooks at the named point: once over the point's
// values in a prefill of one prompt, once per prompt (its rows) in a batch.
func (r *Run) hook(name string, x backend.Tensor) error {
	if len(r.o.Hooks) == 0 {
		return nil
	}
	shape := trace.ShapeOf(&r.s.e.Model.Config, name, r.l.extent())
	if !r.l.batched() {
		for i := range r.o.Hooks {
			if err := r.applyHook(&r.o.Hooks[i], name, x, shape, 0, r.l.prompt0); err != nil {
				return fmt.Errorf("hook at %s: %w", name, err)
			}
		}
		return nil
	}
	spec, _ := trace.SpecOf(name)
	if _, p := trace.SplitPoint(name); attentionMap(p) {
		heads := r.s.e.Model.Config.Heads
		offs, _ := r.l.mapBlocks(heads)
		for seq, off := range offs {
			for i := range r.o.Hooks {
				if err := r.applyHook(&r.o.Hooks[i], name, x, r.l.mapShape(heads, seq), off, r.l.prompt0+seq); err != nil {
					return fmt.Errorf("hook at %s, prompt %d of the batch: %w", name, r.l.prompt0+seq, err)
				}
			}
		}
		return nil
	}
	rowLen := elements(shape[1:])
	var err error
	r.l.seqRows(spec.Stage == trace.AfterLayers, func(seq, first, rows int) {
		if err != nil || rows == 0 {
			return
		}
		own := append([]int{rows}, shape[1:]...)
		for i := range r.o.Hooks {
			if e := r.applyHook(&r.o.Hooks[i], name, x, own, first*rowLen, r.l.prompt0+seq); e != nil {
				err = fmt.Errorf("hook at %s, prompt %d of the batch: %w", name, r.l.prompt0+seq, e)
				return
			}
		}
	})
	return err
}

// rows is a prompt's rows of a packed tensor of width elements a row; nil
// (and the run failed) where the device cannot bind them apart.
func (r *Run) rows(t backend.Tensor, width, first, n int) backend.Tensor {
	v := r.st.View(t, first*width, n*width)
	if v == nil {
		r.fail(fmt.Errorf("engine: %s cannot bind a view of a batch's rows from row %d (%d elements a row) for a prompt's attention: run the prompts one at a time", r.s.e.BackendName(), first, width))
	}
	return v
}

// rope rotates the queries or keys (heads of them a row) of every prompt
// by its own positions.
func (r *Run) rope(dst, src backend.Tensor, heads, layer int) {
	c := &r.s.e.Model.Config
	rope := r.s.ropeAt(layer)
	if !r.l.batched() {
		r.st.Rope(dst, src, r.l.t, heads, c.HeadDim, r.l.pos0, rope)
		return
	}
	w := heads * c.HeadDim
	r.l.seqRows(false, func(_, first, n int) {
		d, s := r.rows(dst, w, first, n), r.rows(src, w, first, n)
		if d != nil && s != nil {
			r.st.Rope(d, s, n, heads, c.HeadDim, r.l.pos0, rope)
		}
	})
}

// attend runs attention a for every prompt over its own rows of the
// queries, the cache and the output.
func (r *Run) attend(a *backend.Attention) {
	for _, p := range r.prompts(a) {
		r.st.FlashAttention(p)
	}
}

// prompts is attention a split by prompt: a itself for one prompt; for a
// batch, each prompt's over its own rows of the queries, the cache and the
// output, and its own block of the scores and pattern (mapBlocks) where a
// has them. A prompt whose views the device cannot bind is left out, and
// the run failed.
func (r *Run) prompts(a *backend.Attention) []*backend.Attention {
	if !r.l.batched() {
		return []*backend.Attention{a}
	}
	qd, kvd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	offs, _ := r.l.mapBlocks(a.Heads)
	var out []*backend.Attention
	r.l.seqRows(false, func(i, first, n int) {
		b := *a
		b.Q, b.Z = r.rows(a.Q, qd, first, n), r.rows(a.Z, qd, first, n)
		b.K, b.V = r.rows(a.K, kvd, first, n), r.rows(a.V, kvd, first, n)
		b.T = n
		ok := b.Q != nil && b.Z != nil && b.K != nil && b.V != nil
		if a.Scores != nil {
			b.Scores, b.Pattern = r.rows(a.Scores, 1, offs[i], a.Heads*n*n), r.rows(a.Pattern, 1, offs[i], a.Heads*n*n)
			ok = ok && b.Scores != nil && b.Pattern != nil
		}
		if ok {
			out = append(out, &b)
		}
	})
	return out
}

// headInput copies the rows of the residual stream x that get the LM head
// to dst: each prompt's last headRows rows.
func (r *Run) headInput(dst, x backend.Tensor) {
	d, out, end := r.s.e.Model.DModel, 0, 0
	for i, n := range r.l.lens {
		end += n
		rows := r.l.headRows[i]
		r.st.Copy(dst, out*d, x, (end-rows)*d, rows*d)
		out += rows
	}
}

// split makes a batch's packed trace one trace per prompt.
func (r *Run) split(tr *trace.Trace, prompts [][]int32) ([]*trace.Trace, error) {
	out := make([]*trace.Trace, len(prompts))
	for i, p := range prompts {
		out[i] = r.newTrace()
		out[i].Tokens = slices.Clone(p)
		out[i].Pieces = nil
		if tok := r.s.e.Model.Tok; tok != nil {
			for _, id := range p {
				out[i].Pieces = append(out[i].Pieces, tok.Piece(id))
			}
		}
	}
	// A GPU trace is read in one go, not point by point for each prompt.
	if err := tr.Load(); err != nil {
		return nil, fmt.Errorf("engine: reading a batch's trace: %w", err)
	}
	heads := r.s.e.Model.Config.Heads
	offs, _ := r.l.mapBlocks(heads)
	for _, name := range tr.Names {
		if _, p := trace.SplitPoint(name); attentionMap(p) {
			x, err := tr.Get(name)
			if err != nil {
				return nil, fmt.Errorf("engine: splitting a batch's trace: %w", err)
			}
			for i, off := range offs {
				shape := r.l.mapShape(heads, i)
				out[i].Put(name, &trace.Tensor{Shape: shape, Data: slices.Clone(x.Data[off : off+elements(shape)])})
			}
			continue
		}
		spec, _ := trace.SpecOf(name)
		var err error
		r.l.seqRows(spec.Stage == trace.AfterLayers, func(i, first, n int) {
			if err != nil || n == 0 {
				return
			}
			var x *trace.Tensor
			if x, err = tr.Rows(name, first, first+n); err == nil {
				out[i].Put(name, x)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("engine: splitting a batch's trace: %w", err)
		}
	}
	if len(tr.Predicted) > 0 {
		r.l.seqRows(true, func(i, first, n int) {
			out[i].Predicted = slices.Clone(tr.Predicted[first : first+n])
		})
	}
	return out, nil
}
