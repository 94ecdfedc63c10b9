// Command strata inspects transformer language models in GGUF files: it
// describes and tokenizes, generates, traces every layer of a prefill, makes
// random models and benchmarks the engine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/backends"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/viz"
)

type command struct {
	name, args, help string
	run              func(ctx context.Context, args []string, out io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"info", "MODEL.gguf [-n N]", "architecture, shapes, parameters, tensor types, tokenizer and prefill memory", cmdInfo},
		{"tokenize", "[--model M] TEXT", "print the token ids of TEXT, space separated", cmdTokenize},
		{"run", "[--model M] --prompt P [-n 30]", "greedy continuation of a prompt", cmdRun},
		{"trace", "[--model M] (--prompt P | --tokens 1,2,...) [--capture GLOBS] [--out DIR]", "prefill with captures: DIR/trace.npz, DIR/manifest.json and the report DIR/index.html with its figures", cmdTrace},
		{"gen", "--shape S --type T --out F.gguf [--seed N]", "write a model with random weights", cmdGen},
		{"bench", "[--model M | --shape S --type T] [--tokens 128,512,2048] [--capture none,all] [--backend B] [--json F]",
			"median prefill tokens/s after warm-up", cmdBench},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: strata COMMAND [flags]")
	for _, c := range commands {
		fmt.Fprintf(w, "  strata %s %s\n      %s\n", c.name, c.args, c.help)
	}
	fmt.Fprintln(w, "Without --model, commands use the default model:", model.DefaultName)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := dispatch(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(1)
	}
}

func dispatch(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(out)
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], out)
		}
	}
	usage(os.Stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

// flags is a flag set that returns errors instead of exiting.
func flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("strata "+name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

// parse parses flags and allows them after positional arguments too.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func openModel(path string) (*model.Model, error) {
	if path == "" {
		return model.Default()
	}
	return model.Open(path)
}

func openEngine(path, backend string) (*gpu.Engine, error) {
	m, err := openModel(path)
	if err != nil {
		return nil, err
	}
	b, note, err := backends.Open(backend)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "strata:", note)
	return gpu.NewEngine(m, b)
}

func cmdInfo(_ context.Context, args []string, out io.Writer) error {
	fs := flags("info")
	n := fs.Int("n", 512, "prompt length for the memory estimate")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("info needs one MODEL.gguf")
	}
	m, err := model.Open(pos[0])
	if err != nil {
		return err
	}
	defer m.Close()
	c := &m.Config
	fmt.Fprintf(out, "file          %s (GGUF v%d)\n", pos[0], m.File.Version)
	fmt.Fprintf(out, "name          %s\n", c.Name)
	fmt.Fprintf(out, "architecture  %s\n", c.Arch)
	fmt.Fprintf(out, "layers        %d\n", c.Layers)
	fmt.Fprintf(out, "d_model       %d\n", c.DModel)
	fmt.Fprintf(out, "ffn           %d\n", c.FFN)
	fmt.Fprintf(out, "heads         %d query, %d key/value (GQA %d:1), head_dim %d\n", c.Heads, c.KVHeads, c.Heads/c.KVHeads, c.HeadDim)
	fmt.Fprintf(out, "vocab         %d\n", c.Vocab)
	fmt.Fprintf(out, "context       %d\n", c.Context)
	fmt.Fprintf(out, "rope          %s, %d dims, theta %g, scaling %s\n", c.Rope.Mode, c.Rope.Dim, c.Rope.Theta, c.Rope.Scaling.Type)
	fmt.Fprintf(out, "rms eps       %g\n", c.RMSEps)
	extras := []string{}
	if c.QKVBias {
		extras = append(extras, "QKV bias")
	}
	if c.QKNorm {
		extras = append(extras, "Q/K RMSNorm")
	}
	if c.TiedEmbd {
		extras = append(extras, "tied embeddings")
	}
	if len(extras) > 0 {
		fmt.Fprintf(out, "features      %s\n", strings.Join(extras, ", "))
	}
	fmt.Fprintf(out, "parameters    %s\n", humanCount(m.Params()))

	byType := map[gguf.Type][2]int64{}
	var weightBytes int64
	for _, t := range m.File.Tensors {
		v := byType[t.Type]
		byType[t.Type] = [2]int64{v[0] + 1, v[1] + t.Size}
		weightBytes += t.Size
	}
	types := make([]gguf.Type, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	fmt.Fprintf(out, "tensors       %d\n", len(m.File.Tensors))
	for _, t := range types {
		fmt.Fprintf(out, "  %-12s %4d tensors  %s\n", t, byType[t][0], gpu.HumanBytes(byType[t][1]))
	}
	kind, _ := m.File.String("tokenizer.ggml.model")
	fmt.Fprintf(out, "tokenizer     %s, %d tokens, BOS %d, EOS %d\n", kind, m.Tok.VocabSize(), m.Tok.BOS(), m.Tok.EOS())

	est := gpu.EstimateMemory(c, *n, 0, *n, gpu.Options{})
	_, other := m.Resident()
	fmt.Fprintf(out, "prefill of %d tokens needs about %s: weights %s, header and tokenizer %s, KV cache %s, activations %s\n",
		*n, gpu.HumanBytes(weightBytes+other+est.Total()), gpu.HumanBytes(weightBytes), gpu.HumanBytes(other), gpu.HumanBytes(est.Cache), gpu.HumanBytes(est.Scratch))
	return nil
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB (%d)", float64(n)/1e9, n)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM (%d)", float64(n)/1e6, n)
	}
	return strconv.FormatInt(n, 10)
}

