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
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/stratalab/strata/backends"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/models"
	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

type command struct {
	name, args, help string
	run              func(ctx context.Context, args []string, out io.Writer) error
}

var commands []command

// stderr takes notes and warnings; tests read it.
var stderr io.Writer = os.Stderr

func init() {
	commands = []command{
		{"info", "[MODEL.gguf] [-n N] [--points] [--devices [--backend B] [--placement P]]", "architecture, shapes, parameters, tensor types, tokenizer and prefill memory; with --devices, the devices and the model's placement over them", cmdInfo},
		{"tokenize", "[--model M] TEXT", "print the token ids of TEXT, space separated", cmdTokenize},
		{"run", "[--model M] --prompt P [-n 30] [--temperature T [--top-k K] [--top-p P] [--min-p P] [--seed S]] [--backend B] [--precision exact|fast] [--placement P]", "continuation of a prompt: greedy, or drawn with a temperature", cmdRun},
		{"trace", "[--model M] (--prompt P | --tokens 1,2,... | --prompts FILE [--batch 16]) [--capture GLOBS] [--out DIR] [--backend B] [--precision exact|fast] [--placement P]", "prefill with captures: DIR/trace.npz, DIR/manifest.json and the report DIR/index.html with its figures; with --prompts, a folder DIR/N for each prompt of the file, run in batches", cmdTrace},
		{"gen", "--shape S [--type T] --out F.gguf [--seed N]", "write a model with random weights", cmdGen},
		{"bench", "[--model M | --shape S --type T] [--tokens 128,512,2048] [--capture none,all] [--backend B] [--precision exact,fast] [--placement P] [--json F]",
			"median prefill tokens/s after warm-up", cmdBench},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: strata COMMAND [flags]")
	for _, c := range commands {
		fmt.Fprintf(w, "  strata %s %s\n      %s\n", c.name, c.args, c.help)
	}
	fmt.Fprintln(w, "Without --model, commands use the default model:", models.DefaultName)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := dispatch(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(1)
	}
}

// dispatch runs a command; output it could not write (a full disk, a
// closed pipe) fails the command, as any other error does.
func dispatch(ctx context.Context, args []string, w io.Writer) error {
	out := &checkedWriter{w: w}
	err := dispatchTo(ctx, args, out)
	if err == nil && out.err != nil {
		return fmt.Errorf("writing the output: %w", out.err)
	}
	return err
}

// checkedWriter keeps the first error of its writes.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

func dispatchTo(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 { // a script that lost its command fails, as an unknown one does
		usage(stderr)
		return errors.New("no command given (strata help lists them)")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 2 && args[0] == "help" { // strata help COMMAND
			args = []string{args[1], "--help"}
		} else {
			usage(out)
			return nil
		}
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], out)
			if errors.Is(err, flag.ErrHelp) {
				return nil // asked for: the usage went to out
			}
			return err
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

// flags is a flag set that returns errors instead of exiting; --help
// prints the command's usage to out.
func flags(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("strata "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		for _, c := range commands {
			if c.name == name {
				fmt.Fprintf(fs.Output(), "usage: strata %s %s\n  %s\nflags:\n", c.name, c.args, c.help)
			}
		}
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags and allows them after positional arguments too. A
// wrong flag is an error that says where to find the right ones, printed
// once by main rather than with the whole usage.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				fs.Usage()
				return nil, err
			}
			return nil, fmt.Errorf("%w (%s --help lists the flags)", err, fs.Name())
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseFlags is parse for a command that takes no arguments but its
// flags: a stray word (an unquoted prompt's second word) is an error, not
// silently dropped.
func parseFlags(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q: %s takes only flags (a value of several words goes in quotes: --prompt \"Once upon a time\")", pos[0], fs.Name())
	}
	return err
}

// decimal parses a token id, length or layer as plain digits: strconv
// would take a sign too, and "+5" is not how anyone writes token 5.
func decimal(s string) (int64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// seedFlag is a --seed that says what it wants: the flag package's own
// uint64 answers "-1" with "parse error".
type seedFlag uint64

func (s *seedFlag) String() string { return strconv.FormatUint(uint64(*s), 10) }

func (s *seedFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return fmt.Errorf("the seed is an unsigned integer, 0 to %d", uint64(math.MaxUint64))
	}
	*s = seedFlag(n)
	return nil
}

// isSet reports whether the flag was given on the command line, so that an
// explicit empty value is told apart from the default.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// promptTooLong is how run and trace refuse a prompt the model cannot hold.
func promptTooLong(n, context int) error {
	return fmt.Errorf("the prompt is %d tokens; the model's context is %d", n, context)
}

func openModel(path string) (*model.Model, error) {
	if path == "" {
		return models.Open()
	}
	return model.Open(path)
}

// placementFlag adds --placement, the same for every command that prefills.
func placementFlag(fs *flag.FlagSet) *string {
	return fs.String("placement", "", "split the model over devices, each entry a tier: DEVICE:FIRST-LAST,... e.g. 0:0-13,1:14-27 (a device named twice is two logical devices on it); auto plans from the devices' memory; default: the whole model on one device")
}

// openEngine makes m resident on the backend, over tiers when placement
// says; a placement that does not fit the request q is refused first.
func openEngine(m *model.Model, backend, placement string, q engine.PlanRequest) (*engine.Engine, error) {
	e, note, err := backends.Engine(m, backend, placement, q)
	if err != nil {
		if placement != "" {
			return nil, fmt.Errorf("--placement %s: %w", placement, err)
		}
		return nil, err
	}
	if placement == "" { // a plan has checked it otherwise
		if err := backends.HostFits(e, q); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(stderr, "strata:", note)
	return e, nil
}

func cmdInfo(_ context.Context, args []string, out io.Writer) error {
	fs := flags("info", out)
	n := fs.Int("n", 512, "prompt length for the memory estimate, 1 to the model's context (the context if it is shorter than the default)")
	points := fs.Bool("points", false, "also list the model's capture points (per layer once, as blocks.N.*)")
	devices := fs.Bool("devices", false, "also list the backend's devices and plan the model over them: the bytes each tier needs for a prompt of -n tokens")
	backend := fs.String("backend", "auto", "with --devices: the backend whose devices to list: "+strings.Join(backends.Names, ", "))
	placement := fs.String("placement", "", "with --devices: the placement to check, as run, trace and bench take it (DEVICE:FIRST-LAST,...), or auto; default: the whole model on the device run uses (STRATA_DEVICE's, or the best)")
	capture := fs.String("capture", "", "with --devices: comma-separated capture globs whose bytes the plan includes (default none)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("info takes one MODEL.gguf (or none, for the default model), not %d", len(pos))
	}
	for _, f := range []string{"backend", "placement", "capture"} {
		if isSet(fs, f) && !*devices {
			return fmt.Errorf("--%s plans the model over devices: add --devices", f)
		}
	}
	path, shown := "", "the default model, "+models.DefaultName+".gguf (embedded)"
	if len(pos) == 1 {
		path, shown = pos[0], pos[0]
	}
	m, err := openModel(path)
	if err != nil {
		return err
	}
	defer m.Close()
	c := &m.Config
	if !isSet(fs, "n") {
		*n = min(*n, c.Context) // a short-context model gets a default it can hold
	}
	if *n < 1 || *n > c.Context {
		return fmt.Errorf("-n %d: the prompt length must be from 1 to the model's context of %d tokens", *n, c.Context)
	}
	fmt.Fprintf(out, "file          %s (GGUF v%d)\n", shown, m.File.Version)
	fmt.Fprintf(out, "name          %s\n", c.Name)
	fmt.Fprintf(out, "architecture  %s\n", c.Arch)
	fmt.Fprintf(out, "layers        %d\n", c.Layers)
	fmt.Fprintf(out, "d_model       %d\n", c.DModel)
	if c.MoE() {
		fmt.Fprintf(out, "ffn           %d (the dense width; every MLP here is experts)\n", c.FFN)
	} else {
		fmt.Fprintf(out, "ffn           %d\n", c.FFN)
	}
	fmt.Fprintf(out, "heads         %d query, %d key/value (GQA %d:1), head_dim %d\n", c.Heads, c.KVHeads, c.Heads/c.KVHeads, c.HeadDim)
	fmt.Fprintf(out, "vocab         %d\n", c.Vocab)
	fmt.Fprintf(out, "context       %d\n", c.Context)
	switch c.Pos {
	case model.PosRope:
		fmt.Fprintf(out, "positions     RoPE %s, %d dims, theta %g, scaling %s", c.Rope.Mode, c.Rope.Dim, c.Rope.Theta, c.Rope.Scaling.Type)
		if ff := c.Rope.FreqFactors; ff != nil && c.LongRope == nil {
			fmt.Fprintf(out, ", frequency factors %g to %g (rope_freqs.weight, Llama 3 style)", slices.Min(ff), slices.Max(ff))
		}
		fmt.Fprintln(out)
		if lr := c.LongRope; lr != nil {
			which := "short"
			if c.Context > c.Rope.Scaling.OrigContext {
				which = "long"
			}
			fmt.Fprintf(out, "long rope     factors %.3g to %.3g for a context within %d positions, %.3g to %.3g past it: the %s ones for this model's; magnitude x %.4g\n",
				slices.Min(c.Rope.FreqFactors), slices.Max(c.Rope.FreqFactors), c.Rope.Scaling.OrigContext,
				slices.Min(lr.FreqFactors), slices.Max(lr.FreqFactors), which, c.Rope.Scaling.AttnFactor)
		}
		if lr := c.LocalRope; lr != nil {
			fmt.Fprintf(out, "local rope    theta %g, scaling %s (sliding-window layers)\n", lr.Theta, lr.Scaling.Type)
		}
	case model.PosLearned:
		fmt.Fprintf(out, "positions     learned, %d rows (position_embd.weight)\n", m.PosEmbed.Rows)
	}
	fmt.Fprintf(out, "norm          %s, eps %g\n", c.Norm, c.NormEps)
	fmt.Fprintf(out, "mlp           %s\n", c.MLP)
	if c.MoE() {
		fmt.Fprintf(out, "experts       %d of width %d, %d per token (softmax router, top %d renormalised)\n", c.Experts, c.ExpertFFN, c.ExpertsUsed, c.ExpertsUsed)
	}
	if c.SWAPattern > 0 {
		var global []string
		for l := range c.Layers {
			if c.Window(l) == 0 {
				global = append(global, strconv.Itoa(l))
			}
		}
		fmt.Fprintf(out, "attention     sliding window of %d positions in %d of %d layers; global in layers %s\n",
			c.SlidingWindow, c.Layers-len(global), c.Layers, strings.Join(global, ", "))
	}
	extras := []string{}
	if c.FusedQKV {
		extras = append(extras, "fused QKV")
	}
	if c.FusedGateUp {
		extras = append(extras, "fused gate and up")
	}
	if c.QKVBias {
		extras = append(extras, "QKV bias")
	}
	if c.Bias {
		extras = append(extras, "output and MLP biases")
	}
	if c.EmbedScale != 0 {
		extras = append(extras, fmt.Sprintf("embedding x %.4g", c.EmbedScale))
	}
	if c.PostNorms {
		extras = append(extras, "post-attention and post-MLP norms")
	}
	if c.AttnSoftcap != 0 {
		extras = append(extras, fmt.Sprintf("attention soft-cap %g", c.AttnSoftcap))
	}
	if c.FinalSoftcap != 0 {
		extras = append(extras, fmt.Sprintf("logit soft-cap %g", c.FinalSoftcap))
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
		noun := "tensors"
		if byType[t][0] == 1 {
			noun = "tensor"
		}
		fmt.Fprintf(out, "  %-12s %4d %-8s %s\n", t, byType[t][0], noun, human.Bytes(byType[t][1]))
	}
	kind, _ := m.File.String("tokenizer.ggml.model")
	id := func(v int32) string { // -1: the vocabulary has none
		if v < 0 {
			return "none"
		}
		return strconv.Itoa(int(v))
	}
	fmt.Fprintf(out, "tokenizer     %s, %d tokens, BOS %s, EOS %s\n", kind, m.Tok.VocabSize(), id(m.Tok.BOS()), id(m.Tok.EOS()))

	est := engine.EstimateMemory(c, *n, 0, *n, engine.Options{})
	_, other := m.Resident()
	if est.Cache == engine.MaxEstimate {
		fmt.Fprintf(out, "prefill of %s needs more bytes than 64 bits count: no machine holds it\n", human.Count(*n, "token"))
	} else {
		fmt.Fprintf(out, "prefill of %s needs about %s: weights %s, header and tokenizer %s, KV cache %s, activations %s\n",
			human.Count(*n, "token"), human.Bytes(weightBytes+other+est.Total()), human.Bytes(weightBytes), human.Bytes(other), human.Bytes(est.Cache), human.Bytes(est.Scratch))
	}
	if *points {
		fmt.Fprintln(out, "capture points:")
		for _, p := range trace.Points(c) {
			if l, local := trace.SplitPoint(p); l <= 0 {
				if l == 0 {
					p = "blocks.N." + string(local)
				}
				fmt.Fprintf(out, "  %s\n", p)
			}
		}
	}
	if *devices {
		o := engine.Options{}
		if *capture != "" {
			o.Capture = engine.CaptureOf(strings.Split(*capture, ",")...)
			if err := o.Capture.Validate(c); err != nil {
				return fmt.Errorf("--capture: %w", err)
			}
		}
		return printPlan(out, m, *backend, *placement, engine.PlanRequest{Capacity: *n, Tokens: *n, Options: o})
	}
	return nil
}

// printPlan lists the backend's devices and the plan of m over them, or
// says why it does not fit.
func printPlan(out io.Writer, m *model.Model, backend, placement string, q engine.PlanRequest) error {
	kind, devs, err := backends.Devices(backend)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "devices       %s backend\n", kind)
	for i, d := range devs {
		fmt.Fprintf(out, "  %d: %s, %s free\n", i, d.Name, human.Bytes(d.Free))
	}
	_, plan, _, err := backends.Plan(m, backend, placement, q)
	if err != nil {
		if placement == "" {
			return err
		}
		return fmt.Errorf("--placement %s: %w", placement, err)
	}
	fmt.Fprintf(out, "placement     %s for a prompt of %s and a KV cache of %s:\n", plan.Flag(), human.Count(q.Tokens, "token"), human.Count(q.Capacity, "position"))
	for _, line := range strings.Split(strings.TrimSuffix(plan.String(), "\n"), "\n") {
		fmt.Fprintf(out, "  %s\n", line)
	}
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
	fs := flags("tokenize", out)
	path := fs.String("model", "", "model file (default: the default model)")
	special := fs.Bool("special", false, "recognise special tokens written in the text")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("tokenize needs TEXT")
	}
	if len(pos) > 1 { // joining them would lose the user's spacing
		return fmt.Errorf("unexpected argument %q: %s takes one TEXT (a text of several words goes in quotes: strata tokenize \"Once upon a time\")", pos[1], fs.Name())
	}
	tok, done, err := openTokenizer(*path)
	if err != nil {
		return err
	}
	defer done()
	ids, err := tok.Encode(pos[0], tokenizer.Options{ParseSpecial: *special})
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

// openTokenizer reads the tokenizer of a GGUF file, which may hold no
// tensors (llama.cpp's ggml-vocab-*.gguf), or of the default model.
// done releases the file, which the tokenizer may read until then.
func openTokenizer(path string) (tok *tokenizer.Tokenizer, done func() error, err error) {
	if path == "" {
		m, err := models.Open()
		if err != nil {
			return nil, nil, err
		}
		return m.Tok, m.Close, nil
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if tok, err = tokenizer.FromGGUF(f); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return tok, f.Close, nil
}

// precisionFlag adds --precision, the same for every command that
// prefills; the func it returns reads the flag once fs is parsed.
func precisionFlag(fs *flag.FlagSet) func() (engine.Precision, error) {
	v := fs.String("precision", "exact", "matrix products: exact (float32 accuracy) or fast (float16 inputs: tensor cores for every weight format; on the H200 a bonsai-8b 1-bit prefill at T=2048 took 60% of the time)")
	return func() (engine.Precision, error) {
		p, err := engine.ParsePrecision(*v)
		if err != nil {
			return 0, fmt.Errorf("--precision: %w", err)
		}
		return p, nil
	}
}

func cmdRun(ctx context.Context, args []string, out io.Writer) error {
	fs := flags("run", out)
	path := fs.String("model", "", "model file (default: the default model)")
	prompt := fs.String("prompt", "", "prompt text")
	n := fs.Int("n", 30, "tokens to generate at most: generation stops earlier at the end token or when the context is full")
	backend := fs.String("backend", "auto", "backend: "+strings.Join(backends.Names, ", "))
	placement := placementFlag(fs)
	precision := precisionFlag(fs)
	var sampler engine.Sampler
	fs.Float64Var(&sampler.Temperature, "temperature", 0, "draw each token from the model's distribution with its logits divided by this (0: the most likely token; 1: the model's own distribution)")
	fs.IntVar(&sampler.TopK, "top-k", 0, "draw only from the k most likely tokens (0: no limit)")
	fs.Float64Var(&sampler.TopP, "top-p", 0, "draw only from the fewest most likely tokens whose probabilities add up to at least p (0: no limit)")
	fs.Float64Var(&sampler.MinP, "min-p", 0, "draw only from tokens at least p times as likely as the most likely (0: no limit)")
	fs.Var((*seedFlag)(&sampler.Seed), "seed", "seed of the draws, an unsigned `integer`: the same seed, prompt and model give the same text (without it, a new seed each run, printed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	prec, err := precision()
	if err != nil {
		return err
	}
	if *n < 0 {
		return fmt.Errorf("-n %d: the number of tokens to generate cannot be negative", *n)
	}
	if !isSet(fs, "prompt") {
		return errors.New("run needs --prompt: give the text to continue, e.g. --prompt \"Once upon a time\" (--prompt \"\" starts from the start-of-text token alone)")
	}
	// Checked before the seed is printed, so a refused run says only why.
	if err := sampler.Check(); err != nil {
		return err
	}
	if !isSet(fs, "seed") && !sampler.Greedy() {
		sampler.Seed = rand.Uint64()
		fmt.Fprintf(stderr, "strata: drawing with --seed %d\n", sampler.Seed)
	}
	draws := sampler.Start()
	m, err := openModel(*path)
	if err != nil {
		return err
	}
	tokens, err := m.Tok.Encode(*prompt, tokenizer.Options{})
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return errors.New("--prompt \"\" has no tokens: this model's tokenizer adds no start-of-text token to begin from; give a prompt")
	}
	if len(tokens) > m.Context {
		return promptTooLong(len(tokens), m.Context)
	}
	// The KV cache holds what this run can reach, not the model's whole
	// context: a 1M-token context would reserve its cache for -n 30.
	capacity := min(m.Context, len(tokens)+max(*n, 1))
	e, err := openEngine(m, *backend, *placement, engine.PlanRequest{Capacity: capacity, Tokens: len(tokens), Options: engine.Options{Predict: true}})
	if err != nil {
		return err
	}
	s, err := e.NewSession(capacity)
	if err != nil {
		return err
	}
	defer s.Close()
	g := &streamer{out: out, tok: e.Model.Tok}
	for len(g.gen) < *n {
		if s.Pos()+len(tokens) > s.Capacity() {
			if err := g.flush(); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "strata: stopped after %d of %d tokens: the context of %d tokens is full\n", len(g.gen), *n, s.Capacity())
			return nil
		}
		tr, err := s.Prefill(ctx, tokens, engine.Options{Predict: sampler.Greedy(), Precision: prec})
		if err != nil {
			if len(g.gen) == 0 {
				return err
			}
			if ferr := g.flush(); ferr != nil {
				return ferr
			}
			return fmt.Errorf("after %d generated tokens (printed): %w", len(g.gen), err)
		}
		next, err := draws.Pick(tr)
		if err != nil {
			if ferr := g.flush(); ferr != nil {
				return ferr
			}
			if errors.Is(err, engine.ErrNaNLogits) {
				return fmt.Errorf("the logits for generated token %d hold NaN, so there is no next token: the model went non-finite (strata trace names the first point where)", len(g.gen)+1)
			}
			return err
		}
		if next == e.Model.Tok.EOS() {
			if err := g.flush(); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "strata: stopped after %d of %d tokens: the model predicted its end token %s\n", len(g.gen), *n, e.Model.Tok.Piece(next))
			return nil
		}
		if err := g.add(next); err != nil {
			return err
		}
		tokens = []int32{next}
	}
	return g.flush()
}

