package vulkan

import (
	"errors"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/stratalab/strata/gpu/vulkan/vk"
)

// maxQueries is how many commands of one submission get timestamps.
const maxQueries = 4096

// StageTime is the GPU time spent in one kind of command, measured by
// timestamps written after each command. Commands that run without a
// barrier between them overlap, so times are attributed approximately.
type StageTime struct {
	Name  string // shader variant, or "copy" or "fill"
	Stage string // "gemm", "attention", "norm", "copy" or "other"
	Count int
	Time  time.Duration
}

// stageOf groups commands into the stages a benchmark reports.
func stageOf(name string) string {
	switch {
	case strings.HasPrefix(name, "matmul_"), strings.HasPrefix(name, "matvec_"):
		return "gemm"
	case name == "scores", name == "softmax", name == "mix", name == "flash":
		return "attention"
	case name == "rmsnorm":
		return "norm"
	case name == "copy", name == "fill":
		return "copy"
	}
	return "other"
}

// profile writes a timestamp at the start of a command buffer and after
// each command, naming the command each interval ends with.
type profile struct {
	on    bool
	n     uint32
	names []string
}

// SetProfiling turns timing on or off for streams created afterwards. It
// fails when the device's compute queue has no timestamps.
func (b *Backend) SetProfiling(on bool) error {
	if on && b.timestampNs == 0 {
		return errors.New("vulkan: " + b.phys.info.Name + "'s compute queue has no timestamps")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.profiling = on
	return nil
}

// StageTimes returns the time per command kind since the last call, largest first.
func (b *Backend) StageTimes() []StageTime {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []StageTime
	for _, st := range b.stageTimes {
		out = append(out, *st)
	}
	clear(b.stageTimes)
	slices.SortFunc(out, func(x, y StageTime) int { return int(y.Time - x.Time) })
	return out
}

func (p *profile) begin(s *stream) {
	if !p.on {
		return
	}
	s.b.f.CmdResetQueryPool(s.r.cmd, s.r.queries, 0, maxQueries)
	s.b.f.CmdWriteTimestamp(s.r.cmd, vk.PipelineStageTopOfPipeBit, s.r.queries, 0)
	p.n, p.names = 1, p.names[:0]
}

func (p *profile) stamp(s *stream, name string) {
	if !p.on || p.n >= maxQueries {
		return
	}
	s.b.f.CmdWriteTimestamp(s.r.cmd, vk.PipelineStageBottomOfPipeBit, s.r.queries, p.n)
	p.names = append(p.names, name)
	p.n++
}

// collect reads the finished submission's timestamps into the backend's totals.
func (p *profile) collect(s *stream) {
	if !p.on || p.n < 2 {
		return
	}
	sc := s.r.sc
	if _, err := s.b.f.GetQueryPoolResults(s.b.device, s.r.queries, 0, p.n, uintptr(8*p.n), unsafe.Pointer(&sc.stamps[0]), 8,
		vk.QueryResult64Bit|vk.QueryResultWaitBit); err != nil {
		s.fail(err)
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, name := range p.names {
		st := b.stageTimes[name]
		if st == nil {
			st = &StageTime{Name: name, Stage: stageOf(name)}
			b.stageTimes[name] = st
		}
		st.Count++
		st.Time += time.Duration(float64(sc.stamps[i+1]-sc.stamps[i]) * b.timestampNs)
	}
}
