package models

import (
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
)

// Open loads the default model. Only programs that import this package embed
// it; package model reads any GGUF file without it.
func Open() (*model.Model, error) {
	f, err := gguf.Parse(defaultGGUF, DefaultName+".gguf")
	if err != nil {
		return nil, err
	}
	return model.Load(f)
}
