// Package vulkan is the GPU backend: every kernel of the layer program as a
// GLSL compute shader (package shaders), run through Vulkan loaded at run
// time without cgo (package vk). A stream records all kernels into one
// command buffer and submits it at Sync, so a prefill is one submission
// (a cancellable one flushes a submission per layer).
package vulkan

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan/vk"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/shaders"
)

var errClosed = fmt.Errorf("vulkan: %w", backend.ErrBackendClosed)

// pushBytes is the push-constant block every pipeline layout declares: the
// minimum maxPushConstantsSize Vulkan guarantees.
const pushBytes = 128

// maxBindings is the most storage buffers a kernel binds.
const maxBindings = 7 // flash_coop.comp: Q, K, V, Z, scores, K and V in float16

// Backend is one Vulkan device with resident weights. It is safe for
// concurrent use; each stream is used by one goroutine at a time.
type Backend struct {
	in     *instance
	phys   *physical
	f      *vk.Funcs
	device vk.Device
	queue  vk.Queue
	family uint32
	name   string
	// reduceWG is the workgroup size of row reductions, a specialization constant.
	reduceWG uint32
	// coopEnabled says the device was opened with cooperative matrices
	// (matmul_coop.comp).
	coopEnabled bool
	coop2       coop2Caps // workgroup-scope matrices (matmul_coop2.comp); zero: none
	// dev is what kernel choice knows of the device; tuning, what new
	// streams choose kernels by.
	dev    devCaps
	tuning Tuning
	clamp  Clamp
	// stats says pipelines keep their statistics (Options.KernelStatistics).
	stats bool
	// timestampNs is nanoseconds per timestamp tick; 0 when the queue has no timestamps.
	timestampNs float64

	closed atomic.Bool
	// onMasksKept, when tests set it, is called for each capture whose
	// masked scores were not written again.
	onMasksKept atomic.Pointer[func()]

	mu sync.Mutex // guards everything below
	// inUse counts streams' spans of work on the device's objects (enter):
	// Close waits, on idle, for none.
	inUse      int
	idle       sync.Cond
	pipelines  map[pipelineKey]*pipeline
	setLayouts [maxBindings + 1]vk.DescriptorSetLayout
	layouts    [maxBindings + 1]vk.PipelineLayout
	buffers    map[*buffer]struct{}
	// heapUsed counts the bytes allocated from each memory heap, so that a
	// request past a heap's size is refused by name even where the driver
	// (lavapipe) would overcommit host memory.
	heapUsed   [len(vk.PhysicalDeviceMemoryProperties{}.MemoryHeaps)]uint64
	streams    map[*streamRes]struct{}
	nextID     uint64
	profiling  bool
	stageTimes map[string]*StageTime

	queueMu sync.Mutex // vkQueueSubmit needs the queue externally synchronized
	upload  sync.Mutex // serialises Upload's use of the upload stream
	uploads *stream
}

