package cpu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
)

// Issue 47.1 on the CPU: Close while another goroutine prefills returns,
// and the prefill fails with backend.ErrBackendClosed (its error did not
// wrap it).
func TestCloseWhilePrefilling(t *testing.T) {
	m, err := synth.Random(synth.Shapes["tiny-llama"], gguf.F32, 5)
	require.NoError(t, err)
	enginetest.CheckCloseWhilePrefilling(t, func() backend.Backend { return cpu.New(2) }, m, 12)
}

// Issue 47's sweep of Close under concurrent use, on the CPU: a session, a
// run, a trace and a mapped model, each closed while other goroutines use
// it (run under -race).
func TestClosesUnderUse(t *testing.T) {
	m, err := synth.Random(synth.Shapes["tiny-llama"], gguf.F32, 5)
	require.NoError(t, err)
	enginetest.CheckClosesUnderUse(t, func() backend.Backend { return cpu.New(2) }, m)
	// The CPU reads weights where the file is mapped: an unmapping under
	// a prefill faulted (named as a file changed on disk), or read what
	// was mapped there after.
	_, mapped := enginetest.MappedModel(t)
	enginetest.CheckModelCloseUnderUse(t, func() backend.Backend { return cpu.New(2) }, mapped)
}
