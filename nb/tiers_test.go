package nb_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/nb"
)

// The default model split over two CPU tiers gives the same trace, steps
// and generation as whole, with an intervention in the second tier.
func TestOpenWithAPlacementSplitsTheModel(t *testing.T) {
	whole := nb.Open("", nb.Backend("cpu"))
	L := whole.Config().Layers
	placement := fmt.Sprintf("0:0-%d,0:%d-%d", L/2-1, L/2, L-1)
	split := nb.Open("", nb.Backend("cpu"), nb.Placement(placement))
	require.Len(t, split.Engine().Tiers(), 2)
	require.Contains(t, split.Note, "using 2 tiers of cpu")

	prompt := "func main() {"
	ablate := nb.Hooks(engine.AblateHead(L-1, 0))
	want, got := whole.Prefill(prompt, nb.Capture("*"), ablate), split.Prefill(prompt, nb.Capture("*"), ablate)
	require.Equal(t, want.Names, got.Names)
	for _, name := range want.Names {
		require.Equal(t, want.Tensor(name).Data, got.Tensor(name).Data, name)
	}
	steps := split.Start(prompt, nb.Capture("*"))
	for steps.Next() {
	}
	stepped := steps.Finish()
	require.Equal(t, whole.Prefill(prompt, nb.Capture("*")).Tensor("logits").Data, stepped.Tensor("logits").Data)
	require.Equal(t, whole.Generate(prompt, 12), split.Generate(prompt, 12))

	require.NoError(t, split.Close(), "each tier's backend closed once")
	_, err := nb.TryOpen("", nb.Backend("cpu"), nb.Placement(fmt.Sprintf("0:0-%d", L)))
	require.EqualError(t, err, fmt.Sprintf("nb: placement \"0:0-%d\": layer %d is beyond the model, which has %d layers (0 to %d)", L, L, L, L-1))
}
