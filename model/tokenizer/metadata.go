package tokenizer

import (
	"errors"
	"fmt"
	"math"

	"github.com/stratalab/strata/gguf"
)

// Metadata is the part of a GGUF file FromGGUF reads. A missing key's error
// wraps gguf.ErrMissing.
type Metadata interface {
	String(key string) (string, error)
	Strings(key string) ([]string, error)
	Float32s(key string) ([]float32, error)
	Int32s(key string) ([]int32, error)
	Uint32(key string) (uint32, error)
	Bool(key string) (bool, error)
}

// FromGGUF builds the tokenizer described by the tokenizer.ggml.* keys,
// with llama.cpp's defaults for absent keys: for "llama" BOS 1, EOS 2,
// UNK 0, add_bos_token and add_space_prefix true; for "gpt2" no special
// ids, and add_bos_token true only for the Llama-3 pre-tokenizer.
func FromGGUF(m Metadata) (*Tokenizer, error) {
	if m == nil {
		return nil, errors.New("tokenizer: no metadata (nil)")
	}
	var v Vocab
	var err error
	if v.Model, err = m.String("tokenizer.ggml.model"); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Tokens, err = m.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err = optional(m.Float32s, "tokenizer.ggml.scores", &v.Scores); err != nil {
		return nil, err
	}
	if err = optional(m.Int32s, "tokenizer.ggml.token_type", &v.Types); err != nil {
		return nil, err
	}

	v.BOS, v.EOS, v.UNK, v.PAD = -1, -1, -1, -1
	switch v.Model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddSpacePrefix = true
		if err = optional(m.Bool, "tokenizer.ggml.add_space_prefix", &v.AddSpacePrefix); err != nil {
			return nil, err
		}
	case "gpt2":
		if err = optional(m.String, "tokenizer.ggml.pre", &v.Pre); err != nil {
			return nil, err
		}
		if v.Merges, err = m.Strings("tokenizer.ggml.merges"); err != nil {
			return nil, fmt.Errorf("tokenizer: gpt2 vocabulary needs merges: %w", err)
		}
	}
	for _, s := range []struct {
		key string
		id  *int
	}{
		{"tokenizer.ggml.bos_token_id", &v.BOS},
		{"tokenizer.ggml.eos_token_id", &v.EOS},
		{"tokenizer.ggml.unknown_token_id", &v.UNK},
		{"tokenizer.ggml.padding_token_id", &v.PAD},
	} {
		if *s.id >= len(v.Tokens) {
			*s.id = -1 // llama.cpp drops a default that does not fit the vocabulary
		}
		id, err := m.Uint32(s.key)
		switch {
		case errors.Is(err, gguf.ErrMissing):
		case err != nil:
			return nil, fmt.Errorf("tokenizer: %w", err)
		case id == math.MaxUint32:
			*s.id = -1 // -1 written as unsigned: no such token
		default:
			*s.id = int(id)
		}
	}

	v.AddBOS = addsBOSByDefault(v.Model, v.Pre)
	if err = optional(m.Bool, "tokenizer.ggml.add_bos_token", &v.AddBOS); err != nil {
		return nil, err
	}
	return New(v)
}

// optional reads key into dst, leaving dst alone if the key is missing.
func optional[T any](get func(string) (T, error), key string, dst *T) error {
	x, err := get(key)
	if errors.Is(err, gguf.ErrMissing) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	*dst = x
	return nil
}
