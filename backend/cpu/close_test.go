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
