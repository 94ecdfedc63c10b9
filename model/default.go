package model

import "github.com/stratalab/strata/gguf"

// DefaultName is what Default loads, for messages.
const DefaultName = "random tiny-qwen3 (seed 1)"

// Default loads the model used when none is named: until a trained model is
// embedded, a small qwen3 with deterministic random weights.
func Default() (*Model, error) { return Random(Shapes["tiny-qwen3"], gguf.F32, 1) }
