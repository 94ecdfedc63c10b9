package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// strataErr runs a command and returns its stdout, its notes on stderr and
// its error.
func strataErr(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var errBuf bytes.Buffer
	old := stderr
	stderr = &errBuf
	defer func() { stderr = old }()
	out, err := strata(t, args...)
	return out, errBuf.String(), err
}

// tinyShape is a model small enough to generate to the end of its context
// in a moment.
var tinyShape = synth.Shape{Arch: "llama", Layers: 2, DModel: 32, FFN: 64, Heads: 2, KVHeads: 1, HeadDim: 16,
	Vocab: 300, Context: 16, Theta: 10000}

// writeModel writes a generated model to a file; nanTensor, when set, is a
// F32 tensor whose values become NaN.
func writeModel(t *testing.T, s synth.Shape, nanTensor string) string {
	t.Helper()
	w, err := synth.Generate(s, gguf.F32, 3)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	if nanTensor != "" {
		f, err := gguf.Parse(buf.Bytes(), "nan")
		require.NoError(t, err)
		ti, ok := f.Tensor(nanTensor)
		require.True(t, ok)
		data := f.Data(ti) // aliases buf
		for i := 0; i < len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(math.NaN())))
		}
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path
}

// Case 13: --help exits 0 for every command, with its usage on stdout.
func TestHelpSucceedsForEveryCommand(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			out, err := strata(t, args...)
			require.NoError(t, err, "%v", args)
			require.Contains(t, out, "usage: strata "+c.name, "%v", args)
			require.Contains(t, out, "flags:", "%v", args)
		}
	}
	_, err := strata(t, "tokenize", "--frob", "x")
	require.ErrorContains(t, err, "flag provided but not defined: -frob (strata tokenize --help lists the flags)")
}

// strata with no command fails (main exits 1), with the usage on stderr;
// asked for, the usage goes to stdout and succeeds.
func TestNoCommandFails(t *testing.T) {
	out, notes, err := strataErr(t)
	require.EqualError(t, err, "no command given (strata help lists them)")
	require.Empty(t, out)
	require.Contains(t, notes, "usage: strata COMMAND")
	for _, arg := range []string{"help", "-h", "--help"} {
		out, notes, err := strataErr(t, arg)
		require.NoError(t, err, arg)
		require.Contains(t, out, "usage: strata COMMAND", arg)
		require.Empty(t, notes, arg)
	}
}

// Case 13: info's prompt length must be one the model can prefill.
func TestInfoRefusesAPromptLengthOutOfRange(t *testing.T) {
	path := writeModel(t, tinyShape, "")
	for _, n := range []string{"-5", "0", "17", "9223372036854775807"} {
		_, err := strata(t, "info", path, "-n", n)
		require.ErrorContains(t, err, "-n "+n+": the prompt length must be from 1 to the model's context of 16 tokens")
	}
	_, err := strata(t, "info", path, "-n", "99999999999999999999")
	require.ErrorContains(t, err, "invalid value")
	out, err := strata(t, "info", path, "-n", "16")
	require.NoError(t, err)
	require.Contains(t, out, "prefill of 16 tokens needs about")
	out, err = strata(t, "info", path)
	require.NoError(t, err)
	require.Contains(t, out, "prefill of 16 tokens needs about", "the default fits a short context")
}

// countingWriter counts the writes to stdout, to see the text streamed.
type countingWriter struct {
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.buf.Write(p)
}

func (w *countingWriter) String() string { return w.buf.String() }

