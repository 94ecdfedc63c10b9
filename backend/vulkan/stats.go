package vulkan

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"structs"
	"unsafe"

	"github.com/stratalab/strata/backend/vulkan/vk"
)

// VK_KHR_pipeline_executable_properties, for KernelStatistics: the enum
// values the generated package leaves out, and the statistic struct, whose
// value is a union the generator does not lay out.
const (
	structureTypePhysicalDevicePipelineExecutablePropertiesFeaturesKHR vk.StructureType = 1000269000
	structureTypePipelineInfoKHR                                       vk.StructureType = 1000269001
	structureTypePipelineExecutablePropertiesKHR                       vk.StructureType = 1000269002
	structureTypePipelineExecutableInfoKHR                             vk.StructureType = 1000269003
	structureTypePipelineExecutableStatisticKHR                        vk.StructureType = 1000269004
	pipelineCreateCaptureStatisticsBitKHR                                               = 0x40
)

type pipelineExecutableStatisticKHR struct {
	_           structs.HostLayout
	SType       vk.StructureType
	PNext       unsafe.Pointer
	Name        [256]byte
	Description [256]byte
	Format      uint32 // 0 bool32, 1 int64, 2 uint64, 3 float64
	Value       uint64
}

// KernelStats is what the driver reports of one compiled kernel: its
// statistics by name (registers, shared memory, spills: the names are the
// driver's own).
type KernelStats struct {
	Kernel string
	Spec   []uint32 // its specialization constants, padded with zeros to 9
	Stats  map[string]string
}

// statisticsChain returns the feature struct that lets the driver report
// kernels' statistics, where it can.
func (in *instance) statisticsChain(d *physical) (*vk.PhysicalDevicePipelineExecutablePropertiesFeaturesKHR, bool) {
	if !slices.Contains(d.extensions, "VK_KHR_pipeline_executable_properties") || !in.f.HasGetPhysicalDeviceFeatures2() {
		return nil, false
	}
	f := &vk.PhysicalDevicePipelineExecutablePropertiesFeaturesKHR{SType: structureTypePhysicalDevicePipelineExecutablePropertiesFeaturesKHR}
	f2 := &vk.PhysicalDeviceFeatures2{SType: vk.StructureTypePhysicalDeviceFeatures2, PNext: unsafe.Pointer(f)}
	var p runtime.Pinner
	p.Pin(f)
	in.f.GetPhysicalDeviceFeatures2(d.handle, f2)
	p.Unpin()
	if f.PipelineExecutableInfo == 0 {
		return nil, false
	}
	return f, true // as the query filled it: the feature on, nothing chained
}

// KernelStatistics reports the driver's statistics of every kernel the
// backend has compiled, sorted by name. It fails where the backend was not
// opened with Options.KernelStatistics or the driver reports none.
func (b *Backend) KernelStatistics() ([]KernelStats, error) {
	if !b.stats {
		return nil, fmt.Errorf("vulkan: %s was not opened to report kernel statistics (Options.KernelStatistics), or its driver cannot", b.phys.info.Name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return nil, errClosed
	}
	var out []KernelStats
	var pin runtime.Pinner
	defer pin.Unpin()
	for key, p := range b.pipelines {
		info := &vk.PipelineInfoKHR{SType: structureTypePipelineInfoKHR, Pipeline: p.handle}
		pin.Pin(info)
		var n uint32
		if _, err := b.f.GetPipelineExecutablePropertiesKHR(b.device, info, &n, nil); err != nil {
			return nil, fmt.Errorf("vulkan: statistics of %s: %w", key.name, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("vulkan: the driver reports no executables for %s", key.name)
		}
		props := make([]vk.PipelineExecutablePropertiesKHR, n)
		for i := range props {
			props[i].SType = structureTypePipelineExecutablePropertiesKHR
		}
		if _, err := b.f.GetPipelineExecutablePropertiesKHR(b.device, info, &n, &props[0]); err != nil {
			return nil, fmt.Errorf("vulkan: statistics of %s: %w", key.name, err)
		}
		k := KernelStats{Kernel: key.name, Spec: slices.Clone(key.spec[:]), Stats: map[string]string{}}
		for e := range props[:n] {
			ei := &vk.PipelineExecutableInfoKHR{SType: structureTypePipelineExecutableInfoKHR, Pipeline: p.handle, ExecutableIndex: uint32(e)}
			pin.Pin(ei)
			var m uint32
			if _, err := b.f.GetPipelineExecutableStatisticsKHR(b.device, ei, &m, nil); err != nil {
				return nil, fmt.Errorf("vulkan: statistics of %s: %w", key.name, err)
			}
			if m == 0 {
				continue
			}
			st := make([]pipelineExecutableStatisticKHR, m)
			for i := range st {
				st[i].SType = structureTypePipelineExecutableStatisticKHR
			}
			pin.Pin(&st[0])
			if _, err := b.f.GetPipelineExecutableStatisticsKHR(b.device, ei, &m, unsafe.Pointer(&st[0])); err != nil {
				return nil, fmt.Errorf("vulkan: statistics of %s: %w", key.name, err)
			}
			for _, s := range st[:m] {
				var v string
				switch s.Format {
				case 0:
					v = fmt.Sprint(uint32(s.Value) != 0)
				case 1:
					v = fmt.Sprint(int64(s.Value))
				case 3:
					v = fmt.Sprint(math.Float64frombits(s.Value))
				default:
					v = fmt.Sprint(s.Value)
				}
				k.Stats[vk.GoString(s.Name[:])] = v
			}
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y KernelStats) int {
		return cmp.Or(strings.Compare(x.Kernel, y.Kernel), slices.Compare(x.Spec, y.Spec))
	})
	return out, nil
}