// Open creates a backend on the chosen device. Where no Vulkan loader or
// device exists it returns an error saying so.
func Open(o Options) (*Backend, error) {
	in, err := newInstance(o.Validation)
	if err != nil {
		return nil, err
	}
	ds, err := in.devices()
	if err != nil {
		in.destroy()
		return nil, err
	}
	d, err := choose(ds, selector(o))
	if err != nil {
		in.destroy()
		return nil, err
	}
	b := &Backend{in: in, phys: d, pipelines: map[pipelineKey]*pipeline{}, buffers: map[*buffer]struct{}{}, streams: map[*streamRes]struct{}{}, stageTimes: map[string]*StageTime{}}
	b.idle.L = &b.mu
	if err := b.init(o); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) init(o Options) error {
	if o.Clamp != ClampNone && o.Clamp != ClampApple {
		return fmt.Errorf("vulkan: Options.Clamp is %v, not a known device", o.Clamp)
	}
	b.clamp = o.Clamp
	b.tuning = DefaultTuning()
	if o.Tuning != nil {
		if err := o.Tuning.check(); err != nil {
			return err
		}
		b.tuning = *o.Tuning
	}
	d := b.phys
	if d.props.ApiVersion < vk.MakeVersion(1, 1, 0) {
		return fmt.Errorf("vulkan: %s implements Vulkan %s; Strata needs 1.1 or later", d.info.Name, d.info.API)
	}
	var n uint32
	b.in.f.GetPhysicalDeviceQueueFamilyProperties(d.handle, &n, nil)
	families := make([]vk.QueueFamilyProperties, n)
	if n > 0 {
		b.in.f.GetPhysicalDeviceQueueFamilyProperties(d.handle, &n, &families[0])
	}
	b.family = ^uint32(0)
	for i, q := range families[:n] {
		if q.QueueFlags&vk.QueueComputeBit != 0 {
			b.family = uint32(i)
			if q.TimestampValidBits > 0 {
				b.timestampNs = float64(d.props.Limits.TimestampPeriod)
			}
			break
		}
	}
	if b.family == ^uint32(0) {
		return fmt.Errorf("vulkan: %s has no compute queue", d.info.Name)
	}
	var p runtime.Pinner
	defer p.Unpin()
	priority := new(float32)
	*priority = 1
	p.Pin(priority)
	qci := &vk.DeviceQueueCreateInfo{SType: vk.StructureTypeDeviceQueueCreateInfo, QueueFamilyIndex: b.family, QueueCount: 1, PQueuePriorities: priority}
	p.Pin(qci)
	var exts []string
	// Portability implementations (MoltenVK) require this extension enabled.
	for _, e := range d.extensions {
		if e == "VK_KHR_portability_subset" {
			exts = append(exts, e)
		}
	}
	var features unsafe.Pointer
	// An Apple GPU has no cooperative matrices: its device is opened without.
	portable := o.PortableGEMM || os.Getenv("STRATA_GEMM") == "portable" || o.Clamp == ClampApple
	if coop, ok := b.in.coopMatrix(d); ok && !portable {
		exts = append(exts, "VK_NV_cooperative_matrix")
		features, b.coopEnabled = unsafe.Pointer(coop), true
		if khr, caps, ok := b.in.coopMatrix2(d); ok && wantsCoop2(o, caps) {
			exts = append(exts, "VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix2")
			(*vk.PhysicalDeviceShaderFloat16Int8Features)(coop.PNext).PNext = unsafe.Pointer(khr)
			b.coop2 = caps
		}
	}
	if o.KernelStatistics {
		if st, ok := b.in.statisticsChain(d); ok {
			exts = append(exts, "VK_KHR_pipeline_executable_properties")
			st.PNext, features, b.stats = features, unsafe.Pointer(st), true
		}
	}
	for next := features; next != nil; next = *(*unsafe.Pointer)(unsafe.Add(next, 8)) { // every struct's pNext follows its sType
		p.Pin(next)
	}
	dci := vk.DeviceCreateInfo{SType: vk.StructureTypeDeviceCreateInfo, PNext: features, QueueCreateInfoCount: 1, PQueueCreateInfos: qci,
		EnabledExtensionCount: uint32(len(exts)), PpEnabledExtensionNames: cstrings(&p, exts)}
	if err := b.in.f.CreateDevice(d.handle, &dci, nil, &b.device); err != nil {
		return fmt.Errorf("vulkan: opening %s: %w", d.info.Name, err)
	}
	f, err := b.in.f.LoadDevice(b.device)
	if err != nil {
		return err
	}
	b.f = f
	f.GetDeviceQueue(b.device, b.family, 0, &b.queue)
	b.reduceWG = 256
	for b.reduceWG > d.props.Limits.MaxComputeWorkGroupInvocations {
		b.reduceWG /= 2
	}
	b.dev = b.caps()
	b.name = fmt.Sprintf("vulkan: %s (%s, Vulkan %s)", d.info.Name, d.info.Type, d.info.API)
	if b.coopEnabled {
		b.name += ", cooperative-matrix GEMMs"
		if b.Coop2() {
			b.name += " (and workgroup-scope)"
		}
	}
	if b.clamp != ClampNone {
		b.name += ", clamped to an " + b.clamp.String() + "-like device"
	}
	for n := 1; n <= maxBindings; n++ {
		if err := b.createLayout(n); err != nil {
			return err
		}
	}
	b.uploads = b.newStream()
	return nil
}

