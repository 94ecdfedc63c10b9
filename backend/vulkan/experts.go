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
	xs := s.tensorOf(x)
	if xs == nil {
		return
	}
	rows, taken := 0, 0 // rows, and runs that have some
	for _, r := range runs {
		rows += r.Rows
		taken += min(r.Rows, 1)
	}
	if rows == 0 {
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
			for _, r := range rs {
				for first := r.First; first < r.First+r.Rows; first += bm {
					table = append(table, uint32(first), uint32(r.First+r.Rows), uint32(r.Expert))
				}
			}
			c := expertCall{plan: plan, m: m, dst: dst, w: w, at: uint32(at), tiles: uint32(len(table)-at) / 3}
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
}
