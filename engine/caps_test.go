package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
)

// claimsHost is the CPU backend whose streams hide HostTensors' methods
// while its Capabilities still offer them.
type claimsHost struct{ backend.Backend }

func (b claimsHost) NewStream() backend.Stream { return plainStream{b.Backend.NewStream()} }

type plainStream struct{ backend.Stream }

// A backend whose Capabilities offer what its streams lack is refused by
// name before any work, rather than run on a path it did not mean.
func TestCapabilitiesAStreamLacksAreAnError(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.F32, 5)
	e, err := engine.NewEngine(m, claimsHost{cpu.New(0)})
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{})
	require.ErrorContains(t, err, "offers host tensors")
	require.ErrorContains(t, err, "plainStream")
}