// Case 8: generation past the context stops at its end, keeps (streams)
// every token generated, says why it stopped and succeeds.
func TestRunStopsAtTheEndOfTheContext(t *testing.T) {
	path := writeModel(t, tinyShape, "")
	var out countingWriter
	var notes bytes.Buffer
	old := stderr
	stderr = &notes
	defer func() { stderr = old }()
	err := dispatch(context.Background(), []string{"run", "--model", path, "--backend", "cpu", "--prompt", "ab", "-n", "100000"}, &out)
	require.NoError(t, err)
	// The 2-token prompt and 14 generated tokens fill 16 positions; the 15th
	// token's prediction needs no position of its own.
	require.Contains(t, notes.String(), "strata: stopped after 15 of 100000 tokens: the context of 16 tokens is full")
	t.Logf("generated %q in %d writes", out.String(), out.writes)
	require.Greater(t, out.writes, 2, "the text is written as it is generated")
	require.True(t, strings.HasSuffix(out.String(), "\n"))

	// A shorter run is the start of the longer one: nothing was lost.
	short, notes2, err := strataErr(t, "run", "--model", path, "--backend", "cpu", "--prompt", "ab", "-n", "5")
	require.NoError(t, err)
	require.NotContains(t, notes2, "stopped")
	require.True(t, strings.HasPrefix(out.String(), strings.TrimSuffix(short, "\n")), "%q is not the start of %q", short, out.String())

	_, err = strata(t, "run", "--model", path, "--prompt", "ab", "-n", "-1")
	require.ErrorContains(t, err, "-n -1: the number of tokens to generate cannot be negative")
}

// Unclear messages: a prompt longer than the context is said the same way
// by run and trace, in the prompt's and the context's terms.
func TestPromptLongerThanTheContextIsSaidPlainly(t *testing.T) {
	path := writeModel(t, tinyShape, "")
	long := strings.Repeat("x", 20) // byte-level tokenizer: 20 tokens
	_, err := strata(t, "run", "--model", path, "--prompt", long)
	require.EqualError(t, err, "the prompt is 20 tokens; the model's context is 16")
	_, err = strata(t, "trace", "--model", path, "--prompt", long, "--out", t.TempDir())
	require.EqualError(t, err, "the prompt is 20 tokens; the model's context is 16")
	ids := strings.TrimSuffix(strings.Repeat("1,", 17), ",")
	_, err = strata(t, "trace", "--model", path, "--tokens", ids, "--out", t.TempDir())
	require.EqualError(t, err, "the prompt is 17 tokens; the model's context is 16")
}

// Case 13 and the unclear messages: trace refuses empty and out-of-range
// requests by naming the flag.
func TestTraceRefusesEmptyAndOutOfRangeFlags(t *testing.T) {
	path := writeModel(t, tinyShape, "")
	dir := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens", ""}, "--tokens is empty: give token ids"},
		{[]string{"--tokens", " "}, "--tokens is empty: give token ids"},
		{[]string{"--prompt", ""}, "--prompt is empty"},
		{[]string{"--tokens", "1", "--prompt", "a"}, "trace takes --prompt or --tokens, not both"},
		{[]string{"--tokens", "1,300"}, "--tokens: 300 is not a token id of this model: its vocabulary is 0 to 299"},
		{[]string{"--tokens", "1,-1"}, `--tokens: "-1" is not a token id`},
		{[]string{"--tokens", "+5"}, `--tokens: "+5" is not a token id`},
		{[]string{"--tokens", "1, +2"}, `--tokens: " +2" is not a token id`},
		{[]string{"--tokens", "4294967301"}, "--tokens: 4294967301 is not a token id of this model"},
		{[]string{"--tokens", "1,,2"}, `--tokens: "" is not a token id`},
		{[]string{"--tokens", "1", "--layers", "5:9"}, "--layers 5:9: the model has 2 layers, 0 to 1"},
		{[]string{"--tokens", "1", "--layers", "1:2"}, "--layers 1:2: the model has 2 layers, 0 to 1"},
		{[]string{"--tokens", "1", "--layers", "-1:1"}, `--layers "-1:1": want FIRST:LAST`},
		{[]string{"--tokens", "1", "--layers", "1:0"}, `--layers "1:0": want FIRST:LAST`},
		{[]string{"--tokens", "1", "--layers", "+0:1"}, `--layers "+0:1": want FIRST:LAST`},
		{[]string{"--tokens", "1", "--out", ""}, "--out is empty"},
		{[]string{"--tokens", "1", "--precision", "bf16"}, `--precision: "bf16" is not a precision: want exact or fast`},
	} {
		args := append([]string{"trace", "--model", path, "--out", dir}, c.args...)
		_, err := strata(t, args...)
		require.ErrorContains(t, err, c.want, "%v", c.args)
		require.NoDirExists(t, dir, "%v: nothing is written", c.args)
	}
}

