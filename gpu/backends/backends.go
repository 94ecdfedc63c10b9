// Package backends opens a prefill backend by name, so that the command
// line and notebooks choose devices the same way.
package backends

import (
	"fmt"

	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/cpu"
)

// Names lists the backends Open accepts.
var Names = []string{"auto", "cpu"}

// Open returns the named backend. "auto" picks the best available one; the
// note says which it chose and why, for the user to see.
func Open(name string) (b gpu.Backend, note string, err error) {
	switch name {
	case "", "auto":
		b = cpu.New(0)
		return b, fmt.Sprintf("using %s: no GPU backend is built into this version", b.Name()), nil
	case "cpu":
		b = cpu.New(0)
		return b, "using " + b.Name(), nil
	}
	return nil, "", fmt.Errorf("unknown backend %q (choose from %v)", name, Names)
}