// streamer prints generated text as it comes, holding back only the bytes
// of a character that the next token completes.
type streamer struct {
	out     io.Writer
	tok     *tokenizer.Tokenizer
	gen     []int32
	printed int // bytes of the decoded text written
}

func (g *streamer) add(id int32) error {
	g.gen = append(g.gen, id)
	text, err := g.tok.Decode(g.gen)
	if err != nil {
		return err
	}
	end := len(text)
	for back := 1; back <= utf8.UTFMax-1 && end-back >= g.printed; back++ {
		if utf8.RuneStart(text[end-back]) {
			if !utf8.FullRuneInString(text[end-back:]) {
				end -= back
			}
			break
		}
	}
	return g.write(text, end)
}

func (g *streamer) write(text string, end int) error {
	if end <= g.printed {
		return nil
	}
	_, err := io.WriteString(g.out, text[g.printed:end])
	g.printed = end
	return err
}

// flush writes what is left and ends the line.
func (g *streamer) flush() error {
	text, err := g.tok.Decode(g.gen)
	if err != nil {
		return err
	}
	if err := g.write(text, len(text)); err != nil {
		return err
	}
	_, err = io.WriteString(g.out, "\n")
	return err
}

func cmdTrace(ctx context.Context, args []string, out io.Writer) error {
	fs := flags("trace", out)
	path := fs.String("model", "", "model file (default: the default model)")
	prompt := fs.String("prompt", "", "prompt text (default: a Go function, for the default model)")
	tokenList := fs.String("tokens", "", "comma-separated token ids instead of a prompt")
	promptFile := fs.String("prompts", "", "a file of prompts instead of one: text, a prompt a line, or JSONL ({\"prompt\": ...} a line) if it ends in .jsonl; blank lines are skipped; prompt N's trace (from 0, in file order) goes to OUT/N, zero-padded to one width (OUT/00 with 10 or more)")
	batch := fs.Int("batch", 16, "with --prompts, the prompts run in one prefill")
	capture := fs.String("capture", "*", "comma-separated capture globs, e.g. 'blocks.*.attn.hook_pattern,blocks.*.hook_resid_post'")
	layers := fs.String("layers", "", "layer range FIRST:LAST for per-layer points (default all)")
	dir := fs.String("out", "strata-trace", "output folder, replaced as a whole")
	backend := fs.String("backend", "auto", "backend: "+strings.Join(backends.Names, ", "))
	placement := placementFlag(fs)
	precision := precisionFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	prec, err := precision()
	if err != nil {
		return err
	}
	switch {
	case isSet(fs, "tokens") && isSet(fs, "prompt"):
		return errors.New("trace takes --prompt or --tokens, not both")
	case isSet(fs, "prompts") && (isSet(fs, "prompt") || isSet(fs, "tokens")):
		return errors.New("trace takes --prompts or one prompt (--prompt or --tokens), not both")
	case isSet(fs, "prompts") && *promptFile == "":
		return errors.New("--prompts is empty: give the file of prompts")
	case isSet(fs, "batch") && (*promptFile == "" || *batch < 1):
		return errors.New("--batch goes with --prompts, and is at least 1")
	case isSet(fs, "tokens") && strings.TrimSpace(*tokenList) == "":
		return errors.New("--tokens is empty: give token ids, e.g. --tokens 1,403,407")
	case isSet(fs, "prompt") && *prompt == "":
		return errors.New("--prompt is empty: give the text to trace")
	case *dir == "":
		return errors.New("--out is empty: give the folder to write")
	}
	if err := trace.CheckFolder(*dir); err != nil {
		return traceOutError(*dir, err)
	}
	m, err := openModel(*path)
	if err != nil {
		return err
	}
	c := &m.Config
	var tokens []int32
	switch {
	case *promptFile != "": // read by traceFile, once the capture is known to be good
	case *tokenList != "":
		for _, f := range strings.Split(*tokenList, ",") {
			id, ok := decimal(strings.TrimSpace(f))
			if !ok {
				return fmt.Errorf("--tokens: %q is not a token id", f)
			}
			if id >= int64(c.Vocab) {
				return fmt.Errorf("--tokens: %d is not a token id of this model: its vocabulary is 0 to %d", id, c.Vocab-1)
			}
			tokens = append(tokens, int32(id))
		}
	default:
		text := *prompt
		if text == "" {
			text = defaultPrompt
		}
		if tokens, err = m.Tok.Encode(text, tokenizer.Options{}); err != nil {
			return err
		}
	}
	if len(tokens) > c.Context {
		return promptTooLong(len(tokens), c.Context)
	}
	plan := engine.Capture{Globs: strings.Split(*capture, ","), LastLayer: -1}
	if *layers != "" {
		a, b, ok := strings.Cut(*layers, ":")
		first, ok1 := decimal(a)
		last, ok2 := decimal(b)
		if !ok || !ok1 || !ok2 || last < first {
			return fmt.Errorf("--layers %q: want FIRST:LAST with 0 <= FIRST <= LAST, e.g. 0:3", *layers)
		}
		if last >= int64(c.Layers) {
			return fmt.Errorf("--layers %s: the model has %d layers, 0 to %d", *layers, c.Layers, c.Layers-1)
		}
		plan.FirstLayer, plan.LastLayer = int(first), int(last)
	}
	o := engine.Options{Capture: plan, Logits: engine.LogitsAll, Precision: prec}
	if err := o.Capture.Validate(c); err != nil { // before a plan counts its bytes
		return err
	}
	if *promptFile != "" {
		return traceFile(ctx, m, *promptFile, *batch, o, *backend, *placement, *dir, out)
	}
	e, err := openEngine(m, *backend, *placement, engine.PlanRequest{Capacity: len(tokens), Tokens: len(tokens), Options: o})
	if err != nil {
		return err
	}
	s, err := e.NewSession(len(tokens))
	if err != nil {
		return err
	}
	defer s.Close()
	tr, err := s.Prefill(ctx, tokens, o)
	if err != nil {
		return err
	}
	// The lens needs every layer's resid_post; without it the report says the lens was not drawn.
	_ = e.LogitLens(tr)
	if err := viz.ExportContext(ctx, tr, *dir); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: --out %s was not replaced (it is as it was)", *dir)
		}
		return traceOutError(*dir, err)
	}
	name, nf, err := tr.FirstNonFinite()
	if err != nil {
		return err
	}
	if name != "" {
		at := name
		if l := trace.LayerOf(name); l >= 0 {
			at = fmt.Sprintf("%s (layer %d)", name, l)
		}
		fmt.Fprintf(stderr, "strata: warning: the model went non-finite: first at %s, %s; manifest.json and the report mark every capture with NaN or Inf\n", at, nf)
	}
	fmt.Fprintf(out, "traced %s through %s on %s: %s in %s/trace.npz, manifest in %s/manifest.json, report in %s/index.html\n",
		human.Count(len(tokens), "token"), human.Count(e.Model.Layers, "layer"), tr.Backend, human.Count(len(tr.Names), "tensor"), *dir, *dir, *dir)
	return nil
}