func (b *Backend) createLayout(n int) error {
	var p runtime.Pinner
	defer p.Unpin()
	bindings := make([]vk.DescriptorSetLayoutBinding, n)
	for i := range bindings {
		bindings[i] = vk.DescriptorSetLayoutBinding{Binding: uint32(i), DescriptorType: vk.DescriptorTypeStorageBuffer, DescriptorCount: 1, StageFlags: vk.ShaderStageComputeBit}
	}
	p.Pin(&bindings[0])
	sci := vk.DescriptorSetLayoutCreateInfo{SType: vk.StructureTypeDescriptorSetLayoutCreateInfo, BindingCount: uint32(n), PBindings: &bindings[0]}
	if err := b.f.CreateDescriptorSetLayout(b.device, &sci, nil, &b.setLayouts[n]); err != nil {
		return err
	}
	set := &b.setLayouts[n]
	push := &vk.PushConstantRange{StageFlags: vk.ShaderStageComputeBit, Size: pushBytes}
	p.Pin(set)
	p.Pin(push)
	lci := vk.PipelineLayoutCreateInfo{SType: vk.StructureTypePipelineLayoutCreateInfo, SetLayoutCount: 1, PSetLayouts: set, PushConstantRangeCount: 1, PPushConstantRanges: push}
	return b.f.CreatePipelineLayout(b.device, &lci, nil, &b.layouts[n])
}

// Name says which device runs the kernels.
func (b *Backend) Name() string { return b.name }

// Coop2 reports whether products may run on workgroup-scope cooperative
// matrices (matmul_coop2.comp): the device has them and was opened with
// them (wantsCoop2).
func (b *Backend) Coop2() bool { return b.dev.coop2.maxDim > 0 }

// wantsCoop2 reports whether a device whose workgroup-scope matrices are
// caps is opened with them: where it loads them by tensor addressing (the
// matmul_coop2t_ variants, faster than the usual kernel on an H100), or
// asked (Options.Coop2, STRATA_COOP2=on); never with STRATA_COOP2=off.
func wantsCoop2(o Options, caps coop2Caps) bool {
	switch os.Getenv("STRATA_COOP2") {
	case "off":
		return false
	case "on":
		return true
	}
	return o.Coop2 || caps.tensor
}

// Capabilities implements backend.Backend: traces stay in device memory
// until read, and flash attention captures its scores and pattern where the
// device has cooperative matrices (FlashAttentionCapture says where not).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{DeviceMemory: true, AttentionCapture: true, ExpertRouting: true}
}

var _ backend.AttentionCapture = (*stream)(nil)

// Tuning is what the backend's streams choose their kernels by.
func (b *Backend) Tuning() Tuning { return b.tuning }

// Close waits for the device and releases everything: streams, tensors,
// weights, pipelines. Nothing of the backend may be used afterwards.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	// Work in progress on other goroutines ends first (a wait on a fence
	// within fenceTimeout); what they try next fails with ErrBackendClosed.
	// Destroying a fence another goroutine waited on hung both.
	for b.inUse > 0 {
		b.idle.Wait()
	}
	var errs []error
	if b.device != 0 {
		if err := b.f.DeviceWaitIdle(b.device); err != nil {
			errs = append(errs, err)
		}
		for r := range b.streams {
			r.release(b)
		}
		for buf := range b.buffers {
			b.destroyBuffer(buf)
		}
		for _, p := range b.pipelines {
			b.f.DestroyPipeline(b.device, p.handle, nil)
		}
		for n := range b.layouts {
			if b.layouts[n] != 0 {
				b.f.DestroyPipelineLayout(b.device, b.layouts[n], nil)
			}
			if b.setLayouts[n] != 0 {
				b.f.DestroyDescriptorSetLayout(b.device, b.setLayouts[n], nil)
			}
		}
		b.f.DestroyDevice(b.device, nil)
		b.device = 0
	}
	if msgs := b.validationErrors(); msgs != nil {
		errs = append(errs, msgs)
	}
	b.in.destroy()
	return errors.Join(errs...)
}

