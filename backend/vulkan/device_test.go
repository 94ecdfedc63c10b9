package vulkan_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
)

func TestDeviceChoice(t *testing.T) {
	b := testBackend(t) // skips where there is no device
	ds, err := vulkan.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	for i, d := range ds {
		require.Equal(t, i, d.Index)
		require.NotEmpty(t, d.Name)
		require.Contains(t, []string{"discrete", "integrated", "virtual", "cpu", "other"}, d.Type)
	}
	t.Logf("default device: %s", b.Name())

	byIndex, err := vulkan.Open(vulkan.Options{Device: "0"})
	require.NoError(t, err)
	require.Contains(t, byIndex.Name(), ds[0].Name)
	require.NoError(t, byIndex.Close())

	word := strings.Fields(ds[len(ds)-1].Name)[0]
	byName, err := vulkan.Open(vulkan.Options{Device: strings.ToUpper(word)})
	require.NoError(t, err)
	require.Contains(t, strings.ToLower(byName.Name()), strings.ToLower(word))
	require.NoError(t, byName.Close())

	_, err = vulkan.Open(vulkan.Options{Device: "99"})
	require.ErrorContains(t, err, "device index 99 is out of range; devices are 0: ")
	t.Setenv("STRATA_DEVICE", "no-such-gpu")
	_, err = vulkan.Open(vulkan.Options{})
	require.ErrorContains(t, err, `no device name contains "no-such-gpu"`)
}

func TestProfilingTimesEveryKernel(t *testing.T) {
	b, err := vulkan.Open(vulkan.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	if err := b.SetProfiling(true); err != nil {
		t.Skip(err)
	}
	m := genModel(t, "tiny-qwen3", gguf.Q1_0_G128, 1)
	e, err := engine.NewEngine(m, b)
	require.NoError(t, err)
	b.StageTimes() // drop the upload's
	s, err := e.NewSession(0)
	require.NoError(t, err)
	_, err = s.Prefill(context.Background(), testTokens, engine.Options{Logits: engine.LogitsAll})
	require.NoError(t, err)
	times := map[string]vulkan.StageTime{}
	for _, st := range b.StageTimes() {
		times[st.Name] = st
		require.Positive(t, st.Count, st.Name)
	}
	// Per layer: QKV (3), output, gate and up, down projections; then the
	// LM head, over every position. The tiled kernel is the
	// cooperative-matrix one where the device has them.
	matmul, flash := "matmul_q1_0", "flash"
	if vulkan.Coop(b) {
		matmul, flash = "matmul_coop_q1_0", "flash_coop"
	}
	require.Equal(t, 7*m.Layers+1, times[matmul].Count)
	require.Equal(t, m.Layers, times[flash].Count)
	// The Q/K norms' rows are one head: a subgroup each where the device
	// has subgroup arithmetic; wider rows may take either kernel.
	norms := times["rmsnorm"].Count + times["rmsnorm_sg"].Count
	require.Equal(t, 4*m.Layers+1, norms, "two norms and the Q/K norms per layer, and the final one")
	if vulkan.Subgroups(b) {
		require.GreaterOrEqual(t, times["rmsnorm_sg"].Count, 2*m.Layers, "the Q/K norms")
		require.Equal(t, "norm", times["rmsnorm_sg"].Stage)
	}
	require.Positive(t, times[matmul].Time)
	require.Equal(t, "gemm", times[matmul].Stage)
	require.Equal(t, "attention", times[flash].Stage)
	require.Equal(t, "gemm", vulkan.StageOf("matvec_q1_0_sg"))
	require.Equal(t, "attention", vulkan.StageOf("softmax_sg"))
	require.Equal(t, "attention", vulkan.StageOf("scores_coop"))
	require.Equal(t, "attention", vulkan.StageOf("mix_coop"))
	require.Empty(t, b.StageTimes(), "reading resets the totals")
}

func TestClosedBackendRefusesWork(t *testing.T) {
	testBackend(t)
	b, err := vulkan.Open(vulkan.Options{})
	require.NoError(t, err)
	s := b.NewStream()
	x, err := s.Alloc("x", 4)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "closing twice is harmless")
	s.Copy(x, 0, x, 2, 2)
	require.ErrorContains(t, s.Sync(), "the backend is closed")
	_, err = b.NewStream().Alloc("y", 4)
	require.ErrorContains(t, err, "the backend is closed")
}

func TestNoDriverIsErrNoDevice(t *testing.T) {
	testBackend(t)
	// Point the loader at a driver list with nothing in it.
	t.Setenv("VK_DRIVER_FILES", "/nonexistent/strata_icd.json")
	t.Setenv("VK_ICD_FILENAMES", "/nonexistent/strata_icd.json")
	_, err := vulkan.Open(vulkan.Options{})
	require.ErrorIs(t, err, vulkan.ErrNoDevice)
	require.ErrorContains(t, err, "vulkan: no Vulkan device: no driver is installed (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER)")
}

// A backend takes the tuning its options give, refuses one that would
// stall its streams, and takes DefaultTuning without one.
func TestOptionsTuning(t *testing.T) {
	testBackend(t) // skips where there is no Vulkan device
	tu := vulkan.DefaultTuning()
	tu.SplitK, tu.FlashWideFrom = false, 4096
	b, err := vulkan.Open(vulkan.Options{Tuning: &tu})
	require.NoError(t, err)
	require.Equal(t, tu, b.Tuning())
	require.NoError(t, b.Close())
	tu.ReadBytes = 0
	_, err = vulkan.Open(vulkan.Options{Tuning: &tu})
	require.ErrorContains(t, err, "ReadBytes")
	require.Equal(t, vulkan.DefaultTuning(), testBackend(t).Tuning())
}
