// Package glslc runs glslangValidator, for the build tool and the test that
// keeps the committed SPIR-V current.
package glslc

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

const tool = "glslangValidator"

// Version is the installed glslangValidator's version line, or an error
// when it is not installed.
func Version() (string, error) {
	out, err := exec.Command(tool, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s is not installed (Debian glslang-tools): %w", tool, err)
	}
	return strings.SplitN(string(out), "\n", 2)[0], nil
}

// Compile builds srcDir/source with the defines into the SPIR-V file out.
// SPIR-V 1.3 (Vulkan 1.1) is the target: subgroup operations need it and
// every Vulkan 1.1 driver takes it.
func Compile(srcDir, source string, defines []string, out string) error {
	args := []string{"-V", "--target-env", "vulkan1.1", "--quiet", "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, filepath.Join(srcDir, source))
	if msg, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling %s %v: %v\n%s", source, defines, err, msg)
	}
	return nil
}
