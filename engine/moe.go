package engine

import (
	"fmt"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// moeBuffers are a mixture's scratch: the router's logits, each token's
// chosen experts and weights, the chosen experts' outputs, and the rows every
// expert takes, in expert order (a token's row once for each of its experts).
type moeBuffers struct {
	logits, ids, weights, out backend.Tensor
	x, gate, up, y            backend.Tensor
	routing                   backend.Tensor // backend.ExpertRouting's
}

func (m *moeBuffers) needs(c *model.Config, t int) []need {
	k := c.ExpertsUsed
	return []need{
		{"moe_router_logits", t * c.Experts, &m.logits},
		{"moe_expert_ids", t * k, &m.ids},
		{"moe_expert_weights", t * k, &m.weights},
		{"moe_expert_out", t * k * c.DModel, &m.out},
		{"moe_x", t * k * c.DModel, &m.x},
		{"moe_gate", t * k * c.ExpertFFN, &m.gate},
		{"moe_up", t * k * c.ExpertFFN, &m.up},
		{"moe_y", t * k * c.DModel, &m.y},
		{"moe_routing", backend.RoutingLen(t*k, c.Experts), &m.routing},
	}
}

// mixture is a mixture-of-experts MLP: the router scores every expert, each
// token goes to its top experts, and their outputs, weighted, are the MLP's.
// Only chosen experts run, each on its tokens alone, lined up by expert:
// on the device where the backend offers ExpertRouting and no hook may
// have edited the experts' ids; otherwise the routing is read back to the
// host (a sync), checked and ordered there. Every expert's products run in
// one MatMulExperts.
func (r *Run) mixture(w *layerWeights, h, out backend.Tensor, here points) bool {
	c, st, m := &r.s.e.Model.Config, r.st, &r.moe
	t, d, k := r.l.t, c.DModel, c.ExpertsUsed
	st.MatMul(h, t, backend.Proj{W: w.router, Dst: m.logits})
	if !here.at(trace.MLPRouterLogits, m.logits) {
		return false
	}
	st.Route(m.ids, m.weights, m.logits, t, c.Experts, k)
	if !here.at(trace.MLPExpertIDs, m.ids) || !here.at(trace.MLPExpertWeights, m.weights) {
		return false
	}
	experts := &w.experts
	if er := r.offers[r.tier].routing; er != nil && !r.hooked(here.name(trace.MLPExpertIDs)) &&
		er.Routable(experts[0]) && er.Routable(experts[1]) && er.Routable(experts[2]) {
		slots := t * k
		er.SortExperts(m.routing, m.ids, t, k, c.Experts)
		st.Edit(m.out, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: slots * d}) // empty slots stay 0
		er.GatherRouted(m.x, h, m.routing, slots, c.Experts, k, d)
		er.MatMulExpertsRouted(m.x, m.routing, slots, backend.ExpertProj{W: experts[0], Dst: m.gate}, backend.ExpertProj{W: experts[1], Dst: m.up})
		st.SwiGLU(m.gate, m.gate, m.up, slots*c.ExpertFFN)
		er.MatMulExpertsRouted(m.gate, m.routing, slots, backend.ExpertProj{W: experts[2], Dst: m.y})
		er.ScatterRouted(m.out, m.y, m.routing, slots, c.Experts, d)
	} else if !r.hostMixture(experts, h) {
		return false
	}
	if !here.at(trace.MLPExpertOut, m.out) {
		return false
	}
	st.WeightedSum(out, m.out, m.weights, t, k, d)
	return true
}

// hostMixture runs the chosen experts with their routing read back, checked
// (a hook may have edited the ids) and lined up on the host.
func (r *Run) hostMixture(experts *[3][]backend.Matrix, h backend.Tensor) bool {
	c, st, m := &r.s.e.Model.Config, r.st, &r.moe
	t, d, k := r.l.t, c.DModel, c.ExpertsUsed
	ids := make([]float32, t*k)
	if err := st.Read(m.ids, 0, ids); err != nil {
		r.fail(err)
		return false
	}
	// Each expert's tokens (rows of h) and their slots (rows of out). The
	// ids may have been edited by a hook: each must be an expert, or -1 for
	// an empty slot, and a token's experts distinct.
	tokens, slots := make([][]int32, c.Experts), make([][]int32, c.Experts)
	for i, v := range ids {
		e := int(v)
		if float32(e) != v || e < -1 || e >= c.Experts {
			r.fail(fmt.Errorf("engine: token %d's expert %d is %g, not an expert of %d or -1 (an empty slot)", i/k, i%k, v, c.Experts))
			return false
		}
		if e < 0 {
			continue
		}
		if n := len(tokens[e]); n > 0 && tokens[e][n-1] == int32(i/k) {
			r.fail(fmt.Errorf("engine: token %d lists expert %d twice", i/k, e))
			return false
		}
		tokens[e] = append(tokens[e], int32(i/k))
		slots[e] = append(slots[e], int32(i))
	}
	var order, orderSlots []int32 // the tokens and slots of every expert's rows, in expert order
	var runs []backend.ExpertRun
	for e, rows := range tokens {
		if len(rows) > 0 {
			runs = append(runs, backend.ExpertRun{Expert: e, First: len(order), Rows: len(rows)})
			order, orderSlots = append(order, rows...), append(orderSlots, slots[e]...)
		}
	}
	st.Edit(m.out, backend.Edit{Op: backend.EditFill, Rows: 1, Cols: t * k * d}) // empty slots stay 0
	if n := len(order); n > 0 {
		st.GatherRows(m.x, h, order, d)
		st.MatMulExperts(m.x, runs, backend.ExpertProj{W: experts[0], Dst: m.gate}, backend.ExpertProj{W: experts[1], Dst: m.up})
		st.SwiGLU(m.gate, m.gate, m.up, n*c.ExpertFFN)
		st.MatMulExperts(m.gate, runs, backend.ExpertProj{W: experts[2], Dst: m.y})
		st.ScatterRows(m.out, m.y, orderSlots, d)
	}
	return true
}
