// Package shaders holds the Vulkan backend's GLSL 4.50 compute kernels and
// their SPIR-V, built by glslangValidator, committed and embedded.
// `go generate ./shaders/...` rebuilds every variant; a test fails when the
// committed SPIR-V no longer matches the sources.
package shaders

//go:generate go run ./internal/build

import (
	"embed"
	"encoding/binary"
	"fmt"
	"io/fs"
)

//go:embed spv/*.spv
var spv embed.FS

// Variant is one SPIR-V module: a source compiled with some defines.
type Variant struct {
	Name    string
	Source  string
	Defines []string
}

// formats names each weight format's define and variant suffix.
// exactHalf says every weight it decodes is exact in float16: the
// cooperative-matrix GEMM (matmul_coop.comp) decodes those in its tiles at
// exact precision as they are; others are split in hi + lo halves, first
// (weights16.comp) or in the tiles.
var formats = []struct {
	suffix, define string
	exactHalf      bool
}{
	{"f32", "FMT_F32", false}, {"f16", "FMT_F16", true}, {"bf16", "FMT_BF16", false}, {"q8_0", "FMT_Q8_0", false},
	{"q4_0", "FMT_Q4_0", false}, {"q1_0", "FMT_Q1_0", true}, {"tq2_0", "FMT_TQ2_0", true},
	{"codes4", "FMT_CODES4", false}, {"q5_k", "FMT_Q5_K", false}, {"q6_k", "FMT_Q6_K", false},
}

// Variants lists every module, in build order.
var Variants = func() []Variant {
	var vs []Variant
	for _, f := range formats {
		vs = append(vs,
			Variant{Name: "matmul_" + f.suffix, Source: "matmul.comp", Defines: []string{f.define}},
			Variant{Name: "matvec_" + f.suffix, Source: "matvec.comp", Defines: []string{f.define}},
			Variant{Name: "matvec_" + f.suffix + "_sg", Source: "matvec.comp", Defines: []string{f.define, "USE_SUBGROUP"}},
			Variant{Name: "embed_" + f.suffix, Source: "embed.comp", Defines: []string{f.define}})
		vs = append(vs, Variant{Name: "matmul_coop_" + f.suffix, Source: "matmul_coop.comp", Defines: []string{f.define}},
			Variant{Name: "weights16_" + f.suffix, Source: "weights16.comp", Defines: []string{f.define}},
			Variant{Name: "matmul_coop2_" + f.suffix, Source: "matmul_coop2.comp", Defines: []string{f.define}},
			Variant{Name: "matmul_coop2t_" + f.suffix, Source: "matmul_coop2.comp", Defines: []string{f.define, "TENSOR"}})
	}
	vs = append(vs, Variant{Name: "normapply_rms", Source: "normapply.comp"},
		Variant{Name: "normapply_layer", Source: "normapply.comp", Defines: []string{"CENTER"}},
		Variant{Name: "gather_rows", Source: "rows.comp", Defines: []string{"GATHER"}},
		Variant{Name: "scatter_rows", Source: "rows.comp"},
		Variant{Name: "gather_routed", Source: "rows.comp", Defines: []string{"GATHER", "ROUTED"}},
		Variant{Name: "scatter_routed", Source: "rows.comp", Defines: []string{"ROUTED"}},
		Variant{Name: "flash_coop_capture", Source: "flash_coop.comp", Defines: []string{"CAPTURE"}},
		Variant{Name: "scores_coop", Source: "scores.comp", Defines: []string{"COOP"}},
		Variant{Name: "mix_coop", Source: "mix.comp", Defines: []string{"COOP"}},
		Variant{Name: "softmax_sg", Source: "softmax.comp", Defines: []string{"USE_SUBGROUP"}},
		Variant{Name: "rmsnorm_sg", Source: "rmsnorm.comp", Defines: []string{"USE_SUBGROUP"}})
	for _, src := range []string{"route", "sortexperts", "experttiles", "weighted_sum", "rmsnorm", "layernorm", "rope", "scores", "softmax", "mix", "flash", "flash_coop", "add", "swiglu", "gelu", "geglu", "softcap", "edit", "edit_mean", "copy", "argmax", "rank", "rownorm", "tohalf", "splitk"} {
		vs = append(vs, Variant{Name: src, Source: src + ".comp"})
	}
	return vs
}()

// ExactInHalf reports whether every weight of the format with this variant
// suffix is exact in float16.
func ExactInHalf(suffix string) bool {
	for _, f := range formats {
		if f.suffix == suffix {
			return f.exactHalf
		}
	}
	return false
}

// Has reports whether the named module exists.
func Has(name string) bool {
	_, err := fs.Stat(spv, "spv/"+name+".spv")
	return err == nil
}

// SPIRV returns the named module as 32-bit words, as vkCreateShaderModule
// wants them (an embedded []byte is not guaranteed 4-byte aligned).
func SPIRV(name string) ([]uint32, error) {
	b, err := spv.ReadFile("spv/" + name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: no SPIR-V module %q", name)
	}
	if len(b)%4 != 0 || len(b) < 20 || binary.LittleEndian.Uint32(b) != 0x07230203 {
		return nil, fmt.Errorf("shaders: %s.spv is not SPIR-V", name)
	}
	words := make([]uint32, len(b)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return words, nil
}
