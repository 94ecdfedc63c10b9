package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
)

func TestParsePlacement(t *testing.T) {
	p, devs, err := engine.ParsePlacement("0:0-13,1:14-27", 28)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, devs)
	require.Equal(t, 0, p.Embed)
	require.Equal(t, 1, p.Head)
	for l, tier := range p.Layers {
		require.Equal(t, l/14, tier, "layer %d", l)
	}
	require.Equal(t, "0:0-13,1:14-27", p.String())

	// Tiers follow the layers, whatever order the entries come in; one
	// device may take two tiers (two logical devices).
	p, devs, err = engine.ParsePlacement(" 0:2-3, 0:0 ,1:1", 4)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 0}, devs)
	require.Equal(t, []int{0, 1, 2, 2}, p.Layers)
	require.Equal(t, 2, p.Head)

	for s, want := range map[string]string{
		"0:0-13,1:10-27": `layers 10-13 are in both 0:0-13 and 1:10-27`,
		"0:0-9,1:14-27":  `layers 10-13 are on no device`,
		"0:0-20":         `layers 21-27 are on no device (the model has 28 layers)`,
		"0:0-13,1:15-27": `layer 14 is on no device`,
		"0:0-13,1:14-30": `layer 30 is beyond the model, which has 28 layers (0 to 27)`,
		"0:5-3,1:6-27":   `"0:5-3" runs backwards`,
		"x:0-27":         `"x:0-27" is not DEVICE:FIRST-LAST`,
		"-1:0-27":        `"-1:0-27" is not DEVICE:FIRST-LAST`,
		"0-27":           `"0-27" is not DEVICE:FIRST-LAST`,
		"":               `"" is not DEVICE:FIRST-LAST`,
		"0:0-13,":        `"" is not DEVICE:FIRST-LAST`,
	} {
		_, _, err := engine.ParsePlacement(s, 28)
		require.ErrorContains(t, err, want, "%q", s)
	}
}

// The needs of a plan add up to what the file and the prefill estimate
// say, however the model is split.
func TestPlanNeedsAddUp(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 1)
	require.False(t, m.TiedEmbd)
	var file int64
	for _, x := range m.File.Tensors {
		file += x.Size
	}
	q := engine.PlanRequest{Capacity: 64, Tokens: 16, Options: engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}}
	est := engine.EstimateMemory(&m.Config, q.Tokens, 0, q.Capacity, q.Options)
	one := engine.Needs(m, engine.OneTier(m.Layers), q)
	require.Len(t, one, 1)
	require.Equal(t, engine.TierNeed{Weights: file, Cache: est.Cache, Scratch: est.Scratch, Capture: est.Capture}, one[0])
	// A backend that repacks the weights (Vulkan's Q4_K) counts its images:
	// here twice each matrix's bytes (the file's Q8_0 tensors; its F32 ones
	// are the norms, counted as they are).
	var matrices, counted int64
	for _, x := range m.File.Tensors {
		if x.Type != gguf.F32 {
			matrices += x.Size
		}
	}
	double := q
	double.WeightBytes = func(w *model.Weight) int64 { counted += int64(len(w.Data)); return 2 * int64(len(w.Data)) }
	require.Equal(t, file+matrices, engine.Needs(m, engine.OneTier(m.Layers), double)[0].Weights)
	require.Equal(t, matrices, counted, "every matrix sized by WeightBytes")

	split := engine.Needs(m, engine.Placement{Embed: 0, Layers: []int{0, 1, 1, 2}, Head: 2}, q)
	require.Len(t, split, 3)
	var sum engine.TierNeed
	for _, n := range split {
		sum.Weights += n.Weights
		sum.Cache += n.Cache
		sum.Capture += n.Capture
	}
	require.Equal(t, file, sum.Weights)
	require.Equal(t, est.Cache, sum.Cache)
	require.Equal(t, est.Capture, sum.Capture)
	require.Equal(t, est.Cache/2, split[1].Cache, "tier 1 has two of the four layers' caches")
	require.Less(t, split[0].Scratch, split[2].Scratch, "only the head's tier holds logits")
	require.Equal(t, est.Cache/4, split[0].Cache, "tier 0 has one layer's cache")

	// A batch's plan counts each prompt's attention maps, [heads, T_i, T_i],
	// as the batch's estimate does, not those of one prompt of its tokens.
	lens := []int{12, 5, 1, 9}
	b := engine.PlanRequest{Capacity: 27, Tokens: 27, Lens: lens, Options: q.Options}
	batch := engine.Needs(m, engine.OneTier(m.Layers), b)[0]
	require.Equal(t, engine.EstimateBatch(&m.Config, lens, q.Options).Capture, batch.Capture)
	b.Lens = nil
	require.Less(t, batch.Capture, engine.Needs(m, engine.OneTier(m.Layers), b)[0].Capture)
}

