package vulkan

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/stratalab/strata/backend/vulkan/vk"
)

// ErrNoValidationLayer is returned by Open when Options.Validation asks for
// the Khronos validation layer and it is not installed.
var ErrNoValidationLayer = errors.New("vulkan: VK_LAYER_KHRONOS_validation is not installed (Debian vulkan-validationlayers)")

// ErrNoDevice wraps the errors that mean this machine has no Vulkan at all:
// no loader, no driver, or no device. Callers fall back to the CPU on it.
var ErrNoDevice = errors.New("no Vulkan device")

const validationLayer = "VK_LAYER_KHRONOS_validation"

// Options says which device to open and how.
type Options struct {
	// Device picks a device by index (as Devices lists them) or by a
	// case-insensitive substring of its name. Empty means the STRATA_DEVICE
	// environment variable, and if that is empty too, the best device: the
	// discrete GPU with the most device-local memory, else an integrated
	// GPU, else a CPU implementation such as lavapipe.
	Device string
	// Validation enables the Khronos validation layer; the errors it reports
	// fail the next Sync. For tests: it slows every call.
	Validation bool
	// PortableGEMM keeps GEMMs, and attention's products, on the portable
	// shared-memory kernels even where the device has cooperative matrices,
	// to compare the two. The STRATA_GEMM=portable environment variable
	// does the same.
	PortableGEMM bool
	// Coop2 opens the device with workgroup-scope cooperative matrices
	// (VK_NV_cooperative_matrix2) where it has them, for matmul_coop2.comp,
	// also where it cannot load them by tensor addressing: staged through
	// shared memory, they ran at 0.78-0.81x of the usual kernel on an H100
	// (docs/PERFORMANCE.md). Where it can, they are used unasked.
	// STRATA_COOP2=on does the same; STRATA_COOP2=off keeps them off.
	Coop2 bool
	// KernelStatistics asks the driver to keep each kernel's compiled
	// statistics (Backend.KernelStatistics), where it can: for tuning.
	KernelStatistics bool
	// Tuning chooses the kernels; nil means DefaultTuning().
	Tuning *Tuning
	// Clamp narrows what kernel choice sees of the device to a smaller
	// device's, so that the kernels that device would run, run here.
	Clamp Clamp
}

// Clamp is a device whose limits Options.Clamp imposes.
type Clamp int

const (
	// ClampNone takes the device as it is.
	ClampNone Clamp = iota
	// ClampApple is an Apple GPU through MoltenVK, which Strata cannot run
	// on here: 32 KiB of shared memory, no cooperative matrices, no
	// float64, subgroups of 32 (Metal's SIMD groups). Tests take it from
	// STRATA_VULKAN_CLAMP=apple.
	ClampApple
)

// appleSharedMem and appleSubgroup are Apple GPUs' workgroup memory
// (Metal's threadgroup memory) and SIMD-group width.
const (
	appleSharedMem = 32 << 10
	appleSubgroup  = 32
)

// ParseClamp reads a clamp's name: "" or "none", or "apple".
func ParseClamp(s string) (Clamp, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return ClampNone, nil
	case "apple":
		return ClampApple, nil
	}
	return ClampNone, fmt.Errorf("vulkan: unknown device clamp %q (want none or apple)", s)
}

func (c Clamp) String() string {
	switch c {
	case ClampNone:
		return "none"
	case ClampApple:
		return "apple"
	}
	return fmt.Sprintf("Clamp(%d)", int(c))
}

// DeviceInfo describes one physical device.
type DeviceInfo struct {
	Index  int
	Name   string
	Type   string // "discrete", "integrated", "virtual", "cpu" or "other"
	API    string // Vulkan version the driver implements
	Memory uint64 // bytes of device-local memory
}

// deviceTypeName is DeviceInfo.Type of a Vulkan device type.
func deviceTypeName(t vk.PhysicalDeviceType) string {
	switch t {
	case vk.PhysicalDeviceTypeDiscreteGpu:
		return "discrete"
	case vk.PhysicalDeviceTypeIntegratedGpu:
		return "integrated"
	case vk.PhysicalDeviceTypeVirtualGpu:
		return "virtual"
	case vk.PhysicalDeviceTypeCpu:
		return "cpu"
	}
	return "other"
}

// rank orders device types for the default choice.
func rank(typ string) int {
	return map[string]int{"discrete": 4, "integrated": 3, "virtual": 2, "cpu": 1}[typ]
}

