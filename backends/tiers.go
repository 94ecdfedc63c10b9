package backends

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
)

// Devices lists the devices the named backend can place tiers on, in the
// order --placement numbers them, with their free memory. A Vulkan device
// reports its device-local heap's size: Vulkan 1.1 has no query for what
// other processes use (VK_EXT_memory_budget would tell). The CPU is one
// device, the host, with the memory Linux counts as available.
func Devices(name string) (kind string, devs []engine.Device, err error) {
	kind, err = resolve(name)
	if err != nil {
		return "", nil, err
	}
	if kind == "cpu" {
		free, err := HostAvailable()
		if err != nil {
			return "", nil, fmt.Errorf("the host's free memory: %w", err)
		}
		return kind, []engine.Device{{Name: "host memory", Free: free}}, nil
	}
	infos, err := vulkan.Devices()
	if err != nil {
		return "", nil, err
	}
	for _, d := range infos {
		devs = append(devs, engine.Device{Name: fmt.Sprintf("%s, %s", d.Name, d.Type), Free: int64(d.Memory)})
	}
	return kind, devs, nil
}

// resolve is the backend "auto" stands for, as Open chooses it.
func resolve(name string) (string, error) {
	switch name {
	case "cpu", "vulkan":
		return name, nil
	case "", "auto":
		if os.Getenv("STRATA_DEVICE") != "" {
			return "vulkan", nil
		}
		devices, err := vulkan.Devices()
		if err != nil {
			return "cpu", nil
		}
		for _, d := range devices {
			if d.Type != "cpu" {
				return "vulkan", nil
			}
		}
		return "cpu", nil
	}
	return "", fmt.Errorf("unknown backend %q (choose from %v)", name, Names)
}

// HostAvailable is the host memory a process may still take: what Linux
// counts as available (MemAvailable), and no more than the room left under
// an address-space limit (ulimit -v), where the Go runtime dies with
// "fatal error: out of memory" instead of failing an allocation.
func HostAvailable() (int64, error) {
	avail, err := memAvailable()
	if err != nil {
		return 0, err
	}
	if room, ok := addressRoom(); ok {
		avail = min(avail, room)
	}
	return avail, nil
}

// HostFits refuses, where e keeps its tensors in host memory (OnHost), a
// request whose KV cache, scratch and captures do not fit the host memory
// left: past it the Go runtime dies with "fatal error: out of memory"
// rather than fail. The weights are not counted: the model's file is
// mapped (or its tensors made) already. For a command that allocates what
// it asks for at once; nb's caches start small and grow, and check each
// call.
func HostFits(e *engine.Engine, q engine.PlanRequest) error {
	if e == nil {
		return errors.New("backends: HostFits: no engine (nil)")
	}
	if !OnHost(e) {
		return nil
	}
	m := e.Model
	avail, err := HostAvailable()
	if err != nil {
		return nil // not known here: nothing to check against
	}
	n := engine.Needs(m, engine.OneTier(m.Layers), q)[0]
	if need := n.Total() - n.Weights; need > avail {
		return fmt.Errorf("host memory is short: this needs about %s (KV cache %s for %d positions, scratch %s, captures %s) and %s is left; fewer tokens or captures need less",
			human.Bytes(need), human.Bytes(n.Cache), q.Capacity, human.Bytes(n.Scratch), human.Bytes(n.Capture), human.Bytes(avail))
	}
	return nil
}

// OnHost says whether every tier of e keeps its tensors in host memory
// (the CPU backend): a prefill's buffers are then the process's memory.
func OnHost(e *engine.Engine) bool {
	for _, b := range e.Tiers() {
		if _, ok := b.(*cpu.Backend); !ok {
			return false
		}
	}
	return true
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemAvailable %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}

