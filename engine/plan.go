package engine

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
)

// ParsePlacement reads a placement as the command line writes it:
// comma-separated tiers DEVICE:FIRST-LAST (or DEVICE:LAYER), e.g.
// "0:0-13,1:14-27". Each entry is a tier of its own on the device of that
// index, even when two entries name one device (two logical devices on one
// GPU). Together the entries must cover the model's layers once each; tiers
// are numbered in layer order, the embedding goes with the first layer and
// the head with the last. It returns the placement and each tier's device.
func ParsePlacement(s string, layers int) (Placement, []int, error) {
	type entry struct{ dev, first, last int }
	var es []entry
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		dev, rng, ok := strings.Cut(f, ":")
		a, b, isRange := strings.Cut(rng, "-")
		if !isRange {
			b = a
		}
		d, err1 := strconv.Atoi(dev)
		first, err2 := strconv.Atoi(a)
		last, err3 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || err3 != nil || d < 0 || first < 0 {
			return Placement{}, nil, fmt.Errorf("%q is not DEVICE:FIRST-LAST with numbers from 0 (e.g. 0:0-13,1:14-27)", f)
		}
		if last < first {
			return Placement{}, nil, fmt.Errorf("%q runs backwards: layer %d comes after %d", f, first, last)
		}
		if last >= layers {
			return Placement{}, nil, fmt.Errorf("layer %d is beyond the model, which has %d layers (0 to %d)", last, layers, layers-1)
		}
		es = append(es, entry{d, first, last})
	}
	slices.SortFunc(es, func(x, y entry) int { return x.first - y.first })
	p := Placement{Layers: make([]int, layers)}
	devs := make([]int, len(es))
	next := 0 // the first layer not yet placed
	for i, e := range es {
		if e.first < next {
			prev := es[i-1]
			return Placement{}, nil, fmt.Errorf("%s in both %d:%d-%d and %d:%d-%d", span(e.first, min(e.last, prev.last)), prev.dev, prev.first, prev.last, e.dev, e.first, e.last)
		}
		if e.first > next {
			return Placement{}, nil, fmt.Errorf("%s on no device", span(next, e.first-1))
		}
		for l := e.first; l <= e.last; l++ {
			p.Layers[l] = i
		}
		devs[i] = e.dev
		next = e.last + 1
	}
	if next < layers {
		return Placement{}, nil, fmt.Errorf("%s on no device (the model has %d layers)", span(next, layers-1), layers)
	}
	p.Head = len(es) - 1
	return p, devs, nil
}

// span says "layer a is" or "layers a-b are".
func span(a, b int) string {
	if a == b {
		return fmt.Sprintf("layer %d is", a)
	}
	return fmt.Sprintf("layers %d-%d are", a, b)
}

// Device is memory that tiers may take: a device's name and free bytes.
type Device struct {
	Name string
	Free int64
}

// PlanRequest says what a plan must hold besides the weights: a session's
// KV cache and one prefill's scratch and capture.
type PlanRequest struct {
	Capacity int // KV cache positions
	Tokens   int // the prefill's length
	// Lens, where set, are the lengths of a batch's prompts
	// (Session.PrefillBatch), packed in place of Tokens: each prompt's
	// attention scores and patterns are its own [heads, T_i, T_i].
	Lens    []int
	Options Options
	// WeightBytes is a weight's size where the tiers hold it (a GPU
	// backend may repack a format larger); nil: its size in the file, as
	// the CPU maps it.
	WeightBytes func(*model.Weight) int64
}

// weightBytes is w's size as q counts it.
func (q PlanRequest) weightBytes(w *model.Weight) int64 {
	switch {
	case w == nil:
		return 0
	case q.WeightBytes != nil:
		return q.WeightBytes(w)
	}
	return int64(len(w.Data))
}

// TierNeed is the memory one tier needs, in bytes.
type TierNeed struct {
	Weights int64 // resident weights of the parts it holds
	Cache   int64 // its layers' KV cache
	Scratch int64 // its share of a prefill's buffers
	Capture int64 // the captures of its points
}

// Total sums the parts.
func (n TierNeed) Total() int64 { return addBytes(n.Weights, n.Cache, n.Scratch, n.Capture) }

