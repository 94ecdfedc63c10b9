package vk

import (
	"structs"
	"unsafe"

	"github.com/ebitengine/purego"
)

// VK_KHR_cooperative_matrix and VK_NV_cooperative_matrix2, written by hand
// from the Vulkan registry: Debian's (1.3.239), which the generator reads
// and layout_test.go's C headers come from, predates both.
const (
	StructureTypePhysicalDeviceCooperativeMatrixFeaturesKHR   StructureType = 1000506000
	StructureTypePhysicalDeviceCooperativeMatrix2FeaturesNV   StructureType = 1000593000
	StructureTypePhysicalDeviceCooperativeMatrix2PropertiesNV StructureType = 1000593002
)

// PhysicalDeviceCooperativeMatrixFeaturesKHR is VkPhysicalDeviceCooperativeMatrixFeaturesKHR.
type PhysicalDeviceCooperativeMatrixFeaturesKHR struct {
	_                                   structs.HostLayout
	SType                               StructureType
	PNext                               unsafe.Pointer
	CooperativeMatrix                   Bool32
	CooperativeMatrixRobustBufferAccess Bool32
}

// PhysicalDeviceCooperativeMatrix2FeaturesNV is VkPhysicalDeviceCooperativeMatrix2FeaturesNV.
type PhysicalDeviceCooperativeMatrix2FeaturesNV struct {
	_                                     structs.HostLayout
	SType                                 StructureType
	PNext                                 unsafe.Pointer
	CooperativeMatrixWorkgroupScope       Bool32
	CooperativeMatrixFlexibleDimensions   Bool32
	CooperativeMatrixReductions           Bool32
	CooperativeMatrixConversions          Bool32
	CooperativeMatrixPerElementOperations Bool32
	CooperativeMatrixTensorAddressing     Bool32
	CooperativeMatrixBlockLoads           Bool32
}

// PhysicalDeviceCooperativeMatrix2PropertiesNV is VkPhysicalDeviceCooperativeMatrix2PropertiesNV.
type PhysicalDeviceCooperativeMatrix2PropertiesNV struct {
	_                                                   structs.HostLayout
	SType                                               StructureType
	PNext                                               unsafe.Pointer
	CooperativeMatrixWorkgroupScopeMaxWorkgroupSize     uint32
	CooperativeMatrixFlexibleDimensionsMaxDimension     uint32
	CooperativeMatrixWorkgroupScopeReservedSharedMemory uint32
}

// StructureTypeCooperativeMatrixFlexibleDimensionsPropertiesNV is its sType.
const StructureTypeCooperativeMatrixFlexibleDimensionsPropertiesNV StructureType = 1000593001

// ScopeWorkgroup is VK_SCOPE_WORKGROUP_KHR.
const ScopeWorkgroup = 2

// CooperativeMatrixFlexibleDimensionsPropertiesNV is VkCooperativeMatrixFlexibleDimensionsPropertiesNV.
type CooperativeMatrixFlexibleDimensionsPropertiesNV struct {
	_                      structs.HostLayout
	SType                  StructureType
	PNext                  unsafe.Pointer
	MGranularity           uint32
	NGranularity           uint32
	KGranularity           uint32
	AType                  ComponentTypeNV
	BType                  ComponentTypeNV
	CType                  ComponentTypeNV
	ResultType             ComponentTypeNV
	SaturatingAccumulation Bool32
	Scope                  int32
	WorkgroupInvocations   uint32
}

// FlexibleDimensions calls vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV
// of inst (found on demand: the generated commands predate it); nil where
// the instance does not have it.
func (f *Funcs) FlexibleDimensions(inst Instance, pd PhysicalDevice) ([]CooperativeMatrixFlexibleDimensionsPropertiesNV, error) {
	const name = "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"
	fn, _, _ := purego.SyscallN(f.getInstanceProcAddr, uintptr(inst), uintptr(unsafe.Pointer(CString(name))))
	if fn == 0 {
		return nil, nil
	}
	var n uint32
	if r, _, _ := purego.SyscallN(fn, uintptr(pd), uintptr(unsafe.Pointer(&n)), 0); check(name, Result(int32(r))) != nil || n == 0 {
		return nil, check(name, Result(int32(r)))
	}
	props := make([]CooperativeMatrixFlexibleDimensionsPropertiesNV, n)
	for i := range props {
		props[i].SType = StructureTypeCooperativeMatrixFlexibleDimensionsPropertiesNV
	}
	r, _, _ := purego.SyscallN(fn, uintptr(pd), uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))
	return props[:min(int(n), len(props))], check(name, Result(int32(r)))
}
