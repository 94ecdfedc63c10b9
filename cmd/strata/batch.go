package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

// readPrompts reads a file of prompts: JSONL ({"prompt": "..."} a line) if
// its name ends in .jsonl, else text, a prompt a line; blank lines and a
// UTF-8 byte order mark are skipped. A pipe or FIFO is read as it comes,
// and ctx's end (Ctrl-C) ends the wait: open and read do not return for a
// writer that never writes, so they run apart, left behind on the way out.
func readPrompts(ctx context.Context, path string) ([]string, error) {
	type result struct {
		prompts []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		prompts, err := readPromptsFile(path)
		done <- result{prompts, err}
	}()
	select {
	case r := <-done:
		return r.prompts, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("interrupted while reading --prompts %s", path)
	}
}

func readPromptsFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--prompts: %w", err)
	}
	defer f.Close()
	jsonl := strings.EqualFold(filepath.Ext(path), ".jsonl")
	var prompts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\uFEFF") // a BOM, as some editors on Windows save
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !jsonl {
			prompts = append(prompts, line)
			continue
		}
		var rec struct {
			Prompt *string `json:"prompt"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf(`--prompts %s: line %d is not a JSON object {"prompt": "..."}: %v`, path, n, err)
		}
		if rec.Prompt == nil || *rec.Prompt == "" {
			return nil, fmt.Errorf(`--prompts %s: line %d has no "prompt" text`, path, n)
		}
		prompts = append(prompts, *rec.Prompt)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--prompts %s: %w", path, err)
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("--prompts %s: no prompts in the file", path)
	}
	return prompts, nil
}

// traceFile traces each prompt of a file, batch prompts to a prefill, to
// a folder of its own in dir: dir/0, dir/1, ... (numbered from 0, padded
// to one width, so that they sort).
func traceFile(ctx context.Context, m *model.Model, path string, batch int, o engine.Options, backend, placement, dir string, out io.Writer) error {
	texts, err := readPrompts(ctx, path)
	if err != nil {
		return err
	}
	c := &m.Config
	prompts := make([][]int32, len(texts))
	longest, most := 0, 0 // the longest prompt, the most tokens in a batch
	for i, text := range texts {
		if prompts[i], err = m.Tok.Encode(text, tokenizer.Options{}); err != nil {
			return fmt.Errorf("--prompts %s: prompt %d: %w", path, i, err)
		}
		if len(prompts[i]) > c.Context {
			return fmt.Errorf("--prompts %s: prompt %d: %w", path, i, promptTooLong(len(prompts[i]), c.Context))
		}
		longest = max(longest, len(prompts[i]))
	}
	// The plan's batch is the longest prompts, as many as a batch holds:
	// no batch has more tokens, or larger attention maps.
	lens := make([]int, len(prompts))
	for i, p := range prompts {
		lens[i] = len(p)
	}
	slices.Sort(lens)
	lens = lens[max(len(lens)-batch, 0):]
	for _, n := range lens {
		most += n
	}
	e, err := openEngine(m, backend, placement, engine.PlanRequest{Capacity: most, Tokens: most, Lens: lens, Options: o})
	if err != nil {
		return err
	}
	s, err := e.NewSession(longest)
	if err != nil {
		return err
	}
	defer s.Close()
	width := len(fmt.Sprint(len(prompts) - 1))
	name := func(i int) string { return fmt.Sprintf("%0*d", width, i) }
	tokens := 0
	// The folder is replaced whole once every prompt is written: an
	// interrupted run leaves it as it was, and a rerun replaces its own.
	err = trace.ReplaceFolders(dir, func(tmp string) error {
		for i := 0; i < len(prompts); i += batch {
			trs, err := s.PrefillBatch(ctx, prompts[i:min(i+batch, len(prompts))], o)
			if err != nil {
				return err
			}
			for j, tr := range trs {
				tokens += len(tr.Tokens)
				err = exportPrompt(ctx, e, tr, filepath.Join(tmp, name(i+j)))
				tr.Close()
				if err != nil {
					for _, tr := range trs[j+1:] {
						tr.Close()
					}
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: --out %s was not replaced (it is as it was)", dir)
		}
		return traceOutError(dir, err)
	}
	fmt.Fprintf(out, "traced %s, %s, through %s on %s in batches of up to %d: a folder each, %s/%s to %s/%s\n",
		human.Count(len(prompts), "prompt"), human.Count(tokens, "token"), human.Count(c.Layers, "layer"), e.BackendName(), min(batch, len(prompts)), dir, name(0), dir, name(len(prompts)-1))
	return nil
}

// exportPrompt writes a prompt's trace with its logit lens to its folder.
func exportPrompt(ctx context.Context, e *engine.Engine, tr *trace.Trace, dir string) error {
	_ = e.LogitLens(tr) // without every resid_post, the report says the lens was not drawn
	if err := viz.ExportContext(ctx, tr, dir); err != nil {
		return err
	}
	if name, nf, err := tr.FirstNonFinite(); err != nil {
		return err
	} else if name != "" {
		fmt.Fprintf(stderr, "strata: warning: prompt %s went non-finite: first at %s, %s\n", filepath.Base(dir), name, nf)
	}
	return nil
}