// instance is a Vulkan instance with its commands and, when validating, the
// messenger that collects the layer's errors.
type instance struct {
	f         *vk.Funcs
	handle    vk.Instance
	messenger vk.DebugUtilsMessengerEXT
	log       *validationLog
	pin       runtime.Pinner // keeps log where the messenger's user data points
}

// validationLog collects the validation layer's error messages.
type validationLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *validationLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.msgs
	l.msgs = nil
	return m
}

// The debug callback is created once: purego callbacks are never freed.
// Its integer arguments are uintptr because Windows callbacks take only
// word-sized ones; the severity is the low 32 bits.
var debugCallback = sync.OnceValue(func() uintptr {
	return purego.NewCallback(func(severity, _ uintptr, data *vk.DebugUtilsMessengerCallbackDataEXT, user unsafe.Pointer) uintptr {
		if vk.DebugUtilsMessageSeverityFlagsEXT(uint32(severity))&vk.DebugUtilsMessageSeverityErrorBitEXT != 0 && user != nil && data != nil {
			l := (*validationLog)(user)
			l.mu.Lock()
			if len(l.msgs) < 100 {
				l.msgs = append(l.msgs, vk.GoStringPtr(data.PMessage))
			}
			l.mu.Unlock()
		}
		return 0
	})
})

