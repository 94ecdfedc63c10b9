// Package models holds the model that Strata ships: a small qwen3 that tools/train trains on
// the Go standard library's sources. MODEL.md describes it and how to reproduce it.
package models

import _ "embed"

// DefaultName is the default model's name, as general.name in its GGUF.
const DefaultName = "gostd-qwen3-4m"

//go:embed gostd-qwen3-4m.gguf
var defaultGGUF []byte

// GGUF returns the default model's GGUF file. The slice is shared: do not modify it.
func GGUF() []byte { return defaultGGUF }