// Needs says what each tier of p needs for model m and the request: a tier
// with layers holds all of a layer's scratch, the head's tier the logits.
// A nil model, or a placement on a negative tier, needs nothing that can
// be said: nil.
func Needs(m *model.Model, p Placement, q PlanRequest) []TierNeed {
	if m == nil || min(p.Embed, p.Head, slices.Min(append([]int{0}, p.Layers...))) < 0 {
		return nil
	}
	c := &m.Config
	out := make([]TierNeed, p.Tiers())
	out[p.Embed].Weights += q.weightBytes(m.Embed) + q.weightBytes(m.PosEmbed)
	switch {
	case !m.TiedEmbd:
		out[p.Head].Weights += q.weightBytes(m.Output)
	case p.Head != p.Embed:
		out[p.Head].Weights += q.weightBytes(m.Embed)
	}
	out[p.Head].Weights += 4 * int64(len(m.OutNorm)+len(m.OutNormBias))
	for i, t := range p.Layers {
		if i < len(m.Blocks) {
			out[t].Weights += layerBytes(&m.Blocks[i], q)
		}
	}
	lens := []int{max(q.Tokens, 0)}
	if len(q.Lens) > 0 {
		lens = make([]int, len(q.Lens))
		for i, n := range q.Lens {
			lens[i] = max(n, 0)
		}
	}
	tokens, over := 0, false
	for _, n := range lens {
		tokens += n
		over = over || tokens < 0 || overflows(c, tokens, 0, 0)
	}
	if over || overflows(c, tokens, 0, max(q.Capacity, 0)) {
		for t := range out {
			out[t].Cache, out[t].Scratch, out[t].Capture = MaxEstimate, MaxEstimate, MaxEstimate
		}
		return out
	}
	cache := 4 * 2 * int64(max(q.Capacity, 0)) * int64(c.KVDim())
	for _, t := range p.Layers {
		out[t].Cache += cache
	}
	l := packedLayout(c, lens, 0, q.Options)
	for i, n := range l.arenas {
		out[p.tierOfPoint(l.arenaPoints[i])].Capture += 4 * int64(n)
	}
	for t := range out {
		for _, n := range (&scratch{}).needs(c, l, q.Options, p.role(t)) {
			out[t].Scratch += 4 * int64(n.n)
		}
		out[t].Scratch += 4 * int64(gemmPacking(c, l, p.role(t)))
	}
	return out
}

// layerBytes is a layer's weights as resident: packed matrices, float32 vectors.
func layerBytes(b *model.Layer, q PlanRequest) int64 {
	n := int64(0)
	for _, w := range []*model.Weight{b.Q, b.K, b.V, b.O, b.Gate, b.Up, b.Down, b.Router} {
		n += q.weightBytes(w)
	}
	for _, x := range b.Experts {
		n += q.weightBytes(x.Gate) + q.weightBytes(x.Up) + q.weightBytes(x.Down)
	}
	for _, v := range [][]float32{b.AttnNorm, b.FFNNorm, b.AttnNormBias, b.FFNNormBias, b.AttnPostNorm, b.FFNPostNorm,
		b.QBias, b.KBias, b.VBias, b.OBias, b.QNorm, b.KNorm, b.UpBias, b.DownBias} {
		n += 4 * int64(len(v))
	}
	return n
}

// Plan is a placement over devices: each tier's device (an index into the
// devices planned over) and what each tier needs.
type Plan struct {
	Placement
	Devices []int
	Needs   []TierNeed
}

// Flag writes the plan as --placement takes it, devices and not tiers
// ("0:0-13,0:14-27" for two tiers on device 0), so that it can be given
// back; the embedding's and head's devices follow where they are not the
// first and last layers'.
func (p Plan) Flag() string {
	var parts []string
	for _, s := range p.segments() {
		parts = append(parts, fmt.Sprintf("%d:%d-%d", p.Devices[s.tier], s.first, s.last))
	}
	out := strings.Join(parts, ",")
	if n := len(p.Layers); n > 0 && (p.Embed != p.Layers[0] || p.Head != p.Layers[n-1]) {
		out += fmt.Sprintf(" (embedding on device %d, head on device %d)", p.Devices[p.Embed], p.Devices[p.Head])
	}
	return out
}

// NewPlan is the plan of placement p with its tiers on devices devs.
func NewPlan(m *model.Model, p Placement, devs []int, q PlanRequest) (Plan, error) {
	if m == nil {
		return Plan{}, errNoModel
	}
	if err := p.check(&m.Config, len(devs)); err != nil {
		return Plan{}, err
	}
	return Plan{Placement: p, Devices: slices.Clone(devs), Needs: Needs(m, p, q)}, nil
}

var errNoModel = errors.New("plan: no model (nil)")

// ErrDoesNotFit is wrapped by the error of a plan whose tiers need more
// memory than their devices have free.
var ErrDoesNotFit = errors.New("the placement does not fit")

