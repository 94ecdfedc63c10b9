package model_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/niltest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/model/tokenizer"
)

// The sweep of issue 47 over nil, for model and the packages below it
// (gguf, tokenizer, synth): every exported function and every exported
// method of their types on a real receiver, given nil and zero arguments
// (and -1 for integers), returns: an error or a zero result, never a
// panic. Of receivers only a nil *gguf.File is swept, as os.File's are
// (an Open whose error went unchecked): the others are plain accessors
// of values a failed call never hands out.
func TestEveryExportedCallTakesNil(t *testing.T) {
	apis := map[string]niltest.API{}
	for _, dir := range []string{".", "../gguf", "tokenizer", "synth"} {
		apis[dir] = niltest.Exported(t, dir)
	}
	t.Chdir(t.TempDir()) // what a call given "" writes lands here
	w, err := synth.Generate(synth.Shapes["tiny-llama"], gguf.F32, 1)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, w.WriteFile(path))
	open := func() *model.Model {
		m, err := model.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return m
	}
	file := func() any {
		f, err := gguf.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	m := open()
	niltest.Sweep(t, "model", apis["."], map[string]any{
		"Llama3FreqFactors": model.Llama3FreqFactors, "ArchOf": model.ArchOf, "Architectures": model.Architectures,
		"ReadConfig": model.ReadConfig, "Open": model.Open, "Load": model.Load,
	}, map[string][]func() any{
		"Config":   {func() any { c := m.Config; return &c }},
		"Model":    {func() any { return open() }},
		"Rope":     {func() any { r := m.Rope; return &r }},
		"Weight":   {func() any { return m.Output }},
		"MLPKind":  {func() any { return model.MLPKind(0) }},
		"NormKind": {func() any { return model.NormKind(0) }},
		"PosKind":  {func() any { return model.PosKind(0) }},
		"RopeMode": {func() any { return model.RopeMode(0) }},
	}, niltest.Policy{Prefix: "model: "})
	niltest.Sweep(t, "gguf", apis["../gguf"], map[string]any{
		"Open": gguf.Open, "Parse": gguf.Parse, "ParseType": gguf.ParseType, "ValueOf": gguf.ValueOf, "NewWriter": gguf.NewWriter,
	}, map[string][]func() any{
		"File":       {func() any { return (*gguf.File)(nil) }, file},
		"TensorInfo": {func() any { return &file().(*gguf.File).Tensors[0] }},
		"Writer":     {func() any { return gguf.NewWriter() }},
		"Type":       {func() any { return gguf.Type(0) }},
		"Value":      {func() any { return gguf.Value{} }},
		"ValueType":  {func() any { return gguf.ValueType(0) }},
	}, niltest.Policy{Prefix: "gguf: "})
	niltest.Sweep(t, "tokenizer", apis["tokenizer"], map[string]any{
		"ByteTokens": tokenizer.ByteTokens, "FromGGUF": tokenizer.FromGGUF, "New": tokenizer.New, "Display": tokenizer.Display,
	}, map[string][]func() any{
		"Tokenizer": {func() any { return m.Tok }},
	}, niltest.Policy{Prefix: "tokenizer: "})
	niltest.Sweep(t, "synth", apis["synth"], map[string]any{
		"ShapeNames": synth.ShapeNames, "Generate": synth.Generate, "Random": synth.Random,
		"GenerateMix": synth.GenerateMix, "RandomMix": synth.RandomMix, "ParseMix": synth.ParseMix, "Uniform": synth.Uniform,
		"MixOf": synth.MixOf, "TypeChoices": synth.TypeChoices,
	}, nil, niltest.Policy{Prefix: "synth: "})
}
