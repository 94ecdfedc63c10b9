// Package backends opens a prefill backend by name, so that the command
// line and notebooks choose devices the same way.
package backends

import (
	"fmt"
	"os"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
)

// Names lists the backends Open accepts.
var Names = []string{"auto", "cpu", "vulkan"}

// Open returns the named backend. "auto" takes a Vulkan GPU when there is
// one and the CPU backend otherwise: a CPU Vulkan driver such as lavapipe
// is slower than the CPU backend, so auto passes it by. A device named by
// STRATA_DEVICE is Vulkan's, lavapipe too, or an error: falling back to
// the CPU would hide a mistyped name. The note says which backend was
// chosen and why, for the user to see.
func Open(name string) (b backend.Backend, note string, err error) {
	switch name {
	case "", "auto":
		return auto()
	case "cpu":
		b = cpu.New(0)
		return b, "using " + b.Name(), nil
	case "vulkan":
		v, err := vulkan.Open(vulkan.Options{})
		if err != nil {
			return nil, "", err
		}
		return v, opened(v), nil
	}
	return nil, "", fmt.Errorf("unknown backend %q (choose from %v)", name, Names)
}

func auto() (backend.Backend, string, error) {
	if named := os.Getenv("STRATA_DEVICE"); named != "" {
		v, err := vulkan.Open(vulkan.Options{})
		if err != nil {
			return nil, "", fmt.Errorf("STRATA_DEVICE=%s: %w", named, err)
		}
		return v, opened(v), nil
	}
	fallback := cpu.New(0)
	devices, err := vulkan.Devices()
	if err != nil {
		return fallback, fmt.Sprintf("using %s: no Vulkan GPU (%v)", fallback.Name(), err), nil
	}
	for _, d := range devices {
		if d.Type == "cpu" {
			continue
		}
		v, err := vulkan.Open(vulkan.Options{})
		if err != nil {
			return fallback, fmt.Sprintf("using %s: Vulkan device %s did not open (%v)", fallback.Name(), d.Name, err), nil
		}
		return v, opened(v), nil
	}
	return fallback, fmt.Sprintf("using %s: Vulkan finds only CPU devices (%d), slower than the CPU backend", fallback.Name(), len(devices)), nil
}

// opened is the note for a Vulkan backend: its device, and that
// STRATA_COOP2=on changed nothing where the device has no workgroup-scope
// cooperative matrices.
func opened(v *vulkan.Backend) string {
	note := "using " + v.Name()
	if os.Getenv("STRATA_COOP2") == "on" && !v.Coop2() {
		note += " (STRATA_COOP2=on, but the device has no workgroup-scope cooperative matrices, VK_NV_cooperative_matrix2: the usual kernels run)"
	}
	return note
}
