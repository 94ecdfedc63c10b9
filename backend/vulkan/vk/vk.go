// Package vk calls Vulkan through the system's loader, found at run time,
// without cgo. Declarations are generated from the Vulkan registry (only
// the subset Strata uses); layout_test.go checks every struct against C.
//
// Pointers inside structs passed to Vulkan must be pinned (runtime.Pinner)
// for the duration of the call: the generated wrappers only keep the
// top-level arguments alive.
package vk

//go:generate go run ../internal/gen -registry /usr/share/vulkan/registry/vk.xml -out .

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Non-dispatchable handles are uint64 and go in one register: 64-bit only.
var _ [unsafe.Sizeof(uintptr(0)) - 8]byte

// Error is a failed Vulkan call.
type Error struct {
	Call   string
	Result Result
}

func (e *Error) Error() string { return e.Call + ": " + e.Result.String() }

// String is the C name of the result, e.g. VK_ERROR_OUT_OF_DEVICE_MEMORY.
func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("VkResult(%d)", int32(r))
}

func check(call string, r Result) error {
	if r < 0 {
		return &Error{Call: call, Result: r}
	}
	return nil
}

// IsResult reports whether err is a Vulkan error with result r.
func IsResult(err error, r Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Result == r
}

type level int

const (
	levelGlobal level = iota
	levelInstance
	levelDevice
)

// Funcs holds function pointers. Global and instance commands come from
// vkGetInstanceProcAddr; device commands from vkGetDeviceProcAddr.
type Funcs struct {
	getInstanceProcAddr uintptr
	ptrs                [numCommands]uintptr
}

// Load opens the Vulkan loader and reads its global commands.
func Load() (*Funcs, error) {
	gipa, err := openLoader()
	if err != nil {
		return nil, err
	}
	f := &Funcs{getInstanceProcAddr: gipa}
	return f, f.load(levelGlobal, func(name *byte) uintptr {
		r, _, _ := purego.SyscallN(gipa, 0, uintptr(unsafe.Pointer(name)))
		return r
	})
}

// LoadInstance reads the instance-level commands of inst into a copy of f.
func (f *Funcs) LoadInstance(inst Instance) (*Funcs, error) {
	g := *f
	return &g, g.load(levelInstance, func(name *byte) uintptr {
		r, _, _ := purego.SyscallN(f.getInstanceProcAddr, uintptr(inst), uintptr(unsafe.Pointer(name)))
		return r
	})
}

// LoadDevice reads the device-level commands of dev into a copy of f.
func (f *Funcs) LoadDevice(dev Device) (*Funcs, error) {
	g := *f
	return &g, g.load(levelDevice, func(name *byte) uintptr {
		return f.GetDeviceProcAddr(dev, name)
	})
}

func (f *Funcs) load(lv level, get func(name *byte) uintptr) error {
	for i, c := range commandInfo {
		if c.level != lv {
			continue
		}
		f.ptrs[i] = get(unsafe.StringData(c.name))
		if f.ptrs[i] == 0 && !c.optional {
			return fmt.Errorf("vulkan: the loader has no %s", c.name[:len(c.name)-1])
		}
	}
	return nil
}

// CString returns s as a NUL-terminated byte slice for Vulkan.
func CString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// GoString reads a NUL-terminated C string from a fixed-size array.
func GoString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// GoStringPtr reads a NUL-terminated C string the driver owns.
func GoStringPtr(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// MakeVersion is VK_MAKE_API_VERSION(0, major, minor, patch).
func MakeVersion(major, minor, patch uint32) uint32 { return major<<22 | minor<<12 | patch }

// VersionString formats an encoded API version as major.minor.patch.
func VersionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>22&0x7f, v>>12&0x3ff, v&0xfff)
}