// enter starts a span of a stream's work on the device's objects, which
// Close waits for; false once the backend is closed. exit ends it.
func (b *Backend) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return false
	}
	b.inUse++
	return true
}

func (b *Backend) exit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inUse--; b.inUse == 0 {
		b.idle.Broadcast()
	}
}

// validationErrors returns what the validation layer reported since the
// last call, as one error; nil when it reported nothing or is off.
func (b *Backend) validationErrors() error {
	if b.in.log == nil {
		return nil
	}
	msgs := b.in.log.take()
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("vulkan: the validation layer reported %d errors: %s", len(msgs), strings.Join(msgs, "\n"))
}

// memKind is where a buffer's memory lives.
type memKind int

const (
	deviceLocal memKind = iota // kernels' tensors and weights
	upload                     // host-written staging
	readback                   // host-read copies
)

// buffer is a VkBuffer with its own memory.
type buffer struct {
	handle  vk.Buffer
	mem     vk.DeviceMemory
	size    uint64
	mapped  unsafe.Pointer // host-visible kinds only
	heap    uint32         // the memory heap it counts against
	alloc   uint64         // bytes of memory allocated for it
	id      uint64         // for hazard tracking
	version uint64         // counts recorded writes, to know when a mirror is stale
	// masks are the ranges whose masked attention entries a capture wrote
	// (FlashAttentionCapture), by where they start.
	masks map[uint64]heldMasks
}

func (buf *buffer) bytes() []byte { return unsafe.Slice((*byte)(buf.mapped), buf.size) }

func (b *Backend) newBuffer(size uint64, kind memKind) (*buffer, error) {
	if !b.enter() {
		return nil, errClosed
	}
	defer b.exit()
	size = max(size, 4)
	usage := vk.BufferUsageTransferSrcBit | vk.BufferUsageTransferDstBit
	if kind == deviceLocal {
		usage |= vk.BufferUsageStorageBufferBit
	}
	buf := &buffer{size: size}
	bci := vk.BufferCreateInfo{SType: vk.StructureTypeBufferCreateInfo, Size: vk.DeviceSize(size), Usage: usage, SharingMode: vk.SharingModeExclusive}
	if err := b.f.CreateBuffer(b.device, &bci, nil, &buf.handle); err != nil {
		return nil, err
	}
	var req vk.MemoryRequirements
	b.f.GetBufferMemoryRequirements(b.device, buf.handle, &req)
	var typ uint32
	var ok bool
	switch kind {
	case deviceLocal:
		typ, ok = b.phys.memoryType(req.MemoryTypeBits, 0, vk.MemoryPropertyDeviceLocalBit, 0)
	case upload:
		typ, ok = b.phys.memoryType(req.MemoryTypeBits, vk.MemoryPropertyHostVisibleBit|vk.MemoryPropertyHostCoherentBit, 0, vk.MemoryPropertyDeviceLocalBit)
	case readback:
		typ, ok = b.phys.memoryType(req.MemoryTypeBits, vk.MemoryPropertyHostVisibleBit|vk.MemoryPropertyHostCoherentBit, vk.MemoryPropertyHostCachedBit, 0)
	}
	if !ok {
		b.f.DestroyBuffer(b.device, buf.handle, nil)
		return nil, fmt.Errorf("vulkan: %s has no suitable memory type for a buffer of %d bytes", b.phys.info.Name, size)
	}
	buf.heap, buf.alloc = b.phys.memory.MemoryTypes[typ].HeapIndex, uint64(req.Size)
	if err := b.reserve(buf); err != nil {
		b.f.DestroyBuffer(b.device, buf.handle, nil)
		return nil, err
	}
	mai := vk.MemoryAllocateInfo{SType: vk.StructureTypeMemoryAllocateInfo, AllocationSize: req.Size, MemoryTypeIndex: typ}
	if err := b.f.AllocateMemory(b.device, &mai, nil, &buf.mem); err != nil {
		b.f.DestroyBuffer(b.device, buf.handle, nil)
		b.unreserve(buf)
		return nil, fmt.Errorf("vulkan: allocating %d bytes: %w", size, err)
	}
	if err := b.f.BindBufferMemory(b.device, buf.handle, buf.mem, 0); err != nil {
		b.f.DestroyBuffer(b.device, buf.handle, nil)
		b.f.FreeMemory(b.device, buf.mem, nil)
		b.unreserve(buf)
		return nil, err
	}
	if kind != deviceLocal {
		if err := b.f.MapMemory(b.device, buf.mem, 0, vk.DeviceSize(vk.WholeSize), 0, &buf.mapped); err != nil {
			b.f.DestroyBuffer(b.device, buf.handle, nil)
			b.f.FreeMemory(b.device, buf.mem, nil)
			b.unreserve(buf)
			return nil, err
		}
	}
	b.mu.Lock()
	b.nextID++
	buf.id = b.nextID
	b.buffers[buf] = struct{}{}
	b.mu.Unlock()
	return buf, nil
}