// Unclear messages: --out errors name the flag and the user's path, never
// a temporary name, and leave what was there.
func TestTraceOutErrorsNameTheFlagAndPath(t *testing.T) {
	path := writeModel(t, tinyShape, "")
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("mine"), 0o644))
	_, err := strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", file)
	require.EqualError(t, err, "--out "+file+": exists and is not a folder")
	_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", filepath.Join(file, "sub"))
	require.ErrorContains(t, err, "--out "+filepath.Join(file, "sub")+": ")
	require.NotContains(t, err.Error(), ".new-")

	_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", ".")
	require.EqualError(t, err, "--out .: holds the current directory, which replacing the folder would pull away: choose another folder")
	_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", filepath.Join(file, "sub", "x"))
	require.EqualError(t, err, "--out "+filepath.Join(file, "sub", "x")+": cannot make the folder above it: "+file+" is a file, not a folder")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", dir)
	require.EqualError(t, err, "--out "+dir+": holds notes.txt, which Strata did not write: move it away or choose another folder (nothing was written)")

	// A web page's folder (index.html, manifest.json, logo.png) is not a
	// trace: it was replaced, logo and all.
	site := t.TempDir()
	page := map[string]string{"index.html": "<h1>mine</h1>", "manifest.json": `{"name":"my app"}`, "logo.png": "not a png"}
	for name, body := range page {
		require.NoError(t, os.WriteFile(filepath.Join(site, name), []byte(body), 0o644))
	}
	_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", site)
	require.EqualError(t, err, "--out "+site+": holds manifest.json, which is not a Strata trace's: move it away or choose another folder (nothing was written)")
	require.NoError(t, os.Remove(filepath.Join(site, "manifest.json")))
	_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", site)
	require.ErrorContains(t, err, "but no trace: not a Strata trace folder")
	for name, body := range page {
		if name != "manifest.json" {
			got, err := os.ReadFile(filepath.Join(site, name))
			require.NoError(t, err)
			require.Equal(t, body, string(got), "%s is kept", name)
		}
	}

	// A write that fails midway (a folder where a file goes) names --out
	// and the user's folder, not the hidden one being filled.
	ro := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(ro, 0o755))
	require.NoError(t, os.Chmod(ro, 0o555))
	t.Cleanup(func() { os.Chmod(ro, 0o755) })
	if os.Geteuid() != 0 { // root writes anyway
		_, err = strata(t, "trace", "--model", path, "--tokens", "1,2", "--out", filepath.Join(ro, "out"))
		require.ErrorContains(t, err, "--out "+filepath.Join(ro, "out")+": ")
		require.NotContains(t, err.Error(), ".new-")
	}
}

// Case 4 through the command line: a model with NaN weights in layer 1 is
// traced; the manifest reads back with the first non-finite capture and
// the report and stderr say where.
func TestTraceOfANaNModel(t *testing.T) {
	path := writeModel(t, tinyShape, "blk.1.ffn_norm.weight")
	dir := filepath.Join(t.TempDir(), "out")
	out, notes, err := strataErr(t, "trace", "--model", path, "--backend", "cpu", "--tokens", "1,2,3", "--out", dir)
	require.NoError(t, err, "the trace of a broken model is written")
	require.Contains(t, out, "traced 3 tokens")
	require.Contains(t, notes, "strata: warning: the model went non-finite: first at blocks.1.ln2.hook_normalized (layer 1), 96 NaN")

	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m trace.Manifest
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, &trace.FirstNonFinite{Capture: "blocks.1.ln2.hook_normalized", Layer: 1, NonFinite: trace.NonFinite{NaN: 96}}, m.FirstNonFinite)
	require.Contains(t, string(raw), `"NaN"`, "the logit lens's NaN probabilities")
	tr, err := trace.Load(dir)
	require.NoError(t, err)
	require.True(t, math.IsNaN(float64(tr.Tensor("logits").Data[0])))
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(page), "The model first went non-finite at <code>blocks.1.ln2.hook_normalized</code> (layer 1): 96 NaN.")
}

