package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/internal/sharedtest"
	"github.com/stratalab/strata/trace"
)

// Each prompt of a file gets the folder that tracing it alone writes, bit
// for bit on the CPU, from a text file and from JSONL.
func TestTracePromptsFile(t *testing.T) {
	stories := sharedtest.Stories(t)
	var notes bytes.Buffer
	old := stderr
	stderr = &notes
	defer func() { stderr = old }()
	dir := t.TempDir()
	text := filepath.Join(dir, "prompts.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time\n\nThe cat sat\nLily\n"), 0o644))
	jsonl := filepath.Join(dir, "prompts.jsonl")
	require.NoError(t, os.WriteFile(jsonl, []byte(`{"prompt": "Once upon a time"}`+"\n"+`{"prompt": "The cat sat", "label": 1}`+"\n"+`{"prompt": "Lily"}`+"\n"), 0o644))
	for _, file := range []string{text, jsonl} {
		out := filepath.Join(dir, filepath.Ext(file)[1:])
		msg, err := strata(t, "trace", "--model", stories, "--backend", "cpu", "--prompts", file, "--batch", "2", "--out", out)
		require.NoError(t, err)
		require.Contains(t, msg, "traced 3 prompts, 13 tokens, through 5 layers")
		for i, prompt := range []string{"Once upon a time", "The cat sat", "Lily"} {
			alone := filepath.Join(dir, "alone")
			_, err := strata(t, "trace", "--model", stories, "--backend", "cpu", "--prompt", prompt,
				"--capture", "blocks.*.hook_resid_post,blocks.*.attn.hook_z,blocks.*.attn.hook_pattern,logits", "--out", alone)
			require.NoError(t, err)
			want, err := trace.Load(alone)
			require.NoError(t, err)
			got, err := trace.Load(filepath.Join(out, []string{"0", "1", "2"}[i]))
			require.NoError(t, err)
			require.Equal(t, want.Tokens, got.Tokens)
			require.True(t, got.Has("blocks.0.ln1.hook_normalized"), "every point by default")
			require.Equal(t, []int{8, len(want.Tokens), len(want.Tokens)}, got.Shape("blocks.0.attn.hook_pattern"), "the prompt's own pattern")
			for _, name := range want.Names {
				enginetest.RequireBits(t, want.Tensor(name).Data, got.Tensor(name).Data, "prompt %d %s", i, name)
			}
		}
	}
}

func TestTracePromptsRefusesBadFiles(t *testing.T) {
	stories := sharedtest.Stories(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	run := func(args ...string) error {
		_, err := strata(t, append([]string{"trace", "--model", stories, "--backend", "cpu", "--out", filepath.Join(dir, "out")}, args...)...)
		return err
	}
	require.EqualError(t, run("--prompts", write("bad.jsonl", `{"prompt": "a"}`+"\n"+`{"text": "b"}`+"\n")), `--prompts `+dir+`/bad.jsonl: line 2 has no "prompt" text`)
	require.ErrorContains(t, run("--prompts", write("broken.jsonl", "{\n")), `broken.jsonl: line 1 is not a JSON object {"prompt": "..."}: `)
	require.ErrorContains(t, run("--prompts", write("array.jsonl", `["a"]`+"\n")), `array.jsonl: line 1 is not a JSON object {"prompt": "..."}: `)
	require.EqualError(t, run("--prompts", write("empty.txt", "\n\n")), "--prompts "+dir+"/empty.txt: no prompts in the file")
	require.ErrorContains(t, run("--prompts", filepath.Join(dir, "missing.txt")), "missing.txt: no such file")
	require.EqualError(t, run("--prompts", write("p.txt", "a\n"), "--prompt", "b"), "trace takes --prompts or one prompt (--prompt or --tokens), not both")
	require.EqualError(t, run("--prompt", "b", "--batch", "2"), "--batch goes with --prompts, and is at least 1")
	require.EqualError(t, run("--prompts", write("p.txt", "a\n"), "--batch", "0"), "--batch goes with --prompts, and is at least 1")
}

// A byte order mark at a file's start is not part of its first prompt.
func TestReadPromptsSkipsAByteOrderMark(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"p.txt":   "\uFEFFOnce upon a time\nLily\n",
		"p.jsonl": "\uFEFF" + `{"prompt": "Once upon a time"}` + "\n" + `{"prompt": "Lily"}` + "\n",
	} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		prompts, err := readPrompts(context.Background(), p)
		require.NoError(t, err, name)
		require.Equal(t, []string{"Once upon a time", "Lily"}, prompts, name)
	}
}
