package vulkan

import (
	"fmt"
	"unsafe"

	"github.com/stratalab/strata/backend"
)

// MatMulExperts runs each projection of a mixture's experts on the GROUPED
// variant of matmul_coop.comp, matmul.comp or matvec.comp (planExperts):
// each row of workgroups takes a tile of one run's rows and reads its
// expert's weight at that expert's word of one binding. Experts of one UploadGroup share a
// buffer: one dispatch takes every run. Others run a dispatch each, their
// weight bound on its own.
func (s *stream) MatMulExperts(x backend.Tensor, runs []backend.ExpertRun, outs ...backend.ExpertProj) {
	cols, err := backend.CheckExperts(x, runs, outs)
	if err != nil {
		s.fail(fmt.Errorf("vulkan: %w", err))
		return
	}
	rows, taken := 0, 0 // rows, and runs that have some
	for _, r := range runs {
		rows += r.Rows
		taken += min(r.Rows, 1)
	}
	if rows > 0 {
		s.matMulExperts(x, cols, rows, taken, runs, nil, outs)
	}
}

// MatMulExpertsRouted implements backend.ExpertRouting: MatMulExperts with
// each call's tiles written on the device (experttiles.comp) from the
// routing, as many as slots rows could need, the empty ones returning at
// once.
func (s *stream) MatMulExpertsRouted(x, routing backend.Tensor, slots int, outs ...backend.ExpertProj) bool {
	for _, o := range outs {
		if !s.Routable(o.W) {
			return false
		}
	}
	cols, err := backend.CheckExperts(x, nil, outs)
	if err != nil {
		s.fail(fmt.Errorf("vulkan: %w", err))
		return true
	}
	rt := s.tensorOf(routing)
	experts := len(outs[0].W)
	if !s.fits("experts' matmul", []*tensor{rt, s.tensorOf(x)}, backend.RoutingLen(slots, experts), slots*cols) {
		return true
	}
	for i, o := range outs {
		if n := o.W[0].Rows(); o.Dst.Len()/n < slots || len(o.W) != experts {
			s.fail(fmt.Errorf("vulkan: experts' matmul: projection %d's output of %d elements is too short for %d rows of %d, or its experts are not %d",
				i, o.Dst.Len(), slots, n, experts))
			return true
		}
	}
	if slots > 0 {
		s.matMulExperts(x, cols, slots, min(slots, experts), nil, rt, outs)
	}
	return true
}

// Routable implements backend.ExpertRouting: the experts' weights are of
// one UploadGroup's buffer, which one dispatch binds.
func (s *stream) Routable(w []backend.Matrix) bool {
	if len(w) == 0 {
		return false
	}
	m0, ok := w[0].(*matrix)
	if !ok || m0 == nil || m0.buf.size > uint64(s.b.phys.props.Limits.MaxStorageBufferRange) {
		return false
	}
	for _, w := range w {
		m, ok := w.(*matrix)
		if !ok || m == nil || m.buf != m0.buf || *m.f != *m0.f || m.scaleBase != m0.scaleBase {
			return false
		}
	}
	return true
}

// matMulExperts records the products of rows of x (taken runs of them
// hold some, on average) by the runs' experts: with runs from the host, or
// from the routing on the device (runs nil).
func (s *stream) matMulExperts(x backend.Tensor, cols, rows, taken int, runs []backend.ExpertRun, routing *tensor, outs []backend.ExpertProj) {
	xs := s.tensorOf(x)
	if xs == nil {
		return
	}
	exact := s.precision != backend.PrecisionFast
	var table []uint32
	var calls []expertCall
	for _, o := range outs {
		dst := s.tensorOf(o.Dst)
		if dst == nil {
			return
		}
		ms := make([]*matrix, len(o.W))
		shared := true
		for e, w := range o.W {
			if ms[e] = s.matrixOf(w); ms[e] == nil {
				return
			}
			shared = shared && ms[e].buf == ms[0].buf && *ms[e].f == *ms[0].f && ms[e].scaleBase == ms[0].scaleBase
		}
		shared = shared && ms[0].buf.size <= uint64(s.b.phys.props.Limits.MaxStorageBufferRange)
		// Each call's tiles, then its experts' words, from a multiple of 256
		// bytes: where a binding may start. m gives the format and shape of
		// every expert the call takes.
		call := func(m *matrix, rs []backend.ExpertRun, w use, bases []uint32) {
			plan := planExperts(s.tuning, s.b.dev, exact, rows/taken, shapeOf(m))
			bm := expertTileRows(plan)
			for len(table)%backend.SlotAlign != 0 {
				table = append(table, 0)
			}
			at := len(table)
			if routing != nil {
				table = append(table, make([]uint32, 3*(int(ceilDiv(rows, bm))+len(bases)))...)
			}
			for _, r := range rs {
				for first := r.First; first < r.First+r.Rows; first += bm {
					table = append(table, uint32(first), uint32(r.First+r.Rows), uint32(r.Expert))
				}
			}
			c := expertCall{plan: plan, m: m, dst: dst, w: w, at: uint32(at), tiles: uint32(len(table)-at) / 3, bm: uint32(bm), experts: uint32(len(bases))}
			c.bases = uint32(len(table) - at)
			calls = append(calls, c)
			table = append(table, bases...)
		}
		if shared {
			bases := make([]uint32, len(ms))
			for e, m := range ms {
				bases[e] = uint32(m.off / 4)
			}
			call(ms[0], runs, use{buf: ms[0].buf}, bases)
			continue
		}
		for _, r := range runs {
			if m := ms[r.Expert]; r.Rows > 0 {
				bases := make([]uint32, r.Expert+1) // the run's expert starts where its binding does
				call(m, []backend.ExpertRun{r}, use{buf: m.buf, bind: m.off, bindSize: m.size}, bases)
			}
		}
	}
	if !s.begin() {
		return
	}
	if s.groupsTable = s.helper(s.groupsTable, 4*uint64(len(table))); s.groupsTable == nil {
		return
	}
	s.writeBytes(s.groupsTable, 0, unsafe.Slice((*byte)(unsafe.Pointer(&table[0])), 4*len(table)))
	for _, c := range calls {
		if routing != nil {
			s.dispatch("experttiles", nil, []use{{buf: s.groupsTable, write: true}, routing.reads()},
				pushWords(&expertTilesPush{c.experts, c.bm, c.tiles, c.at}), 1, 1, 1)
		}
		// The bias and the float16 bindings go unread but still need buffers.
		uses := []use{xs.reads(), c.w, c.dst.writes(), xs.reads()}
		g := use{buf: s.groupsTable, bind: 4 * uint64(c.at)}
		push := matmulPush{uint32(xs.n / cols), uint32(c.m.w.Rows), uint32(cols), c.m.scaleBase, 0}
		switch c.plan.kernel {
		case gemmCoop:
			splitW := exact && !c.m.f.exactInHalf()
			s.dispatch("matmul_coop_"+c.m.f.suffix, c.plan.tile.spec(exact, 0, 0, b2u(splitW), true), append(uses, xs.reads(), xs.reads(), g),
				pushWords(&coopPush{matmulPush: push, basesBase: c.bases}), ceilDiv(c.m.w.Rows, c.plan.tile.bn()), c.tiles, 1)
		case gemmTiled:
			s.dispatch("matmul_"+c.m.f.suffix, []uint32{b2u(!exact), 1}, append(uses, g), pushWords(&tiledPush{push, c.bases}),
				ceilDiv(c.m.w.Rows, tile), c.tiles, 1)
		default:
			s.matvec(c.plan, c.m, append(uses, g), tiledPush{push, c.bases}, c.tiles, true)
		}
	}
}