// reserve counts buf's memory against its heap, refusing it past the heap's size.
func (b *Backend) reserve(buf *buffer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	heap := b.phys.memory.MemoryHeaps[buf.heap].Size
	if used := b.heapUsed[buf.heap]; used+buf.alloc > uint64(heap) {
		return fmt.Errorf("vulkan: %d more bytes do not fit in %s's memory heap %d of %d bytes (%d in use)", buf.alloc, b.phys.info.Name, buf.heap, heap, used)
	}
	b.heapUsed[buf.heap] += buf.alloc
	return nil
}

func (b *Backend) unreserve(buf *buffer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.heapUsed[buf.heap] -= buf.alloc
}

// freeBuffer releases a buffer the device no longer uses.
func (b *Backend) freeBuffer(buf *buffer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.buffers[buf]; ok && !b.closed.Load() {
		b.destroyBuffer(buf)
	}
}

// destroyBuffer needs b.mu held.
func (b *Backend) destroyBuffer(buf *buffer) {
	delete(b.buffers, buf)
	b.f.DestroyBuffer(b.device, buf.handle, nil)
	b.f.FreeMemory(b.device, buf.mem, nil)
	b.heapUsed[buf.heap] -= buf.alloc
}

// checkRange refuses a storage buffer larger than the device can bind.
func (b *Backend) checkRange(name string, bytes uint64) error {
	if limit := uint64(b.phys.props.Limits.MaxStorageBufferRange); bytes > limit {
		return fmt.Errorf("vulkan: %s needs %d bytes, over %s's largest storage buffer of %d bytes", name, bytes, b.phys.info.Name, limit)
	}
	if b.phys.maxAlloc > 0 && bytes > b.phys.maxAlloc {
		return fmt.Errorf("vulkan: %s needs %d bytes, over %s's largest allocation of %d bytes", name, bytes, b.phys.info.Name, b.phys.maxAlloc)
	}
	return nil
}

// pipeline is a compute pipeline and the layout it binds with.
type pipeline struct {
	handle   vk.Pipeline
	layout   vk.PipelineLayout
	bindings int
}

// maxSpec is the most specialization constants a kernel takes.
const maxSpec = 10

type pipelineKey struct {
	name string
	spec [maxSpec]uint32
}