// Check refuses a plan that needs more of a device than it has free,
// saying, for each device short, what its tiers need and how much is
// missing. Tiers on one device add up.
func (pl Plan) Check(devs []Device) error {
	if len(pl.Needs) != len(pl.Devices) {
		return fmt.Errorf("plan: %d tiers on devices but %d tiers' needs (make plans with NewPlan or PlanPlacement)", len(pl.Devices), len(pl.Needs))
	}
	used := make([]int64, len(devs))
	for t, d := range pl.Devices {
		if d < 0 || d >= len(devs) {
			return fmt.Errorf("plan: tier %d is on device %d; there are %d devices (0 to %d)", t, d, len(devs), len(devs)-1)
		}
		used[d] = addBytes(used[d], pl.Needs[t].Total())
	}
	var short []string
	for d, u := range used {
		if u <= devs[d].Free {
			continue
		}
		var tiers []string
		for t, td := range pl.Devices {
			if td == d {
				tiers = append(tiers, pl.describe(t))
			}
		}
		short = append(short, fmt.Sprintf("device %d (%s) has %s free; %s: %s short",
			d, devs[d].Name, human.Bytes(devs[d].Free), strings.Join(tiers, " and "), human.Bytes(u-devs[d].Free)))
	}
	if short != nil {
		return fmt.Errorf("%w: %s", ErrDoesNotFit, strings.Join(short, "; "))
	}
	return nil
}

// describe says what tier t holds and needs, for messages and tables.
func (pl Plan) describe(t int) string {
	n := pl.Needs[t]
	return fmt.Sprintf("tier %d (%s) needs %s (weights %s, KV cache %s, scratch %s, capture %s)", t, pl.holds(t),
		human.Bytes(n.Total()), human.Bytes(n.Weights), human.Bytes(n.Cache), human.Bytes(n.Scratch), human.Bytes(n.Capture))
}

// holds lists the parts on tier t: "embedding, layers 0-13, head".
func (pl Plan) holds(t int) string {
	var parts []string
	if pl.Embed == t {
		parts = append(parts, "embedding")
	}
	for _, s := range pl.segments() {
		if s.tier != t {
			continue
		}
		if s.first == s.last {
			parts = append(parts, fmt.Sprintf("layer %d", s.first))
		} else {
			parts = append(parts, fmt.Sprintf("layers %d-%d", s.first, s.last))
		}
	}
	if pl.Head == t {
		parts = append(parts, "head")
	}
	return strings.Join(parts, ", ")
}

// String is a table of the plan: a line per tier with its device, what it
// holds and what it needs.
func (pl Plan) String() string {
	var b strings.Builder
	for t := range pl.Needs {
		fmt.Fprintf(&b, "device %d: %s\n", pl.Devices[t], pl.describe(t))
	}
	return b.String()
}

// PlanPlacement places m over devs in order: the embedding, the layers and
// the head go on the first device until the next part does not fit beside
// those before it, then on the next device, as one tier per device used. A
// model that fits the first device stays whole there. When the devices run
// out, the error says which part found no room, how much the model needs,
// and what the devices have.
func PlanPlacement(m *model.Model, devs []Device, q PlanRequest) (Plan, error) {
	if m == nil {
		return Plan{}, errNoModel
	}
	c := &m.Config
	if len(devs) == 0 {
		return Plan{}, errors.New("plan: no devices to place the model on")
	}
	n := c.Layers + 2 // the embedding, the layers, the head
	tierOf := make([]int, n)
	// total is what tier t needs with parts 0..i placed, the rest elsewhere.
	total := func(t, i int) int64 {
		part := func(j int) int {
			if j <= i {
				return tierOf[j]
			}
			return t + 1
		}
		p := Placement{Embed: part(0), Head: part(n - 1), Layers: make([]int, c.Layers)}
		for l := range p.Layers {
			p.Layers[l] = part(l + 1)
		}
		return Needs(m, p, q)[t].Total()
	}
	d, devices := 0, []int{0}
	for i := range n {
		t := len(devices) - 1
		tierOf[i] = t
		for total(t, i) > devs[devices[t]].Free {
			if d++; d >= len(devs) {
				var free int64
				for _, x := range devs {
					free += x.Free
				}
				where := fmt.Sprintf("the %d devices, which have %s free together", len(devs), human.Bytes(free))
				if len(devs) == 1 {
					where = fmt.Sprintf("the one device, which has %s free", human.Bytes(free))
				}
				return Plan{}, fmt.Errorf("%w: %s finds no room on %s; the model needs about %s (weights, KV cache of %s, scratch and capture of %s)",
					ErrDoesNotFit, partName(i, n), where, human.Bytes(Needs(m, OneTier(c.Layers), q)[0].Total()), human.Count(q.Capacity, "position"), human.Count(q.Tokens, "token"))
			}
			if i > 0 && tierOf[i-1] == t { // the tier holds parts: start the next
				devices = append(devices, d)
				t++
				tierOf[i] = t
			} else { // an empty tier moves on
				devices[t] = d
			}
		}
	}
	p := Placement{Embed: tierOf[0], Layers: slices.Clone(tierOf[1 : n-1]), Head: tierOf[n-1]}
	pl, err := NewPlan(m, p, devices, q)
	if err != nil {
		return Plan{}, err
	}
	return pl, pl.Check(devs)
}

// partName names part i of the n that PlanPlacement places.
func partName(i, n int) string {
	switch i {
	case 0:
		return "the embedding"
	case n - 1:
		return "the output head"
	}
	return fmt.Sprintf("layer %d", i-1)
}
