// Command build compiles every shader variant into spv/ and records the
// compiler's version; run it from the shaders directory (go generate does).
package main

import (
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/stratalab/strata/shaders"
	"github.com/stratalab/strata/shaders/internal/glslc"
)

func main() {
	version, err := glslc.Version()
	if err != nil {
		log.Fatal(err)
	}
	keep := map[string]bool{}
	for _, v := range shaders.Variants {
		out := filepath.Join("spv", v.Name+".spv")
		if err := glslc.Compile(".", v.Source, v.Defines, out); err != nil {
			log.Fatal(err)
		}
		keep[out] = true
	}
	old, _ := filepath.Glob(filepath.Join("spv", "*.spv"))
	for _, f := range old {
		if !keep[f] {
			if err := os.Remove(f); err != nil {
				log.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join("spv", "glslang.version"), []byte(strings.TrimSpace(version)+"\n"), 0o644); err != nil {
		log.Fatal(err)
	}
}