func cmdTokenize(_ context.Context, args []string, out io.Writer) error {
	fs := flags("tokenize")
	path := fs.String("model", "", "model file (default: the default model)")
	special := fs.Bool("special", false, "recognise special tokens written in the text")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("tokenize needs TEXT")
	}
	m, err := openModel(*path)
	if err != nil {
		return err
	}
	ids, err := m.Tok.Encode(strings.Join(pos, " "), tokenizer.Options{ParseSpecial: *special})
	if err != nil {
		return err
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = strconv.Itoa(int(id))
	}
	fmt.Fprintln(out, strings.Join(strs, " "))
	return nil
}

func cmdRun(ctx context.Context, args []string, out io.Writer) error {
	fs := flags("run")
	path := fs.String("model", "", "model file (default: the default model)")
	prompt := fs.String("prompt", "", "prompt text")
	n := fs.Int("n", 30, "tokens to generate")
	backend := fs.String("backend", "auto", "backend: "+strings.Join(backends.Names, ", "))
	if _, err := parse(fs, args); err != nil {
		return err
	}
	e, err := openEngine(*path, *backend)
	if err != nil {
		return err
	}
	tokens, err := e.Model.Tok.Encode(*prompt, tokenizer.Options{})
	if err != nil {
		return err
	}
	s, err := e.NewSession(0)
	if err != nil {
		return err
	}
	defer s.Close()
	var gen []int32
	for range *n {
		tr, err := s.Prefill(ctx, tokens, gpu.Options{Predict: true})
		if err != nil {
			return err
		}
		next := tr.Predicted[0]
		if next == e.Model.Tok.EOS() {
			break
		}
		gen = append(gen, next)
		tokens = []int32{next}
	}
	text, err := e.Model.Tok.Decode(gen)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, text)
	return nil
}

func cmdTrace(ctx context.Context, args []string, out io.Writer) error {
	fs := flags("trace")
	path := fs.String("model", "", "model file (default: the default model)")
	prompt := fs.String("prompt", "", "prompt text")
	tokenList := fs.String("tokens", "", "comma-separated token ids instead of a prompt")
	capture := fs.String("capture", "*", "comma-separated capture globs, e.g. 'blocks.*.attn.hook_pattern,blocks.*.hook_resid_post'")
	layers := fs.String("layers", "", "layer range FIRST:LAST for per-layer points (default all)")
	dir := fs.String("out", "strata-trace", "output directory")
	backend := fs.String("backend", "auto", "backend: "+strings.Join(backends.Names, ", "))
	if _, err := parse(fs, args); err != nil {
		return err
	}
	e, err := openEngine(*path, *backend)
	if err != nil {
		return err
	}
	var tokens []int32
	switch {
	case *tokenList != "" && *prompt != "":
		return errors.New("trace takes --prompt or --tokens, not both")
	case *tokenList != "":
		for _, f := range strings.Split(*tokenList, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return fmt.Errorf("--tokens: %q is not a token id", f)
			}
			tokens = append(tokens, int32(id))
		}
	default:
		text := *prompt
		if text == "" {
			text = defaultPrompt
		}
		if tokens, err = e.Model.Tok.Encode(text, tokenizer.Options{}); err != nil {
			return err
		}
	}
	plan := gpu.Capture{Globs: strings.Split(*capture, ","), LastLayer: -1}
	if *layers != "" {
		a, b, ok := strings.Cut(*layers, ":")
		first, err1 := strconv.Atoi(a)
		last, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || first < 0 || last < first {
			return fmt.Errorf("--layers %q: want FIRST:LAST, e.g. 0:3", *layers)
		}
		plan.FirstLayer, plan.LastLayer = first, last
	}
	s, err := e.NewSession(len(tokens))
	if err != nil {
		return err
	}
	defer s.Close()
	tr, err := s.Prefill(ctx, tokens, gpu.Options{Capture: plan, Logits: gpu.LogitsAll})
	if err != nil {
		return err
	}
	// The lens needs every layer's resid_post; without it the report says the lens was not drawn.
	_ = e.LogitLens(tr)
	if err := tr.Save(*dir); err != nil {
		return err
	}
	if err := viz.Report(tr, *dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "traced %d tokens through %d layers on %s: %d tensors in %s/trace.npz, manifest in %s/manifest.json, report in %s/index.html\n",
		len(tokens), e.Model.Layers, tr.Backend, len(tr.Names), *dir, *dir, *dir)
	return nil
}

// defaultPrompt suits the default model, trained on Go source.
const defaultPrompt = "func (s *Server) Close() error {\n\ts.mu.Lock()\n\tdefer s.mu.Unlock()\n\treturn s.listener.Close()\n}\n"

func cmdGen(_ context.Context, args []string, out io.Writer) error {
	fs := flags("gen")
	shape := fs.String("shape", "", "one of: "+strings.Join(model.ShapeNames(), ", "))
	typName := fs.String("type", "F32", "tensor type of the matrices, e.g. Q1_0_g128, TQ2_0_g128, Q8_0, F16")
	dst := fs.String("out", "", "output .gguf file")
	seed := fs.Uint64("seed", 1, "random seed")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	s, ok := model.Shapes[*shape]
	if !ok {
		return fmt.Errorf("unknown --shape %q (choose from %s)", *shape, strings.Join(model.ShapeNames(), ", "))
	}
	if *dst == "" {
		return errors.New("gen needs --out F.gguf")
	}
	typ, err := gguf.ParseType(*typName)
	if err != nil {
		return err
	}
	w, err := model.Generate(s, typ, *seed)
	if err != nil {
		return err
	}
	if err := w.WriteFile(*dst); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: %s shape, %s weights, seed %d\n", *dst, *shape, typ, *seed)
	return nil
}