// strata run on the same model printed an empty line and exited 0: with
// NaN logits, every token was token 0.
func TestRunOfANaNModelFails(t *testing.T) {
	path := writeModel(t, tinyShape, "blk.1.ffn_norm.weight")
	for _, backend := range []string{"cpu", "vulkan"} {
		if backend == "vulkan" && !vulkanPresent(t) {
			continue
		}
		_, err := strata(t, "run", "--model", path, "--backend", backend, "--prompt", "abc", "-n", "4")
		require.ErrorContains(t, err, "the logits for generated token 1 hold NaN, so there is no next token", backend)
	}
}

// Case 13's class: bench refuses budgets, counts and lengths that would
// give a wrong answer or a panic.
func TestBenchRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--budget", "-1"}, "--budget -1: want a size in GiB"},
		{[]string{"--budget", "0"}, "--budget 0: want a size in GiB"},
		{[]string{"--budget", "NaN"}, "--budget NaN: want a size in GiB"},
		{[]string{"--budget", "Inf"}, "--budget +Inf: want a size in GiB"},
		{[]string{"--budget", "1e-300"}, "--budget 1e-300: want a size in GiB"},
		{[]string{"--iters", "0"}, "--iters 0: want at least 1 timed run"},
		{[]string{"--capture", "some"}, `--capture "some": want none or all`},
		{[]string{"--tokens", "8,-3"}, `--tokens: "-3" is not a positive length`},
		{[]string{"--tokens", "+5"}, `--tokens: "+5" is not a positive length`},
		{[]string{"--tokens", "600"}, "--tokens 600: the prompt is 600 tokens; the model's context is 512"},
		{[]string{"--precision", "exact,half"}, `--precision: "half" is not a precision: want exact or fast`},
		{[]string{"--tokens", "4, 4"}, "--tokens 4, 4: 4 is named twice"},
		{[]string{"--capture", "none,all,none"}, "--capture none,all,none: none is named twice"},
		{[]string{"--precision", "fast,exact,fast"}, "--precision fast,exact,fast: fast is named twice"},
		{[]string{"--type", "Q5_K_S"}, `--type: unknown type "Q5_K_S": want a tensor type (F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16, Q1_0_g128, TQ2_0_g128) or a mix of llama.cpp's quantizer (Q4_K_M, Q5_K_M)`},
	} {
		args := append([]string{"bench", "--shape", "tiny-llama", "--type", "F32"}, c.args...)
		_, err := strata(t, args...)
		require.ErrorContains(t, err, c.want, "%v", c.args)
	}
	// Issue 47.12: --type without --shape was ignored.
	_, err := strata(t, "bench", "--type", "Q8_0", "--tokens", "4")
	require.EqualError(t, err, "--type Q8_0: it is the weight type of a generated model (--shape); a model file's types are its own")
}

// traceArgs are two different traces of stories260K to one folder.
func traceArgs(t *testing.T, dir string, which int) []string {
	return []string{"trace", "--model", sharedtest.Stories(t), "--backend", "cpu",
		"--tokens", []string{"1,403,407,261,378", "1,403,407,261,378,403,407"}[which],
		"--capture", "blocks.*.hook_resid_post,blocks.*.attn.hook_pattern,blocks.*.attn.cache_k,logits", "--out", dir}
}

// readFolder is every file of a folder, by name.
func readFolder(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		files[strings.TrimPrefix(p, dir+string(filepath.Separator))] = string(b)
		return err
	}))
	return files
}

