package gpu_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/model"
)

// sharedFile finds ../shared/<rel> beside the checkout, or skips.
func sharedFile(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("go.mod not found above the test directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is absent (the shared material sits beside the checkout as ../shared): %v", p, err)
	}
	return p
}

// The published greedy continuation of stories260K (llama2.c and llama.cpp agree).
func TestStories260KGreedyContinuation(t *testing.T) {
	m, err := model.Open(sharedFile(t, "models/stories260K.gguf"))
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
		tr, err := s.Prefill(ctx, tokens, gpu.Options{Predict: true})
		require.NoError(t, err)
		next := tr.Predicted[0]
		out = append(out, next)
		tokens = []int32{next}
		text, err = m.Tok.Decode(out)
		require.NoError(t, err)
	}
	require.Equal(t, want, text)
}
