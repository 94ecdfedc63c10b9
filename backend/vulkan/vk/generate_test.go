package vk

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

const registry = "/usr/share/vulkan/registry/vk.xml"

// TestGeneratedCodeIsCurrent reruns the generator into a temporary
// directory and compares its output with the committed files.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	raw, err := os.ReadFile(registry)
	if err != nil {
		t.Skipf("the Vulkan registry (Debian libvulkan-dev) is not installed: %v", err)
	}
	committed, err := os.ReadFile("types_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	installed := regexp.MustCompile(`VK_HEADER_VERSION</name> (\d+)`).FindSubmatch(raw)
	generated := regexp.MustCompile(`VK_HEADER_VERSION (\d+)`).FindSubmatch(committed)
	if installed == nil || generated == nil {
		t.Fatal("cannot find VK_HEADER_VERSION in the registry or in types_gen.go")
	}
	if !bytes.Equal(installed[1], generated[1]) {
		t.Skipf("the committed code comes from registry version %s, the installed one is %s", generated[1], installed[1])
	}
	dir := t.TempDir()
	if out, err := exec.Command("go", "run", "../internal/gen", "-registry", registry, "-out", dir).CombinedOutput(); err != nil {
		t.Fatalf("running the generator: %v\n%s", err, out)
	}
	for _, name := range []string{"types_gen.go", "commands_gen.go", "layout_gen_test.go"} {
		fresh, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		old, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, old) {
			t.Errorf("%s is stale: run go generate ./gpu/vulkan/vk", name)
		}
	}
}
