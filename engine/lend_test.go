package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/trace"
)

// onDevice is the CPU backend taken for a device's: its traces stay in
// its tensors until read, as a GPU's do.
type onDevice struct{ backend.Backend }

func (b onDevice) Capabilities() backend.Capabilities {
	c := b.Backend.Capabilities()
	c.DeviceMemory = true
	return c
}

// The host memory a session keeps for its next traces' reads: what a
// closed trace read, and nothing that a failed read of a freed trace made
// (which would push out what is kept), nor anything after the session
// closed; a read that fits none of it lets it go; FreeSpare lets it go.
func TestSessionKeepsOneClosedTracesReads(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.F32, 5)
	e, err := engine.NewEngine(m, onDevice{cpu.New(0)})
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	ctx := context.Background()
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "logits"), Logits: engine.LogitsAll}
	run := func(tokens []int32) *trace.Trace {
		require.NoError(t, s.Reset())
		tr, err := s.Prefill(ctx, tokens, o)
		require.NoError(t, err)
		return tr
	}
	stale := run(testTokens)
	require.NoError(t, stale.Close())
	first := run(testTokens)
	require.NoError(t, first.Load())
	require.NoError(t, first.Close())
	kept := engine.HostSpare(s)
	require.Equal(t, len(first.Names), kept, "every capture first read")

	_, err = stale.Get("logits")
	require.ErrorIs(t, err, trace.ErrClosed)
	require.Equal(t, kept, engine.HostSpare(s), "a failed read leaves what is kept alone")

	second := run(testTokens)
	require.NoError(t, second.Load())
	require.Zero(t, engine.HostSpare(s), "read into it")
	require.NoError(t, second.Close())
	require.Equal(t, kept, engine.HostSpare(s))

	shorter := run(testTokens[:5])
	_, err = shorter.Get("logits")
	require.NoError(t, err)
	require.Zero(t, engine.HostSpare(s), "nothing of its size: another layout's memory is let go")
	require.NoError(t, shorter.Close())

	third := run(testTokens)
	require.NoError(t, third.Load())
	require.NoError(t, third.Close())
	require.Equal(t, kept, engine.HostSpare(s))
	s.FreeSpare()
	require.Zero(t, engine.HostSpare(s))

	fourth := run(testTokens)
	require.NoError(t, fourth.Load())
	s.Close()
	require.NoError(t, fourth.Close())
	require.Zero(t, engine.HostSpare(s), "nothing is kept for a closed session")
	_, err = fourth.Get("logits")
	require.ErrorIs(t, err, trace.ErrClosed)
}