// pipeline returns the compute pipeline of a shader variant with the given
// specialization constants (constant_id 0, 1, ...), creating it once.
func (b *Backend) pipeline(name string, bindings int, spec ...uint32) (*pipeline, error) {
	if len(spec) > maxSpec {
		return nil, fmt.Errorf("vulkan: %s takes %d specialization constants, over %d", name, len(spec), maxSpec)
	}
	key := pipelineKey{name: name}
	copy(key.spec[:], spec)
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.pipelines[key]; ok {
		return p, nil
	}
	if b.closed.Load() {
		return nil, errClosed
	}
	code, err := shaders.SPIRV(name)
	if err != nil {
		return nil, err
	}
	if tensor := strings.HasPrefix(name, "matmul_coop2t_"); tensor || strings.HasPrefix(name, "matmul_coop2_") {
		switch {
		case b.coop2.maxDim == 0:
			return nil, fmt.Errorf("vulkan: shader %s needs workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2), which the device was opened without", name)
		case tensor && !b.coop2.tensor:
			return nil, fmt.Errorf("vulkan: shader %s needs tensor addressing (VK_NV_cooperative_matrix2), which the device lacks", name)
		}
		if code, err = shaders.KHRCoop(code); err == nil && tensor {
			code, err = shaders.TensorLoads(code)
		}
		if err != nil {
			return nil, fmt.Errorf("vulkan: shader %s: %w", name, err)
		}
	}
	// Kernel choice routes around what a device lacks; a kernel past its
	// shared memory (under a clamp, one the device itself would take) is
	// a bug in that choice, named here rather than left to the driver.
	shared, err := shaders.WorkgroupBytes(code, spec)
	if err != nil {
		return nil, fmt.Errorf("vulkan: shader %s: %w", name, err)
	}
	for _, c := range shaders.Capabilities(code) {
		switch {
		case c == shaders.CapFloat64: // no device is opened with shaderFloat64
			return nil, fmt.Errorf("vulkan: shader %s needs float64, which Strata does not enable", name)
		case (c == shaders.CapCoopMatrixNV || c == shaders.CapCoopMatrixKHR) && !b.dev.coop:
			return nil, fmt.Errorf("vulkan: shader %s needs cooperative matrices, which the device was opened without", name)
		}
	}
	if shared > b.dev.sharedMem {
		return nil, fmt.Errorf("vulkan: shader %s needs %d bytes of shared memory; the device gives %d", name, shared, b.dev.sharedMem)
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&code[0])
	mci := vk.ShaderModuleCreateInfo{SType: vk.StructureTypeShaderModuleCreateInfo, CodeSize: uintptr(4 * len(code)), PCode: &code[0]}
	var module vk.ShaderModule
	if err := b.f.CreateShaderModule(b.device, &mci, nil, &module); err != nil {
		return nil, fmt.Errorf("vulkan: shader %s: %w", name, err)
	}
	defer b.f.DestroyShaderModule(b.device, module, nil)
	stage := vk.PipelineShaderStageCreateInfo{SType: vk.StructureTypePipelineShaderStageCreateInfo, Stage: vk.ShaderStageComputeBit, Module: module, PName: vk.CString("main")}
	pin.Pin(stage.PName)
	if len(spec) > 0 {
		entries := make([]vk.SpecializationMapEntry, len(spec))
		for i := range spec {
			entries[i] = vk.SpecializationMapEntry{ConstantID: uint32(i), Offset: uint32(4 * i), Size: 4}
		}
		data := append([]uint32(nil), spec...)
		info := &vk.SpecializationInfo{MapEntryCount: uint32(len(spec)), PMapEntries: &entries[0], DataSize: uintptr(4 * len(spec)), PData: unsafe.Pointer(&data[0])}
		pin.Pin(&entries[0])
		pin.Pin(&data[0])
		pin.Pin(info)
		stage.PSpecializationInfo = info
	}
	p := &pipeline{layout: b.layouts[bindings], bindings: bindings}
	ci := vk.ComputePipelineCreateInfo{SType: vk.StructureTypeComputePipelineCreateInfo, Stage: stage, Layout: p.layout}
	if b.stats {
		ci.Flags |= pipelineCreateCaptureStatisticsBitKHR
	}
	if _, err := b.f.CreateComputePipelines(b.device, 0, 1, &ci, nil, &p.handle); err != nil {
		return nil, fmt.Errorf("vulkan: pipeline %s: %w", name, err)
	}
	b.pipelines[key] = p
	return p, nil
}