func instanceLayers(f *vk.Funcs) ([]string, error) {
	var n uint32
	if err := second(f.EnumerateInstanceLayerProperties(&n, nil)); err != nil {
		return nil, err
	}
	props := make([]vk.LayerProperties, n)
	if n > 0 {
		if err := second(f.EnumerateInstanceLayerProperties(&n, &props[0])); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, p := range props[:n] {
		names = append(names, vk.GoString(p.LayerName[:]))
	}
	return names, nil
}

func instanceExtensions(f *vk.Funcs) ([]string, error) {
	var n uint32
	if err := second(f.EnumerateInstanceExtensionProperties(nil, &n, nil)); err != nil {
		return nil, err
	}
	props := make([]vk.ExtensionProperties, n)
	if n > 0 {
		if err := second(f.EnumerateInstanceExtensionProperties(nil, &n, &props[0])); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, p := range props[:n] {
		names = append(names, vk.GoString(p.ExtensionName[:]))
	}
	return names, nil
}

// second drops a vkEnumerate* call's result code: VK_INCOMPLETE (the list
// grew between the count and the fill) still leaves the first n valid.
func second(_ vk.Result, err error) error { return err }

// cstrings converts names to a C array of C strings, pinning everything.
func cstrings(p *runtime.Pinner, names []string) **byte {
	if len(names) == 0 {
		return nil
	}
	ptrs := make([]*byte, len(names))
	for i, n := range names {
		ptrs[i] = vk.CString(n)
		p.Pin(ptrs[i])
	}
	p.Pin(&ptrs[0])
	return &ptrs[0]
}

func newInstance(validation bool) (*instance, error) {
	f, err := vk.Load()
	if err != nil {
		return nil, fmt.Errorf("vulkan: %w: %w", ErrNoDevice, err)
	}
	if !f.HasEnumerateInstanceVersion() {
		return nil, errors.New("vulkan: the loader implements Vulkan 1.0; Strata needs 1.1 or later")
	}
	var version uint32
	if err := f.EnumerateInstanceVersion(&version); err != nil {
		return nil, err
	}
	layers, err := instanceLayers(f)
	if err != nil {
		return nil, err
	}
	exts, err := instanceExtensions(f)
	if err != nil {
		return nil, err
	}
	in := &instance{}
	var p runtime.Pinner
	defer p.Unpin()
	app := &vk.ApplicationInfo{
		SType:            vk.StructureTypeApplicationInfo,
		PApplicationName: vk.CString("strata"),
		PEngineName:      vk.CString("strata"),
		ApiVersion:       min(version&^0xfff, vk.MakeVersion(1, 3, 0)),
	}
	p.Pin(app.PApplicationName)
	p.Pin(app.PEngineName)
	p.Pin(app)
	ci := vk.InstanceCreateInfo{SType: vk.StructureTypeInstanceCreateInfo, PApplicationInfo: app}
	var wantLayers, wantExts []string
	if validation {
		if !slices.Contains(layers, validationLayer) || !slices.Contains(exts, "VK_EXT_debug_utils") {
			return nil, ErrNoValidationLayer
		}
		wantLayers = append(wantLayers, validationLayer)
		wantExts = append(wantExts, "VK_EXT_debug_utils")
		// Synchronization validation checks the barriers the streams insert.
		enable := new(vk.ValidationFeatureEnableEXT)
		*enable = vk.ValidationFeatureEnableSynchronizationValidationEXT
		features := &vk.ValidationFeaturesEXT{SType: vk.StructureTypeValidationFeaturesEXT, EnabledValidationFeatureCount: 1, PEnabledValidationFeatures: enable}
		p.Pin(enable)
		p.Pin(features)
		ci.PNext = unsafe.Pointer(features)
	}
	// MoltenVK lists its devices only to instances that accept portability drivers.
	if slices.Contains(exts, "VK_KHR_portability_enumeration") {
		wantExts = append(wantExts, "VK_KHR_portability_enumeration")
		ci.Flags |= vk.InstanceCreateEnumeratePortabilityBitKHR
	}
	ci.EnabledLayerCount, ci.PpEnabledLayerNames = uint32(len(wantLayers)), cstrings(&p, wantLayers)
	ci.EnabledExtensionCount, ci.PpEnabledExtensionNames = uint32(len(wantExts)), cstrings(&p, wantExts)
	if err := f.CreateInstance(&ci, nil, &in.handle); err != nil {
		if vk.IsResult(err, vk.ErrorIncompatibleDriver) {
			return nil, fmt.Errorf("vulkan: %w: no driver is installed (%w)", ErrNoDevice, err)
		}
		return nil, err
	}
	if in.f, err = f.LoadInstance(in.handle); err != nil {
		in.f = f
		in.destroy()
		return nil, err
	}
	if validation {
		in.log = &validationLog{}
		in.pin.Pin(in.log)
		mci := vk.DebugUtilsMessengerCreateInfoEXT{
			SType:           vk.StructureTypeDebugUtilsMessengerCreateInfoEXT,
			MessageSeverity: vk.DebugUtilsMessageSeverityErrorBitEXT,
			MessageType:     vk.DebugUtilsMessageTypeGeneralBitEXT | vk.DebugUtilsMessageTypeValidationBitEXT | vk.DebugUtilsMessageTypePerformanceBitEXT,
			PfnUserCallback: debugCallback(),
			PUserData:       unsafe.Pointer(in.log),
		}
		if !in.f.HasCreateDebugUtilsMessengerEXT() {
			in.destroy()
			return nil, ErrNoValidationLayer
		}
		if err := in.f.CreateDebugUtilsMessengerEXT(in.handle, &mci, nil, &in.messenger); err != nil {
			in.destroy()
			return nil, err
		}
	}
	return in, nil
}

func (in *instance) destroy() {
	if in.messenger != 0 && in.f.HasDestroyDebugUtilsMessengerEXT() {
		in.f.DestroyDebugUtilsMessengerEXT(in.handle, in.messenger, nil)
		in.messenger = 0
	}
	if in.handle != 0 {
		in.f.DestroyInstance(in.handle, nil)
		in.handle = 0
	}
	in.pin.Unpin()
}

// physical is a physical device with what Strata reads of it.
type physical struct {
	handle     vk.PhysicalDevice
	info       DeviceInfo
	props      vk.PhysicalDeviceProperties
	subgroup   vk.PhysicalDeviceSubgroupProperties
	maxAlloc   uint64
	memory     vk.PhysicalDeviceMemoryProperties
	extensions []string
}

func (in *instance) devices() ([]physical, error) {
	var n uint32
	if err := second(in.f.EnumeratePhysicalDevices(in.handle, &n, nil)); err != nil {
		return nil, err
	}
	handles := make([]vk.PhysicalDevice, n)
	if n > 0 {
		if err := second(in.f.EnumeratePhysicalDevices(in.handle, &n, &handles[0])); err != nil {
			return nil, err
		}
	}
	if !in.f.HasGetPhysicalDeviceProperties2() {
		return nil, errors.New("vulkan: the instance lacks vkGetPhysicalDeviceProperties2 (Vulkan 1.1)")
	}
	var out []physical
	for i, h := range handles[:n] {
		d := physical{handle: h}
		maint3 := vk.PhysicalDeviceMaintenance3Properties{SType: vk.StructureTypePhysicalDeviceMaintenance3Properties}
		d.subgroup = vk.PhysicalDeviceSubgroupProperties{SType: vk.StructureTypePhysicalDeviceSubgroupProperties, PNext: unsafe.Pointer(&maint3)}
		props2 := vk.PhysicalDeviceProperties2{SType: vk.StructureTypePhysicalDeviceProperties2, PNext: unsafe.Pointer(&d.subgroup)}
		var p runtime.Pinner
		p.Pin(&maint3)
		p.Pin(&d.subgroup)
		in.f.GetPhysicalDeviceProperties2(h, &props2)
		p.Unpin()
		d.subgroup.PNext = nil
		d.props = props2.Properties
		d.maxAlloc = uint64(maint3.MaxMemoryAllocationSize)
		in.f.GetPhysicalDeviceMemoryProperties(h, &d.memory)
		var local uint64
		for _, heap := range d.memory.MemoryHeaps[:d.memory.MemoryHeapCount] {
			if heap.Flags&vk.MemoryHeapDeviceLocalBit != 0 {
				local = max(local, uint64(heap.Size))
			}
		}
		d.info = DeviceInfo{Index: i, Name: vk.GoString(d.props.DeviceName[:]), Type: deviceTypeName(d.props.DeviceType), API: vk.VersionString(d.props.ApiVersion), Memory: local}
		var ne uint32
		if err := second(in.f.EnumerateDeviceExtensionProperties(h, nil, &ne, nil)); err != nil {
			return nil, err
		}
		if ne > 0 {
			exts := make([]vk.ExtensionProperties, ne)
			if err := second(in.f.EnumerateDeviceExtensionProperties(h, nil, &ne, &exts[0])); err != nil {
				return nil, err
			}
			for _, e := range exts[:ne] {
				d.extensions = append(d.extensions, vk.GoString(e.ExtensionName[:]))
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// Devices lists the physical devices Vulkan reports, in the order that
// STRATA_DEVICE indices refer to.
func Devices() ([]DeviceInfo, error) {
	in, err := newInstance(false)
	if err != nil {
		return nil, err
	}
	defer in.destroy()
	ds, err := in.devices()
	if err != nil {
		return nil, err
	}
	infos := make([]DeviceInfo, len(ds))
	for i, d := range ds {
		infos[i] = d.info
	}
	return infos, nil
}

// Chosen is the index of the device Open picks without Options.Device:
// STRATA_DEVICE's, or else the best.
func Chosen() (int, error) {
	in, err := newInstance(false)
	if err != nil {
		return 0, err
	}
	defer in.destroy()
	ds, err := in.devices()
	if err != nil {
		return 0, err
	}
	d, err := choose(ds, selector(Options{}))
	if err != nil {
		return 0, err
	}
	return d.info.Index, nil
}

// choose picks a device by the selector (index or name substring) or, when
// it is empty, the best by type and then device-local memory.
func choose(ds []physical, selector string) (*physical, error) {
	if len(ds) == 0 {
		return nil, fmt.Errorf("vulkan: %w: the loader reports none (no GPU driver and no lavapipe, Debian mesa-vulkan-drivers)", ErrNoDevice)
	}
	list := func() string {
		var s []string
		for _, d := range ds {
			s = append(s, fmt.Sprintf("%d: %s (%s)", d.info.Index, d.info.Name, d.info.Type))
		}
		return strings.Join(s, "; ")
	}
	if selector != "" {
		if i, err := strconv.Atoi(selector); err == nil {
			if i < 0 || i >= len(ds) {
				return nil, fmt.Errorf("vulkan: device index %d is out of range; devices are %s", i, list())
			}
			return &ds[i], nil
		}
		for i := range ds {
			if strings.Contains(strings.ToLower(ds[i].info.Name), strings.ToLower(selector)) {
				return &ds[i], nil
			}
		}
		return nil, fmt.Errorf("vulkan: no device name contains %q; devices are %s", selector, list())
	}
	best := &ds[0]
	for i := range ds {
		d := &ds[i]
		if rank(d.info.Type) > rank(best.info.Type) || rank(d.info.Type) == rank(best.info.Type) && d.info.Memory > best.info.Memory {
			best = d
		}
	}
	return best, nil
}

// subgroupArithmetic reports whether compute shaders may use subgroup adds.
func (d *physical) subgroupArithmetic() bool {
	sg := &d.subgroup
	return sg.SupportedStages&vk.ShaderStageComputeBit != 0 && sg.SupportedOperations&vk.SubgroupFeatureArithmeticBit != 0
}

// coopMatrix reports whether the device runs the cooperative-matrix GEMMs:
// VK_NV_cooperative_matrix with 16x16x16 float16 products accumulated in
// float32 at subgroup scope, float16 arithmetic in shaders, and 32-lane
// subgroups (matmul_coop.comp's workgroup is 8 of them). It returns the
// device-creation chain that enables them.
func (in *instance) coopMatrix(d *physical) (*vk.PhysicalDeviceCooperativeMatrixFeaturesNV, bool) {
	// coopTileFor's smallest tile needs 20 KiB of shared memory at exact
	// precision, 30 with weights split in hi + lo halves (splitWFits).
	if !slices.Contains(d.extensions, "VK_NV_cooperative_matrix") || d.subgroup.SubgroupSize != 32 || d.props.Limits.MaxComputeSharedMemorySize < 24<<10 ||
		!in.f.HasGetPhysicalDeviceFeatures2() || !in.f.HasGetPhysicalDeviceCooperativeMatrixPropertiesNV() {
		return nil, false
	}
	coop := &vk.PhysicalDeviceCooperativeMatrixFeaturesNV{SType: vk.StructureTypePhysicalDeviceCooperativeMatrixFeaturesNV}
	f16 := &vk.PhysicalDeviceShaderFloat16Int8Features{SType: vk.StructureTypePhysicalDeviceShaderFloat16Int8Features, PNext: unsafe.Pointer(coop)}
	f2 := &vk.PhysicalDeviceFeatures2{SType: vk.StructureTypePhysicalDeviceFeatures2, PNext: unsafe.Pointer(f16)}
	var p runtime.Pinner
	p.Pin(coop)
	p.Pin(f16)
	in.f.GetPhysicalDeviceFeatures2(d.handle, f2)
	p.Unpin()
	if coop.CooperativeMatrix == 0 || f16.ShaderFloat16 == 0 {
		return nil, false
	}
	var n uint32
	if err := second(in.f.GetPhysicalDeviceCooperativeMatrixPropertiesNV(d.handle, &n, nil)); err != nil || n == 0 {
		return nil, false
	}
	props := make([]vk.CooperativeMatrixPropertiesNV, n)
	for i := range props {
		props[i].SType = vk.StructureTypeCooperativeMatrixPropertiesNV
	}
	if err := second(in.f.GetPhysicalDeviceCooperativeMatrixPropertiesNV(d.handle, &n, &props[0])); err != nil {
		return nil, false
	}
	for _, c := range props[:n] {
		if c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == vk.ComponentTypeFloat16NV && c.BType == vk.ComponentTypeFloat16NV &&
			c.CType == vk.ComponentTypeFloat32NV && c.DType == vk.ComponentTypeFloat32NV && c.Scope == vk.ScopeSubgroupNV {
			// Enable exactly what the kernels use.
			return &vk.PhysicalDeviceCooperativeMatrixFeaturesNV{SType: vk.StructureTypePhysicalDeviceCooperativeMatrixFeaturesNV, CooperativeMatrix: 1,
				PNext: unsafe.Pointer(&vk.PhysicalDeviceShaderFloat16Int8Features{SType: vk.StructureTypePhysicalDeviceShaderFloat16Int8Features, ShaderFloat16: 1})}, true
		}
	}
	return nil, false
}

// coop2Caps is what matmul_coop2.comp needs to know of a device's
// workgroup-scope cooperative matrices: float16 products summed in float32
// by workgroups of coop2Lanes invocations, of dimensions multiples of
// gran (M, N, K) up to maxDim; with tensor, loaded by tensor loads
// (shaders.TensorLoads), which the driver stages itself.
type coop2Caps struct {
	gran   [3]int
	maxDim int
	tensor bool
}

// coopMatrix2 reports whether the device runs workgroup-scope cooperative
// matrices (VK_NV_cooperative_matrix2 over VK_KHR_cooperative_matrix, with
// flexible dimensions) as matmul_coop2.comp uses them: the features to
// enable, chained, and what bounds the kernel's tiles.
func (in *instance) coopMatrix2(d *physical) (*vk.PhysicalDeviceCooperativeMatrixFeaturesKHR, coop2Caps, bool) {
	var props vk.PhysicalDeviceCooperativeMatrix2PropertiesNV
	if !slices.Contains(d.extensions, "VK_KHR_cooperative_matrix") || !slices.Contains(d.extensions, "VK_NV_cooperative_matrix2") {
		return nil, coop2Caps{}, false
	}
	nv2 := &vk.PhysicalDeviceCooperativeMatrix2FeaturesNV{SType: vk.StructureTypePhysicalDeviceCooperativeMatrix2FeaturesNV}
	khr := &vk.PhysicalDeviceCooperativeMatrixFeaturesKHR{SType: vk.StructureTypePhysicalDeviceCooperativeMatrixFeaturesKHR, PNext: unsafe.Pointer(nv2)}
	f2 := &vk.PhysicalDeviceFeatures2{SType: vk.StructureTypePhysicalDeviceFeatures2, PNext: unsafe.Pointer(khr)}
	props.SType = vk.StructureTypePhysicalDeviceCooperativeMatrix2PropertiesNV
	p2 := &vk.PhysicalDeviceProperties2{SType: vk.StructureTypePhysicalDeviceProperties2, PNext: unsafe.Pointer(&props)}
	var p runtime.Pinner
	p.Pin(nv2)
	p.Pin(khr)
	p.Pin(&props)
	in.f.GetPhysicalDeviceFeatures2(d.handle, f2)
	in.f.GetPhysicalDeviceProperties2(d.handle, p2)
	p.Unpin()
	props.PNext = nil
	if khr.CooperativeMatrix == 0 || nv2.CooperativeMatrixWorkgroupScope == 0 || nv2.CooperativeMatrixFlexibleDimensions == 0 ||
		props.CooperativeMatrixWorkgroupScopeMaxWorkgroupSize < coop2Lanes {
		return nil, coop2Caps{}, false
	}
	dims, err := in.f.FlexibleDimensions(in.handle, d.handle)
	if err != nil {
		return nil, coop2Caps{}, false
	}
	caps := coop2Caps{maxDim: int(props.CooperativeMatrixFlexibleDimensionsMaxDimension), tensor: nv2.CooperativeMatrixTensorAddressing != 0}
	for _, p := range dims {
		if p.AType == vk.ComponentTypeFloat16NV && p.BType == vk.ComponentTypeFloat16NV && p.CType == vk.ComponentTypeFloat32NV &&
			p.ResultType == vk.ComponentTypeFloat32NV && p.SaturatingAccumulation == 0 && p.Scope == vk.ScopeWorkgroup &&
			p.WorkgroupInvocations == coop2Lanes && p.MGranularity > 0 && p.NGranularity > 0 && p.KGranularity > 0 {
			caps.gran = [3]int{int(p.MGranularity), int(p.NGranularity), int(p.KGranularity)}
		}
	}
	if caps.gran[0] == 0 {
		return nil, coop2Caps{}, false
	}
	return &vk.PhysicalDeviceCooperativeMatrixFeaturesKHR{SType: vk.StructureTypePhysicalDeviceCooperativeMatrixFeaturesKHR, CooperativeMatrix: 1,
		PNext: unsafe.Pointer(&vk.PhysicalDeviceCooperativeMatrix2FeaturesNV{SType: vk.StructureTypePhysicalDeviceCooperativeMatrix2FeaturesNV,
			CooperativeMatrixWorkgroupScope: 1, CooperativeMatrixFlexibleDimensions: 1, CooperativeMatrixTensorAddressing: vk.Bool32(b2u(caps.tensor))})}, caps, true
}

// memoryType finds a memory type allowed by bits with all of required,
// preferring one that also has all of preferred and none of avoided.
func (d *physical) memoryType(bits uint32, required, preferred, avoided vk.MemoryPropertyFlags) (uint32, bool) {
	found, score := uint32(0), -1
	for i, t := range d.memory.MemoryTypes[:d.memory.MemoryTypeCount] {
		if bits&(1<<i) == 0 || t.PropertyFlags&required != required {
			continue
		}
		s := 0
		if t.PropertyFlags&preferred == preferred {
			s += 2
		}
		if t.PropertyFlags&avoided == 0 {
			s++
		}
		if s > score {
			found, score = uint32(i), s
		}
	}
	return found, score >= 0
}

func selector(o Options) string {
	if o.Device != "" {
		return o.Device
	}
	return os.Getenv("STRATA_DEVICE")
}
