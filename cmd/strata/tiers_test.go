package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// A model split over two CPU tiers continues the prompt as it does whole,
// and traces the same bits.
func TestPlacementSplitsRunAndTrace(t *testing.T) {
	path := sharedtest.Stories(t)
	out, err := strata(t, "run", "--model", path, "--backend", "cpu", "--placement", "0:0-1,0:2-4", "--prompt", "Once upon a time", "-n", "30")
	require.NoError(t, err)
	require.Equal(t, ", there was a little girl named Lily. She loved to play outside in the park. One day,\n", out)

	whole, split := t.TempDir(), t.TempDir()
	args := []string{"trace", "--model", path, "--backend", "cpu", "--tokens", "1,403,407,261,378", "--capture", "*"}
	_, err = strata(t, append(args, "--out", whole)...)
	require.NoError(t, err)
	out, err = strata(t, append(args, "--out", split, "--placement", "0:0-2,0:3-4")...)
	require.NoError(t, err)
	require.Contains(t, out, "(tiers 0:0-2,1:3-4)")
	a, err := trace.Load(whole)
	require.NoError(t, err)
	b, err := trace.Load(split)
	require.NoError(t, err)
	require.Equal(t, a.Names, b.Names)
	for _, name := range a.Names {
		require.Equal(t, a.Tensor(name).Data, b.Tensor(name).Data, name)
	}
}

func TestPlacementErrorsSayWhat(t *testing.T) {
	path := sharedtest.Stories(t)
	for placement, want := range map[string]string{
		"0:0-2,0:2-4": "--placement 0:0-2,0:2-4: layer 2 is in both 0:0-2 and 0:2-4",
		"0:0-1,0:3-4": "--placement 0:0-1,0:3-4: layer 2 is on no device",
		"0:0-9":       "--placement 0:0-9: layer 9 is beyond the model, which has 5 layers (0 to 4)",
		"3:0-4":       "--placement 3:0-4: tier 0 is on device 3, but the cpu backend has only device 0 (host memory)",
		"0:0-2,zero":  `--placement 0:0-2,zero: "zero" is not DEVICE:FIRST-LAST`,
	} {
		_, err := strata(t, "run", "--model", path, "--backend", "cpu", "--placement", placement, "--prompt", "Once")
		require.Error(t, err, placement)
		require.True(t, strings.HasPrefix(err.Error(), want), "%s: %v", placement, err)
	}
}

func TestInfoDevicesPrintsThePlan(t *testing.T) {
	path := sharedtest.Stories(t)
	out, err := strata(t, "info", path, "-n", "64", "--devices", "--backend", "cpu", "--placement", "0:0-1,0:2-4")
	require.NoError(t, err)
	require.Contains(t, out, "devices       cpu backend\n  0: host memory, ")
	// The placement as given (devices), so that it can be pasted back.
	require.Contains(t, out, "placement     0:0-1,0:2-4 for a prompt of 64 tokens and a KV cache of 64 positions:\n")
	require.Contains(t, out, "  device 0: tier 0 (embedding, layers 0-1) needs ")
	require.Contains(t, out, "  device 0: tier 1 (layers 2-4, head) needs ")

	out, err = strata(t, "info", path, "-n", "64", "--devices", "--backend", "cpu", "--capture", "blocks.*.hook_resid_post", "--placement", "auto")
	require.NoError(t, err)
	require.Contains(t, out, "placement     0:0-4 for a prompt of 64 tokens", "a small model stays on one device")
	require.Regexp(t, `tier 0 \(embedding, layers 0-4, head\) needs .* capture 80.0 KiB\)`, out, "5 layers x 64 x 64 float32s")

	_, err = strata(t, "info", path, "--placement", "0:0-4")
	require.EqualError(t, err, "--placement plans the model over devices: add --devices")
}

// Without --placement, info plans what run does without it: the whole
// model on the device STRATA_DEVICE picks.
func TestInfoDevicesPlansTheDeviceRunUses(t *testing.T) {
	path := sharedtest.Stories(t)
	out, err := strata(t, "info", path, "-n", "64", "--devices", "--backend", "cpu")
	require.NoError(t, err)
	require.Contains(t, out, "placement     0:0-4 for a prompt of 64 tokens")
	out, err = strata(t, "info", path, "-n", "1", "--devices", "--backend", "cpu")
	require.NoError(t, err)
	require.Contains(t, out, "prefill of 1 token needs about ")
	require.Contains(t, out, "placement     0:0-4 for a prompt of 1 token and a KV cache of 1 position:\n")
	if !vulkanPresent(t) {
		t.Skip("no Vulkan device (lavapipe counts)")
	}
	t.Setenv("STRATA_DEVICE", "7")
	_, err = strata(t, "info", path, "--devices", "--backend", "vulkan")
	require.ErrorContains(t, err, "device index 7 is out of range")
	_, runErr := strata(t, "run", "--model", path, "--backend", "vulkan", "--prompt", "Once")
	require.ErrorContains(t, runErr, "device index 7 is out of range")
}

func TestBenchOverTwoTiers(t *testing.T) {
	out, err := strata(t, "bench", "--model", sharedtest.Stories(t), "--backend", "cpu", "--placement", "0:0-2,0:3-4", "--tokens", "16", "--iters", "1", "--capture", "none,all")
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(out, "(tiers 0:0-2,1:3-4)"), out)
}

// Issue 47.5: the estimate of 512 heads over a context of 2^24 wrapped
// int64 (capture -9223372036854775808 B), and info --devices printed the
// plan as fitting. It saturates now: no part is negative, and the plan
// does not fit.
func TestInfoOfAnEstimatePast64Bits(t *testing.T) {
	s := tinyShape
	s.Heads, s.KVHeads, s.Context = 512, 512, 1<<24
	path := writeModel(t, s, "")
	out, err := strata(t, "info", path, "-n", fmt.Sprint(1<<24), "--devices", "--backend", "cpu", "--capture", "*")
	require.Contains(t, out, "prefill of 16777216 tokens needs more bytes than 64 bits count")
	require.ErrorIs(t, err, engine.ErrDoesNotFit, out)
	require.NotRegexp(t, `-[0-9.]+ [KMGTPE]?i?B`, out+err.Error(), "no negative size")
	c := model.Config{Arch: "llama", Layers: 2, DModel: 32, FFN: 64, Heads: 512, KVHeads: 512, HeadDim: 16, Vocab: 300, Context: 1 << 24}
	est := engine.EstimateMemory(&c, 1<<24, 0, 1<<24, engine.Options{Capture: engine.CaptureAll()})
	require.Equal(t, engine.Estimate{Scratch: engine.MaxEstimate, Capture: engine.MaxEstimate, Cache: engine.MaxEstimate}, est)
	require.Positive(t, est.Total())
}
