package enginetest

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// MappedModel writes a small random llama (Q8_0) to a file and opens it
// mapped, for tests that change the file underneath; it is closed with t.
func MappedModel(t *testing.T) (string, *model.Model) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.Q8_0, 1)
	require.NoError(t, err)
	require.NoError(t, w.WriteFile(path))
	m, err := model.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return path, m
}

// RandomWeight is a rows x cols weight of normal values quantized to typ
// (cols whole blocks of it), and the values its format decodes them to.
func RandomWeight(t testing.TB, rng *rand.Rand, name string, rows, cols int, typ gguf.Type) (*model.Weight, []float32) {
	t.Helper()
	f, err := quant.For(typ)
	require.NoError(t, err)
	values := make([]float32, rows*cols)
	for i := range values {
		values[i] = float32(rng.NormFloat64())
	}
	rb, err := typ.RowBytes(int64(cols))
	require.NoError(t, err)
	data := make([]byte, int(rb)*rows)
	for r := range rows {
		f.Quantize(data[r*int(rb):(r+1)*int(rb)], values[r*cols:(r+1)*cols])
	}
	f.Dequantize(values, data)
	return &model.Weight{Name: name, Rows: rows, Cols: cols, Format: f, Data: data}, values
}
