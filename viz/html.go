package viz

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"io"

	"github.com/stratalab/strata/trace"
)

// HTML is a self-contained interactive view: styles and scripts inline, no
// network. Notebooks display it (nb.Show), Page makes it a whole document.
type HTML struct {
	Title string
	Body  string // an HTML fragment
}

// HTML returns the fragment, for a notebook's HTML output.
func (h HTML) HTML() string { return h.Body }

// WithCaption returns the view with caption written above it, in larger
// type than the view's own header, as nb.Show(nb.Caption(...), h) shows
// it; the caption also titles its page.
func (h HTML) WithCaption(caption string) HTML {
	if caption == "" {
		return h
	}
	return HTML{Title: caption, Body: `<div class="strata-caption" style="font:bold 18px sans-serif;margin:8px 0 4px">` +
		html.EscapeString(caption) + "</div>" + h.Body}
}

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

// viewID names a view's root element after its content, so that a saved
// view is the same bytes each time it is written.
func viewID(kind string, content []byte) string {
	sum := sha256.Sum256(content)
	return "strata-" + kind + "-" + hex.EncodeToString(sum[:6])
}

// viewRoot is the script expression that finds a view's root: the first
// element of its id not yet taken, because a notebook page may show the
// same view (the same id) twice.
func viewRoot(id string) string {
	return fmt.Sprintf(`(()=>{const e=[...document.querySelectorAll('[id=%q]')].find(e=>!e.dataset.strataReady); e.dataset.strataReady='1'; return e;})()`, id)
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
