package engine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sbinet/npyio"
	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/models"
	"github.com/stratalab/strata/trace"
)

func readNpy[T any](t *testing.T, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "models", "reference", name))
	require.NoError(t, err)
	defer f.Close()
	var v []T
	require.NoError(t, npyio.Read(f, &v))
	return v
}

// The engine on the embedded model against PyTorch's float32 forward pass
// of the same F16 weights (tools/train/train.py writes the reference).
func TestDefaultModelMatchesPyTorch(t *testing.T) {
	m, err := models.Open()
	require.NoError(t, err)
	tokens := readNpy[int32](t, "tokens.npy")
	logits := readNpy[float32](t, "logits.npy")
	resid := readNpy[float32](t, "resid_post.npy")
	tr := prefill(t, newEngine(t, m), tokens, engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll})
	T, d := len(tokens), m.DModel
	// Both sides compute in float32 with different summation orders
	// (PyTorch's blocked GEMMs and SDPA against our row dots); 1e-5 of the
	// largest magnitude covers that, a wrong op would be off by O(1).
	const tol = 1e-5
	for l := 0; l < m.Layers; l++ {
		want := f64(resid[l*T*d : (l+1)*T*d])
		rel, ok := relErr(tr.Tensor(trace.LayerPoint(l, "hook_resid_post")).Data, want)
		require.True(t, ok)
		t.Logf("layer %d resid_post: max error %.2g of the largest magnitude", l, rel)
		require.LessOrEqual(t, rel, tol, "layer %d resid_post", l)
	}
	rel, ok := relErr(tr.Tensor("logits").Data, f64(logits))
	require.True(t, ok)
	t.Logf("logits: max error %.2g of the largest magnitude", rel)
	require.LessOrEqual(t, rel, tol, "logits")
}
