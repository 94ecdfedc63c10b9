package trace

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// ErrBusy is wrapped by the error of a folder replacement that found
// another writer (a process or goroutine) replacing the same folder.
var ErrBusy = errors.New("another writer is saving to this folder")

// folderIndex is the hidden file, in every folder ReplaceFolder writes,
// that says which trace the folder holds and which files are its own: a
// later replacement removes only those and keeps whatever else it is told.
const folderIndex = ".strata-trace.json"

type folderMeta struct {
	Trace string   `json:"trace"` // Fingerprint of the trace the files show; "" for a folder of traces' folders
	Files []string `json:"files"`
}

// ReplaceFolder replaces the folder dir with a new one that write fills,
// so that dir holds at every instant either the whole old folder or the
// whole new one, never a mix: write fills a hidden sibling folder, which
// is then swapped in (with one atomic exchange on Linux, otherwise two
// renames, between which dir is briefly absent; the next replacement puts
// the old folder back if a crash came between them).
//
// When the old folder holds this same trace, its files that write did not
// make are kept, so Save after viz.Report (or the reverse) keeps both.
// Files that Strata did not write are never removed: a folder that holds
// any is refused, as is a second writer while one is at work (ErrBusy).
func (t *Trace) ReplaceFolder(dir string, write func(tmp string) error) error {
	if t == nil {
		return errors.New("trace: ReplaceFolder of a nil *Trace")
	}
	return replaceFolder(dir, t.Fingerprint, write)
}

// ReplaceFolders replaces the folder dir, as ReplaceFolder does, with a
// folder of trace folders: write fills tmp with one folder a trace (each
// by ReplaceFolder or viz.Export of tmp/NAME). The old folder, a trace's
// or another such folder of traces, is replaced whole: none of it is kept.
func ReplaceFolders(dir string, write func(tmp string) error) error {
	return replaceFolder(dir, func() (string, error) { return "", nil }, write)
}

