package backends_test

import (
	"testing"

	"github.com/stratalab/strata/backends"
	"github.com/stratalab/strata/internal/niltest"
)

// The sweep of issue 47 over nil: every exported function of backends,
// given nil and zero arguments (and -1 for integers), returns: an error or
// a zero result, never a panic.
func TestEveryExportedCallTakesNil(t *testing.T) {
	niltest.Sweep(t, "backends", niltest.Exported(t, "."), map[string]any{
		"Open": backends.Open, "Devices": backends.Devices, "HostAvailable": backends.HostAvailable,
		"OnHost": backends.OnHost, "Plan": backends.Plan, "Engine": backends.Engine,
		"HostFits": backends.HostFits,
	}, nil, niltest.Policy{Prefix: "backends: "})
}
