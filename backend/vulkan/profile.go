package vulkan

import (
	"errors"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/stratalab/strata/backend/vulkan/vk"
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
	name = strings.TrimSuffix(name, "_sg") // a subgroup variant's time counts in its kernel's stage
	switch {
	case strings.HasPrefix(name, "matmul_"), strings.HasPrefix(name, "matvec_"),
		name == "tohalf", strings.HasPrefix(name, "weights16_"): // the cooperative GEMM's inputs in float16
		return "gemm"
	case name == "scores", name == "scores_coop", name == "softmax", name == "mix", name == "mix_coop",
		name == "flash", name == "flash_coop", name == "flash_coop_capture":
		return "attention"
	case name == "rmsnorm", name == "layernorm":
		return "norm"
	case name == "copy", name == "fill":
		return "copy"
	}
	return "other"
}

// profile writes a timestamp at the start of a command buffer and after
// each command, naming (in the frame's stamps) the command each interval
// ends with.
type profile struct {
	on bool
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
	fr := s.frame()
	s.b.f.CmdResetQueryPool(fr.cmd, fr.queries, 0, maxQueries)
	s.b.f.CmdWriteTimestamp(fr.cmd, vk.PipelineStageTopOfPipeBit, fr.queries, 0)
	fr.stamps = fr.stamps[:0]
}

func (p *profile) stamp(s *stream, name string) {
	if !p.on {
		return
	}
	fr := s.frame()
	if len(fr.stamps)+1 >= maxQueries {
		return
	}
	s.b.f.CmdWriteTimestamp(fr.cmd, vk.PipelineStageBottomOfPipeBit, fr.queries, uint32(len(fr.stamps)+1))
	fr.stamps = append(fr.stamps, name)
}

// collect reads a finished submission's timestamps into the backend's totals.
func (p *profile) collect(s *stream, fr *frame) {
	n := uint32(len(fr.stamps)) + 1
	if !p.on || n < 2 {
		return
	}
	sc := s.r.sc
	if _, err := s.b.f.GetQueryPoolResults(s.b.device, fr.queries, 0, n, uintptr(8*n), unsafe.Pointer(&sc.stamps[0]), 8,
		vk.QueryResult64Bit|vk.QueryResultWaitBit); err != nil {
		s.fail(err)
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, name := range fr.stamps {
		st := b.stageTimes[name]
		if st == nil {
			st = &StageTime{Name: name, Stage: stageOf(name)}
			b.stageTimes[name] = st
		}
		st.Count++
		st.Time += time.Duration(float64(sc.stamps[i+1]-sc.stamps[i]) * b.timestampNs)
	}
}
