package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
)

// The published greedy continuation of stories260K (llama2.c and llama.cpp agree).
func TestStories260KGreedyContinuation(t *testing.T) {
	m, err := model.Open(sharedtest.Stories(t))
	require.NoError(t, err)
	defer m.Close()
	e := newEngine(t, m)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	ctx := context.Background()
	tokens := []int32{1, 403, 407, 261, 378} // "Once upon a time" with BOS
	const want = ", there was a little girl named Lily. She loved to play outside in the park. One day,"
	var out []int32
	text := ""
	for len(text) < len(want) && len(out) < 60 {
		tr, err := s.Prefill(ctx, tokens, engine.Options{Predict: true})
		require.NoError(t, err)
		next := tr.Predicted[0]
		out = append(out, next)
		tokens = []int32{next}
		text, err = m.Tok.Decode(out)
		require.NoError(t, err)
	}
	require.Equal(t, want, text)
}
