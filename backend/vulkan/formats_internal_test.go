package vulkan

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/enginetest"
)

// WeightBytes, which placement plans count for a Vulkan tier, is the size
// of the image Upload makes, in every format (Q4_K's codes take 4/3 of its
// file size), and a weight Upload would refuse counts its file size.
func TestWeightBytesIsTheUploadedImage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range weightFormats() {
		t.Run(f.typ.String(), func(t *testing.T) {
			rows, cols := 3, 2*f.blockSize
			if f.blockSize == 1 {
				cols = 77
			}
			w, _ := enginetest.RandomWeight(t, rng, "w", rows, cols, f.typ)
			data := w.Data
			image, _, err := f.repack(w)
			require.NoError(t, err)
			require.Equal(t, int64(len(image)), WeightBytes(w))
			if f.codes4 {
				require.Equal(t, int64(len(data))*4/3, WeightBytes(w), "6 bits a weight for 4.5")
			}
			if f.blockSize > 1 {
				w.Cols++ // not whole blocks: Upload refuses it
				require.Equal(t, int64(len(data)), WeightBytes(w))
			}
		})
	}
	require.Zero(t, WeightBytes(nil))
}