// traceOutError says a folder error as the flag the user gave: the error
// names the folder already.
func traceOutError(dir string, err error) error {
	return &rewordedError{"--out " + dir + ": " + strings.TrimPrefix(err.Error(), "trace: "+dir+": "), err}
}

// outFile is a file flag's output; ours says whether a file there is one
// the command wrote, which it may replace.
type outFile struct {
	flag, path, what string
	ours             func(path string) bool
}

// checkOutFiles checks, before any work, every file a command writes
// (those given: an empty path is a flag not given): each can be written
// where asked, is none of the command's inputs (flag and path) nor another
// output, and holds nothing the command did not write. Every output file
// flag goes through here; the files are then written with
// trace.WriteAtomic, so that a failed or interrupted run leaves them as
// they were.
func checkOutFiles(outs []outFile, inputs ...[2]string) error {
	for i, o := range outs {
		if o.path == "" {
			continue
		}
		if err := checkOutFile(o.flag, o.path); err != nil {
			return err
		}
		for _, in := range inputs {
			if err := checkNotSame(o.flag, o.path, in[0], in[1]); err != nil {
				return err
			}
		}
		for _, other := range outs[:i] {
			if err := checkNotSame(o.flag, o.path, other.flag, other.path); err != nil {
				return err
			}
		}
		if err := checkReplaceable(o.flag, o.path, o.what, o.ours); err != nil {
			return err
		}
	}
	return nil
}