// replaceFolder is ReplaceFolder of the trace whose fingerprint fingerprint
// gives; "" keeps none of the old folder's files.
func replaceFolder(dir string, fingerprint func() (string, error), write func(tmp string) error) error {
	abs, err := replaceable(dir)
	if err != nil {
		return err
	}
	parent, base := filepath.Split(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("trace: %s: cannot make the folder above it: %s", dir, blocker(parent, dir, abs, err))
	}
	unlock, err := lockFolder(filepath.Join(parent, stem(base)+".lock"))
	if errors.Is(err, ErrBusy) {
		return fmt.Errorf("trace: %s: %w (lock %s); nothing was written", dir, ErrBusy, filepath.Join(parent, stem(base)+".lock"))
	}
	if err != nil {
		return fmt.Errorf("trace: %s: lock: %w", dir, err)
	}
	defer unlock()

	if err := recoverFolder(parent, base); err != nil {
		return fmt.Errorf("trace: %s: %w", dir, err)
	}
	old, err := readFolder(abs)
	if err != nil {
		return fmt.Errorf("trace: %s: %w", dir, err)
	}
	if st, err := os.Stat(abs); err == nil && old != nil && st.Mode().Perm()&0o200 == 0 {
		return fmt.Errorf("trace: %s: the folder is read-only (%v), and replacing it deletes the old trace's files: make it writable, or choose another folder; nothing was written", dir, st.Mode().Perm())
	}
	fp, err := fingerprint()
	if err != nil {
		return fmt.Errorf("trace: %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, stem(base)+".new-*") // the random part at the last *, not at one in base
	if err != nil {
		return fmt.Errorf("trace: %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // no-op once swapped in and the old one removed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("trace: %s: %w", dir, err)
	}
	if err := write(tmp); err != nil {
		return scrub(err, tmp, abs, dir)
	}
	if old != nil && fp != "" && old.Trace == fp {
		for _, name := range old.Files {
			if name != filepath.Base(name) || !filepath.IsLocal(name) {
				continue // not a name ReplaceFolder wrote
			}
			if _, err := os.Lstat(filepath.Join(tmp, name)); err == nil {
				continue // write made a new one
			}
			if err := linkOrCopy(filepath.Join(abs, name), filepath.Join(tmp, name)); err != nil {
				return scrub(err, tmp, abs, dir)
			}
		}
	}
	if err := finishFolder(tmp, fp); err != nil {
		return scrub(err, tmp, abs, dir)
	}
	if err := swapIn(tmp, abs, old != nil); err != nil {
		return scrub(err, tmp, abs, dir)
	}
	syncDir(parent)
	return nil
}

// CheckFolder says, before any work, why ReplaceFolder would refuse dir:
// the root, a folder holding the current directory, something not a
// folder, or a folder holding files Strata did not write.
func CheckFolder(dir string) error {
	abs, err := replaceable(dir)
	if err != nil {
		return err
	}
	_, err = readFolder(abs)
	if errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("trace: %s: cannot make the folder above it: %s", dir, blocker(filepath.Dir(abs), dir, abs, err))
	}
	if err != nil {
		return fmt.Errorf("trace: %s: %w", dir, err)
	}
	return nil
}

// replaceable resolves dir to the folder a replacement of it replaces, and
// refuses one whose replacement would pull the ground away.
func replaceable(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("trace: %s: %w", dir, err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // replace the folder a link points to, not the link
	}
	if _, base := filepath.Split(abs); base == "" {
		return "", fmt.Errorf("trace: %s: is the root of the file system: choose a folder below it", dir)
	}
	if wd, err := filepath.EvalSymlinks("."); err == nil && isWithin(mustAbs(wd), abs) {
		return "", fmt.Errorf("trace: %s: holds the current directory, which replacing the folder would pull away: choose another folder", dir)
	}
	return abs, nil
}

// blocker says why the folders above abs could not be made, in the terms
// of the user's dir: most often a file where a folder should be.
func blocker(parent, dir, abs string, err error) string {
	for p := filepath.Clean(parent); ; p = filepath.Dir(p) {
		if st, statErr := os.Stat(p); statErr == nil {
			if st.IsDir() {
				break
			}
			// Name it as the user wrote dir: the same prefix of their path.
			if rel, relErr := filepath.Rel(p, abs); relErr == nil {
				if user := strings.TrimSuffix(filepath.Clean(dir), string(filepath.Separator)+rel); user != filepath.Clean(dir) {
					p = user
				}
			}
			return p + " is a file, not a folder"
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

func mustAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// isWithin reports whether path is dir or below it.
func isWithin(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// readFolder returns what the existing folder dir holds (nil when there is
// none) and refuses a folder with files Strata did not write.
func readFolder(dir string) (*folderMeta, error) {
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, errors.New("exists and is not a folder")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	meta := &folderMeta{}
	raw, err := os.ReadFile(filepath.Join(dir, folderIndex))
	if err != nil {
		// A folder written before folders had an index: no trace to keep.
		return meta, legacyFolder(dir, entries)
	}
	if json.Unmarshal(raw, meta) != nil {
		return nil, fmt.Errorf("holds %s, which is not a Strata folder index: move it away or choose another folder (nothing was written)", folderIndex)
	}
	ours := map[string]bool{folderIndex: true}
	for _, f := range meta.Files {
		ours[f] = true
	}
	for _, e := range entries {
		if !ours[e.Name()] || e.IsDir() && meta.Trace != "" {
			return nil, fmt.Errorf("holds %s, which Strata did not write: move it away or choose another folder (nothing was written)", e.Name())
		}
		if e.IsDir() { // a trace's folder in a folder of them: replacing removes it too
			sub, err := readFolder(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("in %s: %w", e.Name(), err)
			}
			if sub == nil || sub.Trace == "" {
				return nil, fmt.Errorf("holds %s, which is not a folder of a trace Strata wrote: move it away or choose another folder (nothing was written)", e.Name())
			}
		}
	}
	return meta, nil
}

var (
	legacyFile = regexp.MustCompile(`^(trace\.npz|manifest\.json|index\.html|[a-z0-9_]+\.(png|svg))$`)
	legacyTemp = regexp.MustCompile(`^\.[^/]+\.tmp-[0-9]+$`) // WriteAtomic's, from a killed writer
)

// legacyFolder accepts a folder written before folders had an index: the
// files of a trace and its report, and nothing else. A trace is a
// trace.npz or a manifest.json of a Strata trace: index.html, manifest.json
// and *.png are common names, and a web page's folder of them was taken for
// a trace and replaced.
func legacyFolder(dir string, entries []fs.DirEntry) error {
	trace := false
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir() || !legacyFile.MatchString(name) && !legacyTemp.MatchString(name):
			return fmt.Errorf("holds %s, which Strata did not write: move it away or choose another folder (nothing was written)", name)
		case name == "trace.npz":
			trace = true
		case name == "manifest.json":
			var m struct {
				Format string `json:"format"`
			}
			raw, err := readRegular(filepath.Join(dir, name), e)
			if err != nil || json.Unmarshal(raw, &m) != nil || m.Format != manifestFormat {
				return fmt.Errorf("holds manifest.json, which is not a Strata trace's: move it away or choose another folder (nothing was written)")
			}
			trace = true
		}
	}
	if len(entries) > 0 && !trace {
		return fmt.Errorf("holds %s but no trace: not a Strata trace folder; move its files away or choose another folder (nothing was written)", entries[0].Name())
	}
	return nil
}

// readRegular reads a regular file of at most maxManifest bytes: a pipe
// would hang the read, a link to /dev/zero never end it.
func readRegular(path string, e fs.DirEntry) ([]byte, error) {
	if !e.Type().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxManifest))
}

// recoverFolder, with the lock held, puts back a folder that a writer
// killed between its two renames left aside, and removes what killed
// writers left half-made.
func recoverFolder(parent, base string) error {
	olds, _ := filepath.Glob(filepath.Join(parent, globEscape(stem(base))+".old-*"))
	news, _ := filepath.Glob(filepath.Join(parent, globEscape(stem(base))+".new-*"))
	if _, err := os.Lstat(filepath.Join(parent, base)); errors.Is(err, fs.ErrNotExist) && len(olds) > 0 {
		slices.Sort(olds) // names carry the time they were set aside: the last is the newest
		if err := os.Rename(olds[len(olds)-1], filepath.Join(parent, base)); err != nil {
			return fmt.Errorf("restoring the folder an interrupted save set aside: %w", err)
		}
		olds = olds[:len(olds)-1]
	}
	for _, p := range append(olds, news...) {
		_ = os.RemoveAll(p) // litter; a failure here harms nothing
	}
	return nil
}

// stem is how the hidden files beside base begin (its lock, the folder
// being filled, the one set aside, a file being written): "."+base, or for
// a name near the 255-byte limit of a file name, a shorter one that a
// hash of base keeps apart from others.
func stem(base string) string {
	const room = 200 // leaves room for ".old-" and a time and random suffix
	if len(base) < room {
		return "." + base
	}
	sum := sha256.Sum256([]byte(base))
	return "." + strings.ToValidUTF8(base[:64], "") + "~" + hex.EncodeToString(sum[:8])
}

func globEscape(s string) string {
	return strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`).Replace(s)
}

// finishFolder writes the index and makes the new folder's files durable
// before it is swapped in.
func finishFolder(tmp, fp string) error {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	meta := folderMeta{Trace: fp, Files: []string{}}
	for _, e := range entries {
		meta.Files = append(meta.Files, e.Name())
		if err := syncFile(filepath.Join(tmp, e.Name())); err != nil {
			return err
		}
	}
	raw, err := json.MarshalIndent(meta, "", " ")
	if err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(tmp, folderIndex), append(raw, '\n')); err != nil {
		return err
	}
	syncDir(tmp)
	return nil
}

// exchange swaps two folders atomically; platforms without it return
// errors.ErrUnsupported. A variable so that tests can take it away.
var exchange = exchangeDirs

// swapIn puts the filled folder tmp at dir and removes the old one.
func swapIn(tmp, dir string, exists bool) error {
	if !exists {
		return os.Rename(tmp, dir)
	}
	if err := exchange(tmp, dir); err == nil {
		if err := os.RemoveAll(tmp); err != nil { // now the old folder
			return fmt.Errorf("the new trace is in place, but the old one could not be deleted from %s: %w", tmp, err)
		}
		return nil
	}
	// Two renames: dir is absent between them; recoverFolder undoes the first
	// after a crash there.
	aside := filepath.Join(filepath.Dir(dir), fmt.Sprintf("%s.old-%020d-%s", stem(filepath.Base(dir)), time.Now().UnixNano(), randomSuffix()))
	if err := os.Rename(dir, aside); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if back := os.Rename(aside, dir); back != nil {
			return fmt.Errorf("%w; the old folder is at %s", err, aside)
		}
		return err
	}
	return os.RemoveAll(aside)
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil // files in a folder are never rewritten in place, so sharing is safe
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return err
	}
	return f.Sync()
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes renames in dir durable where the platform allows; a
// failure costs durability after a power cut, not consistency.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

// scrubbed is an error whose text names the user's folder instead of the
// hidden one the files were written to.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

func scrub(err error, tmp, abs, dir string) error {
	msg := strings.ReplaceAll(err.Error(), tmp, abs)
	if abs != dir {
		msg = strings.ReplaceAll(msg, abs, dir)
	}
	return &scrubbed{msg: "trace: " + dir + ": " + strings.TrimPrefix(msg, "trace: "), err: err}
}

// Fingerprint identifies the trace's content: its manifest and every
// tensor's values. Captures still on the device are read, not kept.
func (t *Trace) Fingerprint() (string, error) {
	if t == nil {
		return "", errNilTrace
	}
	h := sha256.New()
	m := t.manifest()
	table := crc32.MakeTable(crc32.Castagnoli)
	var sums []byte
	err := t.each(func(name string, x *Tensor) error {
		m.add(name, x)
		var sum uint32
		if len(x.Data) > 0 {
			sum = crc32.Checksum(unsafe.Slice((*byte)(unsafe.Pointer(&x.Data[0])), 4*len(x.Data)), table)
		}
		sums = binary.LittleEndian.AppendUint32(sums, sum)
		return nil
	})
	if err != nil {
		return "", err
	}
	raw, _ := json.Marshal(m)
	h.Write(raw)
	h.Write(sums)
	return hex.EncodeToString(h.Sum(nil)), nil
}
