package tokenizer

import "fmt"

// symbol is a piece of the text being merged: word[start:start+n], linked
// to its neighbours; n == 0 once merged into the symbol on its left.
type symbol struct {
	start, n   int
	prev, next int
}

// bigram is a candidate merge of two adjacent symbols. Both tokenizers
// take the best one first and, on a tie, the leftmost (llama.cpp).
type bigram struct {
	prio        float64 // lower merges first: -score for SPM, the rank for BPE
	left, right int
	size        int // bytes of the merged text, to spot stale entries
}

func (a bigram) before(b bigram) bool {
	return a.prio < b.prio || a.prio == b.prio && a.left < b.left
}

// bigramHeap is a binary min-heap by before.
type bigramHeap struct{ items []bigram }

func (h *bigramHeap) push(b bigram) {
	h.items = append(h.items, b)
	for i := len(h.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.items[i].before(h.items[parent]) {
			break
		}
		h.items[i], h.items[parent] = h.items[parent], h.items[i]
		i = parent
	}
}

func (h *bigramHeap) pop() bigram {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	for i := 0; ; {
		best, l, r := i, 2*i+1, 2*i+2
		if l < last && h.items[l].before(h.items[best]) {
			best = l
		}
		if r < last && h.items[r].before(h.items[best]) {
			best = r
		}
		if best == i {
			break
		}
		h.items[i], h.items[best] = h.items[best], h.items[i]
		i = best
	}
	return top
}

// merger runs llama.cpp's greedy bigram merging over one word. priority
// says whether two adjacent texts (joined = left+right) may merge, and how
// soon.
type merger struct {
	word     string
	symbols  []symbol
	queue    bigramHeap
	pieces   []string // run's result, reused between words
	priority func(left, right, joined string) (float64, bool)
}

// splitChars cuts word into UTF-8 characters by their lead byte, as
// llama.cpp's unicode_len_utf8 does (so invalid bytes group like it).
func (m *merger) splitChars() {
	if cap(m.symbols) < len(m.word) {
		m.symbols = make([]symbol, 0, len(m.word))
		m.queue.items = make([]bigram, 0, len(m.word))
	}
	m.symbols = m.symbols[:0]
	for off := 0; off < len(m.word); {
		n := min(utf8LenFromLead(m.word[off]), len(m.word)-off)
		i := len(m.symbols)
		next := i + 1
		if off+n == len(m.word) {
			next = -1
		}
		m.symbols = append(m.symbols, symbol{start: off, n: n, prev: i - 1, next: next})
		off += n
	}
}

func utf8LenFromLead(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

func (m *merger) text(s symbol) string { return m.word[s.start : s.start+s.n] }

func (m *merger) tryAdd(left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := m.symbols[left], m.symbols[right]
	prio, ok := m.priority(m.text(l), m.text(r), m.word[l.start:l.start+l.n+r.n]) // neighbours are contiguous
	if ok {
		m.queue.push(bigram{prio: prio, left: left, right: right, size: l.n + r.n})
	}
}

// run merges until no candidate is left and returns the surviving symbols'
// texts in order, valid until the next run.
func (m *merger) run() []string {
	for i := 1; i < len(m.symbols); i++ {
		m.tryAdd(i-1, i)
	}
	for len(m.queue.items) > 0 {
		b := m.queue.pop()
		left, right := &m.symbols[b.left], &m.symbols[b.right]
		// A symbol keeps its start, so the same length means the same text.
		if left.n == 0 || right.n == 0 || left.n+right.n != b.size {
			continue
		}
		left.n += right.n
		right.n = 0
		left.next = right.next
		if left.next >= 0 {
			m.symbols[left.next].prev = b.left
		}
		m.tryAdd(left.prev, b.left)
		m.tryAdd(b.left, left.next)
	}
	m.pieces = m.pieces[:0]
	for i := 0; i >= 0 && len(m.symbols) > 0; i = m.symbols[i].next {
		m.pieces = append(m.pieces, m.text(m.symbols[i]))
	}
	return m.pieces
}

// encodeSPM is llama.cpp's llm_tokenizer_spm: merge adjacent pieces whose
// concatenation is a token, highest score first; a piece left that is not a
// token (always a single character, since merges only form tokens) goes out
// as byte tokens.
func (t *Tokenizer) encodeSPM(text string, out []int32) ([]int32, error) {
	m := &merger{
		word: text,
		priority: func(_, _, joined string) (float64, bool) {
			id, ok := t.ids[joined]
			return -float64(t.score(id)), ok
		},
	}
	m.splitChars()
	for _, p := range m.run() {
		if id, ok := t.ids[p]; ok {
			out = append(out, id)
			continue
		}
		var err error
		if out, err = t.appendBytes(out, p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t *Tokenizer) score(id int32) float32 {
	if t.vocab.Scores == nil {
		return 0
	}
	return t.vocab.Scores[id]
}

// appendBytes emits one byte token per byte of raw.
func (t *Tokenizer) appendBytes(out []int32, raw string) ([]int32, error) {
	for i := 0; i < len(raw); i++ {
		id := t.byteTok[raw[i]]
		if id < 0 {
			return nil, fmt.Errorf("tokenizer: %q needs byte 0x%02X, which has no token in the vocabulary", raw, raw[i])
		}
		out = append(out, id)
	}
	return out, nil
}

// encodeBPE is llama.cpp's llm_tokenizer_bpe on one pre-token: byte-level
// encode, merge by rank, and send a result that is not a token out as its
// bytes' tokens.
func (t *Tokenizer) encodeBPE(word string, out []int32, m *merger) ([]int32, error) {
	enc := byteLevelEncode(word)
	if t.ignoreMerges {
		if id, ok := t.ids[enc]; ok {
			return append(out, id), nil
		}
	}
	m.word = enc
	m.splitChars()
	for _, p := range m.run() {
		if id, ok := t.ids[p]; ok {
			out = append(out, id)
			continue
		}
		var err error
		if out, err = t.appendBytes(out, string(byteLevelDecode(p))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t *Tokenizer) newBPEMerger() *merger {
	return &merger{
		priority: func(left, right, _ string) (float64, bool) {
			rank, ok := t.ranks[mergePair{left, right}]
			return float64(rank), ok
		},
	}
}