// whichTrace says which of the reference folders dir equals, file for
// file, or fails.
func whichTrace(t *testing.T, dir string, refs []map[string]string) int {
	t.Helper()
	got := readFolder(t, dir)
	for i, ref := range refs {
		if len(got) != len(ref) {
			continue
		}
		same := true
		for name, b := range ref {
			same = same && got[name] == b
		}
		if same {
			return i
		}
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	t.Fatalf("%s is not wholly one trace: it holds %v", dir, names)
	return -1
}

// Case 3 through the command line: `strata trace --out D` killed at any
// moment leaves D wholly the old trace folder or wholly the new one, every
// file byte for byte.
func TestKilledTraceLeavesAWholeFolder(t *testing.T) {
	if dir := os.Getenv("STRATA_TRACE_CHILD"); dir != "" {
		deadline := time.Now().Add(30 * time.Second) // should the parent die first
		for i := 0; time.Now().Before(deadline); i++ {
			_ = dispatch(context.Background(), traceArgs(t, dir, i%2), &bytes.Buffer{})
		}
		os.Exit(0)
	}
	refs := make([]map[string]string, 2)
	for i := range refs {
		ref := t.TempDir()
		_, err := strata(t, traceArgs(t, ref, i)...)
		require.NoError(t, err)
		refs[i] = readFolder(t, ref)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	_, err := strata(t, traceArgs(t, dir, 0)...)
	require.NoError(t, err)
	seen := map[int]int{}
	for kill := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledTraceLeavesAWholeFolder$")
		cmd.Env = append(os.Environ(), "STRATA_TRACE_CHILD="+dir)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		time.Sleep(time.Duration(300+rand.IntN(700*(kill+1))) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		seen[whichTrace(t, dir, refs)]++
	}
	t.Logf("folders after the kills: %v", seen)
}

// Case 3: concurrent `strata trace` to one --out: each succeeds or is
// refused, naming --out and the other writer, and the folder is wholly one
// trace at the end.
func TestConcurrentTracesToOneFolder(t *testing.T) {
	refs := make([]map[string]string, 2)
	for i := range refs {
		ref := t.TempDir()
		_, err := strata(t, traceArgs(t, ref, i)...)
		require.NoError(t, err)
		refs[i] = readFolder(t, ref)
	}
	dir := filepath.Join(t.TempDir(), "out")
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for w := range 4 {
		wg.Go(func() {
			for range 3 {
				err := dispatch(context.Background(), traceArgs(t, dir, w%2), &bytes.Buffer{})
				mu.Lock()
				if err == nil {
					ok++
				} else {
					refused++
					assert.ErrorIs(t, err, trace.ErrBusy)
					assert.ErrorContains(t, err, "--out "+dir+": another writer is saving to this folder")
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d traces written, %d refused", ok, refused)
	require.Positive(t, ok)
	whichTrace(t, dir, refs)
	left, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, left, 1, "no lock file or half-made folder is left: %v", left)
}

// The --out class for files: gen --out and bench --json name the flag and
// the user's path, and are refused before any work.
func TestOutputFilesAreCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("mine"), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gen", "--shape", "tiny-llama", "--out", dir}, "--out " + dir + ": is a folder; give a file name"},
		{[]string{"gen", "--shape", "tiny-llama", "--out", filepath.Join(dir, "no", "m.gguf")}, "--out " + filepath.Join(dir, "no", "m.gguf") + ": the folder " + filepath.Join(dir, "no") + " does not exist"},
		{[]string{"gen", "--shape", "tiny-llama", "--out", filepath.Join(file, "m.gguf")}, "--out " + filepath.Join(file, "m.gguf") + ": " + file + " is not a folder"},
		{[]string{"bench", "--shape", "tiny-llama", "--type", "F32", "--tokens", "8", "--json", dir}, "--json " + dir + ": is a folder; give a file name"},
	} {
		_, err := strata(t, c.args...)
		require.EqualError(t, err, c.want)
	}
}

// run's KV cache holds the prompt and -n, not the model's whole context: a
// context of 2^22 tokens made a 3-token run on lavapipe ask for a 2 GiB
// cache buffer (on the CPU, 20 GB of address space).
func TestRunSizesTheCacheByPromptAndN(t *testing.T) {
	s := tinyShape
	s.Context = 1 << 22
	path := writeModel(t, s, "")
	for _, backend := range []string{"cpu", "vulkan"} {
		if backend == "vulkan" && !vulkanPresent(t) {
			continue
		}
		out, err := strata(t, "run", "--model", path, "--backend", backend, "--prompt", "ab", "-n", "3")
		require.NoError(t, err, backend)
		require.NotEmpty(t, out, backend)
	}
}

// A stray word (an unquoted prompt's second word) is refused, not dropped.
func TestStrayArgumentsAreRefused(t *testing.T) {
	for stray, args := range map[string][]string{
		"upon":  {"run", "--prompt", "Once", "upon", "-n", "1"},
		"there": {"trace", "--prompt", "hi", "there", "--out", t.TempDir()},
		"x":     {"gen", "--shape", "tiny-llama", "--out", filepath.Join(t.TempDir(), "m.gguf"), "x"},
		"y":     {"bench", "--shape", "tiny-llama", "--type", "F32", "--tokens", "4", "y"},
	} {
		_, err := strata(t, args...)
		require.ErrorContains(t, err, fmt.Sprintf("unexpected argument %q: strata %s takes only flags", stray, args[0]))
	}
	// tokenize takes one TEXT: joining words would lose their spacing.
	_, err := strata(t, "tokenize", "--model", sharedtest.Stories(t), "Once", "upon")
	require.ErrorContains(t, err, `unexpected argument "upon": strata tokenize takes one TEXT (a text of several words goes in quotes`)
}

// run needs a prompt (an empty one asked for starts from the start-of-text
// token alone), and checks every flag before it says what it draws with.
func TestRunRefusesBadFlagsBeforeDrawing(t *testing.T) {
	path := writeModel(t, tinyShape, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "run needs --prompt: give the text to continue"},
		{[]string{"--prompt", ""}, `--prompt "" has no tokens: this model's tokenizer adds no start-of-text token`},
		{[]string{"--prompt", "ab", "--temperature", "-1"}, "sampling: temperature -1: it must be a finite number"},
		{[]string{"--prompt", "ab", "--temperature", "inf"}, "sampling: temperature +Inf: it must be a finite number"},
		{[]string{"--prompt", "ab", "--temperature", "1", "--top-p", "1.5"}, "sampling: top-p 1.5: it must be in [0, 1]"},
		{[]string{"--prompt", "ab", "--temperature", "1", "--seed", "-1"}, `invalid value "-1" for flag -seed: the seed is an unsigned integer, 0 to 18446744073709551615`},
	} {
		args := append([]string{"run", "--model", path, "--backend", "cpu"}, c.args...)
		out, notes, err := strataErr(t, args...)
		require.ErrorContains(t, err, c.want, "%v", c.args)
		require.Empty(t, out, "%v", c.args)
		require.Empty(t, notes, "%v: nothing is said before the refusal", c.args)
	}
	_, err := strata(t, "gen", "--shape", "tiny-llama", "--out", filepath.Join(t.TempDir(), "m.gguf"), "--seed", "-1")
	require.ErrorContains(t, err, "the seed is an unsigned integer")
	// An empty prompt asked for generates from the start-of-text token alone.
	out, err := strata(t, "run", "--backend", "cpu", "--prompt", "", "-n", "4")
	require.NoError(t, err)
	require.NotEmpty(t, strings.TrimSpace(out))
}

// gen and bench write over what they wrote before, and nothing else: a
// user's notes and a real model stay.
func TestGenAndBenchKeepFilesTheyDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("precious"), 0o644))
	model := filepath.Join(dir, "m.gguf")
	real := filepath.Join(dir, "real.gguf")
	b, err := os.ReadFile("../../models/gostd-qwen3-4m.gguf")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(real, b, 0o644))
	for _, args := range [][]string{
		{"gen", "--shape", "tiny-llama", "--out", notes},
		{"gen", "--shape", "tiny-llama", "--out", real},
		{"bench", "--shape", "tiny-llama", "--type", "F32", "--tokens", "4", "--iters", "1", "--json", notes},
	} {
		_, err := strata(t, args...)
		require.ErrorContains(t, err, "the file exists and is not", args)
	}
	b, err = os.ReadFile(notes)
	require.NoError(t, err)
	require.Equal(t, "precious", string(b))
	for range 2 {
		_, err := strata(t, "gen", "--shape", "tiny-llama", "--out", model)
		require.NoError(t, err, "its own model, again")
		_, err = strata(t, "bench", "--model", model, "--tokens", "4", "--iters", "1", "--json", filepath.Join(dir, "b.json"))
		require.NoError(t, err, "its own rows, again")
	}
}