// expertCall is one dispatch of a MatMulExperts: its tiles' entries start
// at word at of the groups table, its experts' words bases words later.
type expertCall struct {
	plan             projPlan
	m                *matrix // an expert's: the format and shape of all the call takes
	dst              *tensor
	w                use
	at, tiles, bases uint32
	bm, experts      uint32 // rows of x a tile; experts the routing counts (routed)
}

var _ backend.ExpertRouting = (*stream)(nil)

// SortExperts implements backend.ExpertRouting on sortexperts.comp: a
// workgroup an expert.
func (s *stream) SortExperts(routing, ids backend.Tensor, rows, k, experts int) {
	r, x := s.tensorOf(routing), s.tensorOf(ids)
	if experts <= 0 || experts > maxGroups || k <= 0 {
		s.fail(fmt.Errorf("vulkan: sorting slots among %d experts, %d a token: want 1 to %d experts and a slot or more", experts, k, maxGroups))
		return
	}
	if !s.fits("sortexperts", []*tensor{r, x}, backend.RoutingLen(rows*k, experts), rows*k) {
		return
	}
	s.dispatch("sortexperts", nil, []use{r.writes(), x.reads()}, pushWords(&sortExpertsPush{uint32(rows * k), uint32(experts)}),
		uint32(experts), 1, 1)
}

// GatherRouted implements backend.ExpertRouting (rows.comp, GATHER and
// ROUTED).
func (s *stream) GatherRouted(dst, src, routing backend.Tensor, slots, experts, k, cols int) {
	s.moveRouted("gather_routed", dst, src, routing, slots, experts, k, cols)
}

// ScatterRouted implements backend.ExpertRouting (rows.comp, ROUTED).
func (s *stream) ScatterRouted(dst, src, routing backend.Tensor, slots, experts, cols int) {
	s.moveRouted("scatter_routed", dst, src, routing, slots, experts, 0, cols)
}

// moveRouted gathers (k > 0: a slot's token is slot / k) or scatters (k 0)
// the routed rows. The routing's slots are below slots, as SortExperts
// wrote them, so that every row moved is within the tensors checked here.
func (s *stream) moveRouted(name string, dst, src, routing backend.Tensor, slots, experts, k, cols int) {
	d, x, r := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(routing)
	if d == nil || x == nil || r == nil || slots == 0 {
		return
	}
	if experts <= 0 || k < 0 || cols <= 0 {
		s.fail(fmt.Errorf("vulkan: %s of rows of %d among %d experts, %d slots a token", name, cols, experts, k))
		return
	}
	srcRows := slots
	if k > 0 {
		srcRows = int(ceilDiv(slots, k))
	}
	if !s.fits(name, []*tensor{d, x, r}, slots*cols, srcRows*cols, backend.RoutingLen(slots, experts)) {
		return
	}
	gx, gy, gz := grid1(slots*cols, 256)
	s.dispatch(name, nil, []use{d.writes(), x.reads(), r.reads()},
		pushWords(&gatherPush{uint32(slots), uint32(cols), uint32(max(k, 1)), uint32(experts)}), gx, gy, gz)
}