// checkOutFile refuses, before any work, an output file that cannot be
// written where the user asked.
func checkOutFile(flag, path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s %s: is a folder; give a file name", flag, path)
	} else if err == nil && !st.Mode().IsRegular() {
		// A pipe would block the write; a device is no place for a file.
		return fmt.Errorf("%s %s: exists and is not a regular file (%v); give a file name", flag, path, st.Mode().Type())
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: the folder %s does not exist", flag, path, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, path, err)
	case !st.IsDir():
		return fmt.Errorf("%s %s: %s is not a folder", flag, path, dir)
	}
	return nil
}

// checkNotSame refuses an output that is the same file as another path
// the command was given (the model it reads, another output).
func checkNotSame(flag, path, otherFlag, other string) error {
	if path == "" || other == "" {
		return nil
	}
	a, errA := os.Stat(path)
	b, errB := os.Stat(other)
	if errA == nil && errB == nil && os.SameFile(a, b) || filepath.Clean(path) == filepath.Clean(other) {
		return fmt.Errorf("%s %s: is the file of %s; write elsewhere", flag, path, otherFlag)
	}
	return nil
}

// checkReplaceable refuses to write over a file that is not one this
// command wrote (a user's notes, a real model): what says so is ours.
func checkReplaceable(flag, path, what string, ours func(path string) bool) error {
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() || ours(path) {
		return nil // absent, or not a file: the writer says what is wrong
	}
	return fmt.Errorf("%s %s: the file exists and is not %s, so it is left as it is: remove it first, or write elsewhere", flag, path, what)
}

