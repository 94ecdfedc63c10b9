//go:build unix

package main

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// outputFlags are the flags that name a file or folder a command writes,
// each with a run that writes it (on a real model).
var outputFlags = map[string]struct {
	folder bool
	run    func(model, prompts, out string) []string
}{
	"bench --json": {false, func(m, _, out string) []string {
		return []string{"bench", "--model", m, "--backend", "cpu", "--tokens", "4", "--iters", "1", "--warmup", "0s", "--json", out}
	}},
	"bench --cpuprofile": {false, func(m, _, out string) []string {
		return []string{"bench", "--model", m, "--backend", "cpu", "--tokens", "4", "--iters", "1", "--warmup", "0s", "--cpuprofile", out}
	}},
	"gen --out": {false, func(_, _, out string) []string {
		return []string{"gen", "--shape", "tiny-llama", "--out", out}
	}},
	"trace --out": {true, func(m, _, out string) []string {
		return []string{"trace", "--model", m, "--backend", "cpu", "--tokens", "1,2", "--out", out}
	}},
	"trace --out --prompts": {true, func(m, p, out string) []string {
		return []string{"trace", "--model", m, "--backend", "cpu", "--prompts", p, "--batch", "1", "--out", out}
	}},
}

// notOutputs are every other flag: none names a file or folder to write.
var notOutputs = map[string][]string{
	"info":     {"backend", "capture", "devices", "n", "placement", "points"},
	"tokenize": {"model", "special"},
	"run":      {"backend", "min-p", "model", "n", "placement", "precision", "prompt", "seed", "temperature", "top-k", "top-p"},
	"trace":    {"backend", "batch", "capture", "layers", "model", "placement", "precision", "prompt", "prompts", "tokens"},
	"gen":      {"seed", "shape", "type"},
	"bench":    {"backend", "budget", "capture", "iters", "model", "placement", "precision", "shape", "tokens", "type", "warmup"},
}

// inputFlags are the flags that name a file a command reads.
var inputFlags = []string{"--model", "--prompts"}

// commandFlags lists a command's flags as its --help prints them.
func commandFlags(t *testing.T, cmd string) []string {
	help, err := strata(t, cmd, "--help")
	require.NoError(t, err)
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(help, -1) {
		names = append(names, m[1])
	}
	require.NotEmpty(t, names, cmd)
	return names
}

// Every flag of every command is known as an output or not: a new flag
// fails here until it is one or the other, and every output goes through
// TestEveryOutputPathFlagIsChecked.
func TestEveryFlagIsClassified(t *testing.T) {
	outputs := map[string]bool{}
	for k := range outputFlags {
		f := strings.Fields(k)
		outputs[f[0]+" "+f[1]] = true
	}
	for _, c := range commands {
		for _, name := range commandFlags(t, c.name) {
			out := outputs[c.name+" --"+name]
			require.True(t, out != slices.Contains(notOutputs[c.name], name),
				"strata %s --%s: add it to outputFlags (a file or folder it writes) or notOutputs", c.name, name)
		}
	}
}

// snapshot is what a folder holds, below it too: names, and each file's
// content.
func snapshot(t *testing.T, dir string) map[string][32]byte {
	got := map[string][32]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = sha256.Sum256(b)
		} else {
			got[rel] = [32]byte{byte(d.Type() >> 24)}
		}
		return nil
	}))
	return got
}

// The sweep of issue 47 over every output path flag: before any work
// (the model given to the refusals is not one, so a check after loading it
// fails on that instead), each refuses its command's inputs (a link to one
// too), a file it did not write, a FIFO, a device, a file where its folder
// should be, and for a file a folder or a missing folder (a trace's folder
// is made, with those above it); the refusal names the flag and the path,
// and leaves everything as it was. Each writes over its own output, and an
// interrupted run leaves that output as it was, with nothing beside it.
func TestEveryOutputPathFlagIsChecked(t *testing.T) {
	real := writeModel(t, tinyShape, "")
	for key, o := range outputFlags {
		t.Run(strings.ReplaceAll(key, " ", "_"), func(t *testing.T) {
			f := strings.Fields(key)
			flag := f[1]
			dir := t.TempDir()
			write := func(name, body string) string {
				p := filepath.Join(dir, name)
				require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
				return p
			}
			notModel := write("m.gguf", "not a model")
			prompts := write("prompts.txt", "ab\nba\n")
			notes := write("notes.txt", "precious")
			link := filepath.Join(dir, "link")
			require.NoError(t, os.Symlink(notModel, link))
			fifo := filepath.Join(dir, "fifo")
			require.NoError(t, syscall.Mkfifo(fifo, 0o644))
			holds := filepath.Join(dir, "holds")
			require.NoError(t, os.Mkdir(holds, 0o755))
			write("holds/notes.txt", "mine")

			args := o.run(notModel, prompts, "")
			type refusal struct{ path, want string }
			refusals := []refusal{
				{notes, ""},
				{fifo, "not a"},
				{"/dev/null", "not a"},
				{filepath.Join(notes, "x"), "not a folder"},
			}
			for _, in := range inputFlags {
				if i := slices.Index(args, in); i >= 0 {
					refusals = append(refusals, refusal{args[i+1], ""})
					if in == "--model" {
						refusals = append(refusals, refusal{link, ""})
					}
				}
			}
			if o.folder {
				refusals = append(refusals, refusal{holds, "holds notes.txt, which Strata did not write"})
			} else {
				refusals = append(refusals,
					refusal{dir, "is a folder; give a file name"},
					refusal{filepath.Join(dir, "no", "f"), "the folder " + filepath.Join(dir, "no") + " does not exist"})
			}
			before := snapshot(t, dir)
			for _, r := range refusals {
				a := o.run(notModel, prompts, r.path)
				done := make(chan error, 1)
				go func() { _, err := strata(t, a...); done <- err }()
				select {
				case err := <-done:
					require.Error(t, err, "%v", a)
					require.True(t, strings.HasPrefix(err.Error(), flag+" "+r.path+": "), "%v: the refusal names the flag and the path: %v", a, err)
					require.Contains(t, err.Error(), r.want, "%v", a)
				case <-time.After(20 * time.Second):
					t.Fatalf("%v hangs", a)
				}
				require.Equal(t, before, snapshot(t, dir), "%v: everything is as it was", a)
			}

			// Its own output it writes, and writes over; interrupted, it
			// leaves that as it was.
			out := filepath.Join(dir, "own", "out")
			require.NoError(t, os.Mkdir(filepath.Dir(out), 0o755))
			for range 2 {
				_, err := strata(t, o.run(real, prompts, out)...)
				require.NoError(t, err)
			}
			own := snapshot(t, filepath.Dir(out))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := dispatch(ctx, o.run(real, prompts, out), &strings.Builder{})
			require.Error(t, err, "an interrupted run fails")
			require.Equal(t, own, snapshot(t, filepath.Dir(out)), "an interrupted run leaves its output as it was, and nothing beside it")
		})
	}
}
