package model

import (
	"bytes"

	"github.com/stratalab/strata/gguf"
)

// DefaultName is what Default loads, for messages.
const DefaultName = "random tiny-qwen3 (seed 1)"

// Default loads the model used when none is named: until a trained model is
// embedded, a small qwen3 with deterministic random weights.
func Default() (*Model, error) {
	w, err := Generate(Shapes["tiny-qwen3"], gguf.F32, 1)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	f, err := gguf.Parse(buf.Bytes(), DefaultName)
	if err != nil {
		return nil, err
	}
	return Load(f)
}
