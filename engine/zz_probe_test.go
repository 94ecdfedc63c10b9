package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/enginetest"
)

func TestProbeModelCloseWhilePrefilling(t *testing.T) {
	_, m := enginetest.MappedModel(t)
	e, err := engine.NewEngine(m, cpu.New(1))
	require.NoError(t, err)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	inside, release := make(chan struct{}), make(chan struct{})
	hold := engine.Hook{Point: "blocks.0.hook_resid_post", Host: func(string, []int, []float32) error {
		close(inside)
		<-release
		return nil
	}}
	done := make(chan error, 1)
	go func() {
		_, err := s.Prefill(context.Background(), []int32{1, 2, 3, 4}, engine.Options{Hooks: []engine.Hook{hold}})
		done <- err
	}()
	<-inside
	require.NoError(t, m.Close())
	close(release)
	t.Log(<-done)
}
