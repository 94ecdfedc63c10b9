package cpu_test

import (
	"testing"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/internal/niltest"
)

// The sweep of issue 47 over nil: every exported function of the CPU
// backend, and every exported method of its Backend on a new one, given
// nil and zero arguments (and -1 for integers), returns: an error or a
// zero result, never a panic.
func TestEveryExportedCallTakesNil(t *testing.T) {
	niltest.Sweep(t, "cpu", niltest.Exported(t, "."), map[string]any{
		"New": cpu.New, "Int8Products": cpu.Int8Products, "Int8Instructions": cpu.Int8Instructions,
	}, map[string][]func() any{
		"Backend": {func() any { return cpu.New(1) }},
	}, niltest.Policy{Prefix: "cpu: "})
}