func TestPlanRefusesWhatDoesNotFitNamingTheShortfall(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 1)
	q := engine.PlanRequest{Capacity: 512, Tokens: 512}
	p, devs, err := engine.ParsePlacement("0:0-1,1:2-3", m.Layers)
	require.NoError(t, err)
	pl, err := engine.NewPlan(m, p, devs, q)
	require.NoError(t, err)
	need1 := pl.Needs[1].Total()
	big := engine.Device{Name: "big", Free: 1 << 40}
	require.NoError(t, pl.Check([]engine.Device{big, big}))
	err = pl.Check([]engine.Device{big, {Name: "small", Free: need1 - 1000}})
	require.ErrorIs(t, err, engine.ErrDoesNotFit)
	require.ErrorContains(t, err, "device 1 (small) has ")
	require.ErrorContains(t, err, "tier 1 (layers 2-3, head) needs "+human.Bytes(need1))
	require.ErrorContains(t, err, ": 1000 B short")
	require.ErrorContains(t, pl.Check([]engine.Device{big}), "tier 1 is on device 1; there are 1 devices")

	// Two tiers on one device add up.
	pl, err = engine.NewPlan(m, p, []int{0, 0}, q)
	require.NoError(t, err)
	both := pl.Needs[0].Total() + pl.Needs[1].Total()
	require.NoError(t, pl.Check([]engine.Device{{Name: "one", Free: both}}))
	require.ErrorContains(t, pl.Check([]engine.Device{{Name: "one", Free: both - 1}}), "and tier 1 (layers 2-3, head)")
}

func TestPlanPlacementFillsDevicesInOrder(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 1)
	q := engine.PlanRequest{Capacity: 512, Tokens: 128, Options: engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post")}}
	whole := engine.Needs(m, engine.OneTier(m.Layers), q)[0].Total()

	pl, err := engine.PlanPlacement(m, []engine.Device{{"a", whole}, {"b", whole}}, q)
	require.NoError(t, err)
	require.Equal(t, engine.OneTier(m.Layers), pl.Placement, "a model that fits one device stays whole")
	require.Equal(t, []int{0}, pl.Devices)

	// Devices of about 70% each (each tier has its own scratch): two tiers,
	// each within its device, and the first full: the second tier's first
	// layer would not fit beside it.
	devs := []engine.Device{{"a", whole * 7 / 10}, {"b", whole * 7 / 10}}
	pl, err = engine.PlanPlacement(m, devs, q)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, pl.Devices)
	require.Equal(t, 0, pl.Embed)
	require.Equal(t, 1, pl.Head)
	require.NoError(t, pl.Check(devs))
	first := 0
	for pl.Layers[first] == 0 {
		first++
	}
	require.Positive(t, first)
	more := pl.Placement
	more.Layers = append([]int(nil), pl.Layers...)
	more.Layers[first] = 0
	require.Greater(t, engine.Needs(m, more, q)[0].Total(), devs[0].Free)

	// A device too small for anything is passed over.
	pl, err = engine.PlanPlacement(m, []engine.Device{{"tiny", 10}, {"a", whole}}, q)
	require.NoError(t, err)
	require.Equal(t, []int{1}, pl.Devices)

	_, err = engine.PlanPlacement(m, []engine.Device{{"a", whole / 3}, {"b", whole / 3}}, q)
	require.ErrorIs(t, err, engine.ErrDoesNotFit)
	require.ErrorContains(t, err, "finds no room on the 2 devices")
	require.ErrorContains(t, err, "the model needs about "+human.Bytes(whole))
	_, err = engine.PlanPlacement(m, []engine.Device{{"a", whole / 3}}, q)
	require.ErrorContains(t, err, "finds no room on the one device, which has "+human.Bytes(whole/3)+" free;")
}