// generatedModel says whether path is a model strata gen wrote.
func generatedModel(path string) bool {
	f, err := gguf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	name, err := f.String("general.name")
	return err == nil && strings.HasPrefix(name, "random ")
}

// outFileError names the flag and the user's file, not the temporary file
// the writer renames into place.
func outFileError(flag, path string, err error) error {
	tmp := regexp.MustCompile(regexp.QuoteMeta(filepath.Base(path)) + `\.tmp-[0-9]+`)
	msg := tmp.ReplaceAllLiteralString(err.Error(), filepath.Base(path))
	return &rewordedError{flag + " " + path + ": " + msg, err}
}

// rewordedError says err in the user's terms and still wraps it.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// defaultPrompt suits the default model, trained on Go source.
const defaultPrompt = "func (s *Server) Close() error {\n\ts.mu.Lock()\n\tdefer s.mu.Unlock()\n\treturn s.listener.Close()\n}\n"

func cmdGen(ctx context.Context, args []string, out io.Writer) error {
	fs := flags("gen", out)
	shape := fs.String("shape", "", "one of: "+strings.Join(synth.ShapeNames(), ", "))
	typName := fs.String("type", "F32", "the weights' type: "+synth.TypeChoices())
	dst := fs.String("out", "", "output .gguf file")
	seed := uint64(1)
	fs.Var((*seedFlag)(&seed), "seed", "random seed, an unsigned `integer`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, ok := synth.Shapes[*shape]
	if !ok {
		return fmt.Errorf("unknown --shape %q (choose from %s)", *shape, strings.Join(synth.ShapeNames(), ", "))
	}
	if *dst == "" {
		return errors.New("gen needs --out F.gguf")
	}
	if err := checkOutFiles([]outFile{{"--out", *dst, "a model strata gen wrote", generatedModel}}); err != nil {
		return err
	}
	mix, err := synth.ParseMix(*typName)
	if err != nil {
		return fmt.Errorf("--type: %w", err)
	}
	w, err := synth.GenerateMix(s, mix, seed)
	if err != nil {
		return err
	}
	if err := w.WriteFileContext(ctx, *dst); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %s was not written (it is as it was)", *dst)
		}
		return outFileError("--out", *dst, err)
	}
	fmt.Fprintf(out, "wrote %s: %s shape, %s weights, seed %d\n", *dst, *shape, mix.Name, seed)
	return nil
}