// Plan places m over the named backend's devices for the request q:
// placement "" wholly on the device Open picks (STRATA_DEVICE's on
// Vulkan), "auto" by engine.PlanPlacement, else as engine.ParsePlacement reads
// it. A plan that does not fit the devices' memory is an error saying what
// is short where.
func Plan(m *model.Model, name, placement string, q engine.PlanRequest) (kind string, plan engine.Plan, devs []engine.Device, err error) {
	if m == nil {
		return "", engine.Plan{}, nil, errors.New("plan: no model (nil)")
	}
	kind, devs, err = Devices(name)
	if err != nil {
		return "", engine.Plan{}, nil, err
	}
	// A Vulkan tier holds the weights as Upload repacks them.
	sized := func(q engine.PlanRequest) engine.PlanRequest {
		if kind == "vulkan" && q.WeightBytes == nil {
			q.WeightBytes = vulkan.WeightBytes
		}
		return q
	}
	switch placement {
	case "auto":
		plan, err = engine.PlanPlacement(m, devs, sized(q))
		return kind, plan, devs, err
	case "":
		d := 0
		if kind == "vulkan" {
			if d, err = vulkan.Chosen(); err != nil && name == "vulkan" {
				return "", engine.Plan{}, nil, err
			}
			if err != nil { // auto: run takes the CPU then, as Open does
				if kind, devs, err = Devices("cpu"); err != nil {
					return "", engine.Plan{}, nil, err
				}
			}
		}
		placement = fmt.Sprintf("%d:0-%d", d, m.Layers-1)
	}
	p, on, err := engine.ParsePlacement(placement, m.Layers)
	if err != nil {
		return "", engine.Plan{}, nil, err
	}
	for t, d := range on {
		if d >= len(devs) {
			return "", engine.Plan{}, nil, fmt.Errorf("tier %d is on device %d, but the %s backend has %s", t, d, kind, deviceList(devs))
		}
	}
	if plan, err = engine.NewPlan(m, p, on, sized(q)); err != nil {
		return "", engine.Plan{}, nil, err
	}
	return kind, plan, devs, plan.Check(devs)
}

// deviceList says which devices there are: "only device 0 (host memory)",
// "devices 0 (A) and 1 (B)", "devices 0 (A), 1 (B) and 2 (C)".
func deviceList(devs []engine.Device) string {
	var s []string
	for i, d := range devs {
		s = append(s, fmt.Sprintf("%d (%s)", i, d.Name))
	}
	switch len(s) {
	case 0:
		return "no devices"
	case 1:
		return "only device " + s[0]
	}
	return "devices " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// Engine makes m resident on the named backend: placement "" on the one
// device Open picks, otherwise over tiers as Plan places them, each tier a
// backend opened on its device (two tiers on one device are two logical
// devices). A plan that does not fit is refused before anything is
// allocated. The note says where the model went, for the user to see.
func Engine(m *model.Model, name, placement string, q engine.PlanRequest) (*engine.Engine, string, error) {
	if placement == "" {
		b, note, err := Open(name)
		if err != nil {
			return nil, "", err
		}
		e, err := engine.NewEngine(m, b)
		if err != nil {
			b.Close() // its device memory would otherwise stay taken
			return nil, "", err
		}
		return e, note, nil
	}
	kind, plan, devs, err := Plan(m, name, placement, q)
	if err != nil {
		return nil, "", err
	}
	tiers := make([]backend.Backend, len(plan.Devices))
	for t, d := range plan.Devices {
		if kind == "cpu" {
			tiers[t] = cpu.New(0)
			continue
		}
		v, err := vulkan.Open(vulkan.Options{Device: strconv.Itoa(d)})
		if err != nil {
			for _, b := range tiers[:t] {
				b.Close()
			}
			return nil, "", fmt.Errorf("tier %d on Vulkan device %d (%s): %w", t, d, devs[d].Name, err)
		}
		tiers[t] = v
	}
	e, err := engine.NewTieredEngine(m, tiers, plan.Placement)
	if err != nil {
		for _, b := range tiers {
			b.Close()
		}
		return nil, "", err
	}
	tiersWord := "tiers"
	if len(tiers) == 1 {
		tiersWord = "tier"
	}
	return e, fmt.Sprintf("using %d %s of %s (--placement %s):\n%s", len(tiers), tiersWord, kind, plan.Flag(), strings.TrimSuffix(plan.String(), "\n")), nil
}
