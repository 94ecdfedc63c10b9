// Package sharedtest finds the project's read-only shared material for
// tests: the folder shared/ that sits beside the checkout (../shared from the
// repository root), with the pretrained stories260K model.
package sharedtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Path returns ../shared/<rel> beside the checkout, or skips the test,
// saying why, when it is absent.
func Path(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("go.mod not found above the test directory, so ../shared cannot be located")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is absent (the shared material sits beside the checkout as ../shared): %v", p, err)
	}
	return p
}

// Stories is the pretrained stories260K model (5-layer llama, SentencePiece vocabulary of 512).
func Stories(t testing.TB) string { return Path(t, "models/stories260K.gguf") }