// An interrupted gen leaves no file, and an interrupted trace leaves the
// folder as it was.
func TestInterruptedWritesLeaveWhatWasThere(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	err := dispatch(ctx, []string{"gen", "--shape", "tiny-llama", "--out", filepath.Join(dir, "m.gguf")}, &out)
	require.ErrorContains(t, err, "interrupted: "+filepath.Join(dir, "m.gguf")+" was not written")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no temporary file")
}

// Issue 47.11: gen wrote mixtures in TQ2_0_g128 that Strata then refused
// to load; gen and bench refuse the combination before generating.
func TestMixturesInTQ2AreRefusedUpFront(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.gguf")
	for _, args := range [][]string{
		{"gen", "--shape", "tiny-qwen3moe", "--type", "TQ2_0_g128", "--out", out},
		{"bench", "--shape", "tiny-mixtral", "--type", "TQ2_0_g128", "--tokens", "4", "--iters", "1"},
	} {
		_, err := strata(t, args...)
		require.ErrorContains(t, err, "a mixture's expert tensors in TQ2_0_g128 are not supported", "%v", args)
	}
	require.NoFileExists(t, out)
}

// fullWriter fails every write, as /dev/full does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// Issue 47.12: `strata tokenize hi >/dev/full` exited 0; output a command
// could not write fails it, for every command that writes.
func TestUnwritableOutputFails(t *testing.T) {
	for _, args := range [][]string{
		{"tokenize", "hi"},
		{"info"},
		{"gen", "--shape", "tiny-llama", "--out", filepath.Join(t.TempDir(), "m.gguf")},
		{"help"},
	} {
		err := dispatch(context.Background(), args, fullWriter{})
		require.ErrorIs(t, err, syscall.ENOSPC, "%v", args)
		require.ErrorContains(t, err, "writing the output", "%v", args)
	}
}

// Issue 47.12: --out names of 240 to 255 bytes failed on the hidden name
// beside them (the temporary file, the lock), 6 to 30 bytes longer.
func TestLongOutputNames(t *testing.T) {
	dir := t.TempDir()
	long := func(ext string) string { return filepath.Join(dir, strings.Repeat("n", 255-len(ext))+ext) }
	model := long(".gguf")
	_, err := strata(t, "gen", "--shape", "tiny-llama", "--out", model)
	require.NoError(t, err)
	_, err = strata(t, "gen", "--shape", "tiny-llama", "--out", model)
	require.NoError(t, err, "again, over its own")
	_, err = strata(t, "bench", "--model", model, "--tokens", "4", "--iters", "1", "--warmup", "0s", "--json", long(".json"))
	require.NoError(t, err)
	_, err = strata(t, "trace", "--model", model, "--tokens", "1,2", "--out", long(""))
	require.NoError(t, err)
	_, err = strata(t, "trace", "--model", model, "--tokens", "1,2", "--out", long(""))
	require.NoError(t, err, "again, over its own")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no hidden file is left")
}