// matrix is a weight resident in device memory in its repacked format.
type matrix struct {
	w         *model.Weight
	f         *weightFormat
	buf       *buffer
	off, size uint64 // its range of buf when a group's matrices share one; size 0: all
	scaleBase uint32
}

func (m *matrix) Rows() int { return m.w.Rows }
func (m *matrix) Cols() int { return m.w.Cols }

// Upload copies a weight to device memory once, repacked for its shaders.
// Types without a shader are refused with an error naming tensor and type.
func (b *Backend) Upload(w *model.Weight) (backend.Matrix, error) {
	f, data, scaleBase, err := b.prepare(w)
	if err != nil {
		return nil, err
	}
	buf, err := b.newBuffer(uint64(len(data)), deviceLocal)
	if err != nil {
		return nil, fmt.Errorf("vulkan: uploading %s: %w", w.Name, err)
	}
	b.upload.Lock()
	defer b.upload.Unlock()
	b.uploads.writeBytes(buf, 0, data)
	if err := b.uploads.Sync(); err != nil {
		b.freeBuffer(buf)
		return nil, fmt.Errorf("vulkan: uploading %s: %w", w.Name, err)
	}
	return &matrix{w: w, f: f, buf: buf, scaleBase: scaleBase}, nil
}

// prepare repacks a weight for its shaders and checks a buffer can bind it.
func (b *Backend) prepare(w *model.Weight) (f *weightFormat, data []byte, scaleBase uint32, err error) {
	if w == nil {
		return nil, nil, 0, errors.New("vulkan: nil weight")
	}
	if f, err = formatOf(w); err != nil {
		return nil, nil, 0, err
	}
	if data, scaleBase, err = repack(f, w); err != nil {
		return nil, nil, 0, err
	}
	return f, data, scaleBase, b.checkRange(w.Name, uint64(len(data)))
}

// UploadGroup uploads weights into one buffer, each at an offset the
// device can bind a storage buffer at: a mixture has thousands of expert
// matrices, more than the allocations a device allows (4096 on many).
func (b *Backend) UploadGroup(ws []*model.Weight) ([]backend.Matrix, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	align := max(uint64(b.phys.props.Limits.MinStorageBufferOffsetAlignment), 16)
	type part struct {
		f         *weightFormat
		data      []byte
		scaleBase uint32
		off       uint64
	}
	parts := make([]part, len(ws))
	var size uint64
	for i, w := range ws {
		f, data, scaleBase, err := b.prepare(w)
		if err != nil {
			return nil, err
		}
		size = (size + align - 1) / align * align
		parts[i] = part{f, data, scaleBase, size}
		size += uint64(len(data))
	}
	buf, err := b.newBuffer(size, deviceLocal)
	if err != nil {
		return nil, fmt.Errorf("vulkan: uploading %d weights from %s: %w", len(ws), ws[0].Name, err)
	}
	b.upload.Lock()
	defer b.upload.Unlock()
	out := make([]backend.Matrix, len(ws))
	for i, p := range parts {
		b.uploads.writeBytes(buf, p.off, p.data)
		out[i] = &matrix{w: ws[i], f: p.f, buf: buf, off: p.off, size: uint64(len(p.data)), scaleBase: p.scaleBase}
	}
	if err := b.uploads.Sync(); err != nil {
		b.freeBuffer(buf)
		return nil, fmt.Errorf("vulkan: uploading %d weights from %s: %w", len(ws), ws[0].Name, err)
	}
	return out, nil
}

// repack reads the weight from the model file's mapping, turning the memory
// fault of a file truncated underneath it into an error.
func repack(f *weightFormat, w *model.Weight) (data []byte, scaleBase uint32, err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if fault, ok := r.(interface{ Addr() uintptr }); ok {
			err = fmt.Errorf("vulkan: memory fault reading %s at %#x: was the model file changed on disk while in use? (%v)", w.Name, fault.Addr(), r)
			return
		}
		panic(r)
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return f.repack(w)
}

// NewStream starts a command stream; it records until Sync.
func (b *Backend) NewStream() backend.Stream { return b.newStream() }
