package model

import (
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/models"
)

// DefaultName is what Default loads, for messages.
const DefaultName = models.DefaultName

// Default loads the model Strata ships (see models/MODEL.md): a small qwen3
// trained on the Go standard library's sources, embedded in the binary.
func Default() (*Model, error) {
	f, err := gguf.Parse(models.Default(), DefaultName+".gguf")
	if err != nil {
		return nil, err
	}
	return Load(f)
}
