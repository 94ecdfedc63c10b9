package viz

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"io"

	"github.com/stratalab/strata/gpu/trace"
)

// HTML is a self-contained interactive view: styles and scripts inline, no
// network. Notebooks display it (nb.Show), Page makes it a whole document.
type HTML struct {
	Title string
	Body  string // an HTML fragment
}

// HTML returns the fragment, for a notebook's HTML output.
func (h HTML) HTML() string { return h.Body }

// Page returns a complete HTML document holding the view.
func (h HTML) Page() string {
	return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html.EscapeString(h.Title) +
		"</title></head><body style=\"font-family:sans-serif\">\n" + h.Body + "\n</body></html>\n"
}

// Save writes Page to path, whole or not at all.
func (h HTML) Save(path string) error {
	return trace.WriteAtomic(path, func(w io.Writer) error {
		_, err := io.WriteString(w, h.Page())
		return err
	})
}

// viewID is a fresh element id, so that several views on one notebook page
// find their own elements.
func viewID(kind string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Errorf("viz: %w", err))
	}
	return "strata-" + kind + "-" + hex.EncodeToString(b)
}

// showPiece makes whitespace in a token visible.
func showPiece(p string) string {
	r := []rune(p)
	out := make([]rune, 0, len(r))
	for _, c := range r {
		switch c {
		case '\n':
			out = append(out, '↵')
		case '\t':
			out = append(out, '→')
		case ' ':
			out = append(out, '·')
		default:
			out = append(out, c)
		}
	}
	return string(out)
}
