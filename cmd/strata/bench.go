package main

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/backends"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/models"
	"github.com/stratalab/strata/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

type benchRow struct {
	Model   string `json:"model"`
	Type    string `json:"type"`
	Backend string `json:"backend"`
	T       int    `json:"T"`
	Capture string `json:"capture"`
	// Precision is the matrix products' (engine.Precision): exact or fast.
	Precision string  `json:"precision"`
	MedianMS  float64 `json:"median_ms"`
	TokS      float64 `json:"tok_s"`
	Runs      int     `json:"runs"`
	// ReadbackGBs is how fast a whole trace of one more prefill came back
	// to new host memory (Trace.Load), for a capture held on a device;
	// ReadbackReusedGBs the same for the prefill after it, whose trace is
	// read into the memory the first one's Close gave back, as in a sweep.
	ReadbackGBs       float64 `json:"readback_gb_s,omitempty"`
	ReadbackReusedGBs float64 `json:"readback_reused_gb_s,omitempty"`
	// Stages is device time per kind of kernel in one more, profiled run
	// (GPU timestamp queries), in milliseconds.
	Stages map[string]float64 `json:"stages_ms,omitempty"`
	// Kernels is the same run's device time per kernel (shader variant,
	// "copy" or "fill").
	Kernels map[string]float64 `json:"kernels_ms,omitempty"`
}

// profiler is a backend that times its kernels on the device.
type profiler interface {
	SetProfiling(on bool) error
	StageTimes() []vulkan.StageTime
}

// stageTimes runs one profiled prefill and sums device time by stage over
// every tier; nil for backends without timestamps.
func stageTimes(ctx context.Context, s *engine.Session, tokens []int32, o engine.Options) (stages, kernels map[string]float64, err error) {
	var ps []profiler
	for _, b := range s.Engine().Tiers() {
		p, ok := b.(profiler)
		if !ok || p.SetProfiling(true) != nil {
			return nil, nil, nil
		}
		defer p.SetProfiling(false)
		p.StageTimes()
		ps = append(ps, p)
	}
	// Profiling applies to streams made after it is turned on.
	profiled, err := s.Engine().NewSession(s.Capacity())
	if err != nil {
		return nil, nil, err
	}
	defer profiled.Close()
	// The first prefill of a session makes its capture arenas (the device
	// fills them with zeros: 10 ms of a bonsai-1.7b capture-all prefill at
	// T=2048 on the H200); the timed ones reuse them. Profile the second.
	tr, err := profiled.Prefill(ctx, tokens, o)
	if err != nil {
		return nil, nil, err
	}
	tr.Close()
	for _, p := range ps {
		p.StageTimes()
	}
	profiled.Reset()
	if _, err := profiled.Prefill(ctx, tokens, o); err != nil {
		return nil, nil, err
	}
	stages, kernels = map[string]float64{}, map[string]float64{}
	for _, p := range ps {
		for _, st := range p.StageTimes() {
			ms := float64(st.Time.Microseconds()) / 1e3
			stages[st.Stage] += ms
			kernels[st.Name] += ms
		}
	}
	return stages, kernels, nil
}

func stageSummary(stages map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(stages)) {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, stages[k]))
	}
	if len(parts) == 0 {
		return ""
	}
	return "device ms: " + strings.Join(parts, ", ")
}

func cmdBench(ctx context.Context, args []string, out io.Writer) (err error) {
	fs := flags("bench", out)
	path := fs.String("model", "", "model file (default: the default model)")
	shape := fs.String("shape", "", "generate a random model of this shape instead: "+strings.Join(synth.ShapeNames(), ", "))
	typName := fs.String("type", "Q1_0_g128", "the weights' type of a generated model (--shape): "+synth.TypeChoices())
	tokenList := fs.String("tokens", "128,512,2048", "prompt lengths")
	captures := fs.String("capture", "none", "none, all, or both as none,all")
	precisions := fs.String("precision", "exact", "matrix products: exact (float32 accuracy), fast (float16 inputs on a GPU, int8 x for quantized weights on a CPU with AVX-512 VNNI or AVX2), or both as exact,fast")
	backend := fs.String("backend", "auto", "backend: "+strings.Join(backends.Names, ", "))
	placement := placementFlag(fs)
	iters := fs.Int("iters", 5, "timed runs per point (the median is reported)")
	warmup := fs.Duration("warmup", 2*time.Second, "untimed prefills before each point's timed runs, for at least this long (and at least one): a GPU's clocks rise only under load")
	budget := fs.Float64("budget", 16, "capture memory a prefill may use, in GiB (device memory on a GPU, host memory on the CPU); a point over it is reported as refused")
	jsonOut := fs.String("json", "", "also write the rows as JSON to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the host's work to this file (go tool pprof)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if isSet(fs, "type") && *shape == "" {
		return fmt.Errorf("--type %s: it is the weight type of a generated model (--shape); a model file's types are its own", *typName)
	}
	// The budget becomes bytes in an int64: refuse what has no such value.
	if !(*budget*(1<<30) >= 1 && *budget < 1<<32) {
		return fmt.Errorf("--budget %g: want a size in GiB of at least one byte (1e-9) and below 2^32", *budget)
	}
	err = checkOutFiles([]outFile{
		{"--json", *jsonOut, "rows strata bench wrote", benchRows},
		{"--cpuprofile", *cpuProfile, "a CPU profile", cpuProfileFile},
	}, [2]string{"--model", *path})
	if err != nil {
		return err
	}
	if *iters < 1 {
		return fmt.Errorf("--iters %d: want at least 1 timed run", *iters)
	}
	if *warmup < 0 {
		return fmt.Errorf("--warmup %v: want a duration of 0 or more (0: one warm-up run)", *warmup)
	}
	// A list naming a value twice would print its rows twice.
	for _, l := range []struct{ flag, list string }{{"--capture", *captures}, {"--precision", *precisions}, {"--tokens", *tokenList}} {
		seen := map[string]bool{}
		for _, v := range strings.Split(l.list, ",") {
			v = strings.TrimSpace(v)
			if seen[v] {
				return fmt.Errorf("%s %s: %s is named twice", l.flag, l.list, v)
			}
			seen[v] = true
		}
	}
	for _, capture := range strings.Split(*captures, ",") {
		if capture != "none" && capture != "all" {
			return fmt.Errorf("--capture %q: want none or all, or both as none,all", capture)
		}
	}
	var precs []engine.Precision
	for _, f := range strings.Split(*precisions, ",") {
		p, err := engine.ParsePrecision(f)
		if err != nil {
			return fmt.Errorf("--precision: %w", err)
		}
		precs = append(precs, p)
	}
	var lengths []int
	for _, f := range strings.Split(*tokenList, ",") {
		n, ok := decimal(strings.TrimSpace(f))
		if !ok || n <= 0 {
			return fmt.Errorf("--tokens: %q is not a positive length", f)
		}
		lengths = append(lengths, int(n))
	}
	m, modelName, typ, err := benchModel(*path, *shape, *typName)
	if err != nil {
		return err
	}
	if longest := slices.Max(lengths); longest > m.Context {
		return fmt.Errorf("--tokens %d: %w", longest, promptTooLong(longest, m.Context))
	}
	// The plan holds the longest prompt without captures: a capture too
	// large is a refused row, as over the budget.
	e, err := openEngine(m, *backend, *placement, engine.PlanRequest{Capacity: slices.Max(lengths), Tokens: slices.Max(lengths)})
	if err != nil {
		return err
	}
	b := e.Backend
	if slices.Contains(precs, engine.PrecisionFast) && !onDevice(b) {
		switch ins := cpu.Int8Instructions(); ins {
		case "":
			fmt.Fprintln(stderr, "strata: this CPU has neither AVX-512 VNNI nor AVX2: its fast rows compute in float32, as its exact rows do")
		default:
			fmt.Fprintf(stderr, "strata: fast precision on this CPU multiplies quantized weights with x rounded to int8 (%s); float weights stay float32\n", ins)
		}
	}
	s, err := e.NewSession(slices.Max(lengths))
	if err != nil {
		return err
	}
	defer s.Close()
	if *cpuProfile != "" {
		// The profile is written whole at the end, as --json is: a failed
		// bench leaves what was there.
		var profile bytes.Buffer
		if err := pprof.StartCPUProfile(&profile); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err != nil {
				return
			}
			if werr := trace.WriteAtomic(*cpuProfile, func(w io.Writer) error {
				_, err := w.Write(profile.Bytes())
				return err
			}); werr != nil {
				err = outFileError("--cpuprofile", *cpuProfile, werr)
			}
		}()
	}
	var rows []benchRow
	// The backend's name can be long (a Vulkan device's, or tiers'): its column fits it.
	name := e.BackendName()
	bw := max(28, len(name))
	mw := max(14, len(modelName))
	fmt.Fprintf(out, "%-*s %-11s %-*s %6s %-7s %-9s %10s %10s\n", mw, "model", "type", bw, "backend", "T", "capture", "precision", "median ms", "tok/s")
	for _, prec := range precs {
		for _, capture := range strings.Split(*captures, ",") {
			o := engine.Options{Budget: int64(*budget * (1 << 30)), Precision: prec}
			if capture == "all" {
				o.Capture = engine.CaptureAll()
			}
			for _, t := range lengths {
				tokens := make([]int32, t)
				for i := range tokens {
					tokens[i] = int32((i*7919 + 13) % m.Vocab)
				}
				ms, err := timePrefill(ctx, s, tokens, o, *warmup, *iters)
				if errors.Is(err, engine.ErrOverBudget) {
					fmt.Fprintf(out, "%-*s %-11s %-*s %6d %-7s %-9s %10s %10s  %v\n", mw, modelName, typ, bw, name, t, capture, prec, "-", "-", err)
					continue
				}
				if err != nil {
					return err
				}
				row := benchRow{Model: modelName, Type: typ, Backend: name, T: t, Capture: capture, Precision: prec.String(), MedianMS: ms, TokS: float64(t) / ms * 1e3, Runs: *iters}
				if row.Stages, row.Kernels, err = stageTimes(ctx, s, tokens, o); err != nil {
					return err
				}
				readback := ""
				if capture == "all" && onDevice(b) {
					s.FreeSpare() // the first read makes its memory, as a notebook's does
					debug.FreeOSMemory()
					if row.ReadbackGBs, err = timeReadback(ctx, s, tokens, o); err != nil {
						return err
					}
					if row.ReadbackReusedGBs, err = timeReadback(ctx, s, tokens, o); err != nil {
						return err
					}
					readback = fmt.Sprintf("read-back %.1f GB/s (%.1f reused)  ", row.ReadbackGBs, row.ReadbackReusedGBs)
				}
				rows = append(rows, row)
				line := fmt.Sprintf("%-*s %-11s %-*s %6d %-7s %-9s %10.2f %10.1f  %s%s", mw, row.Model, row.Type, bw, row.Backend, row.T, row.Capture, row.Precision, row.MedianMS, row.TokS, readback, stageSummary(row.Stages))
				fmt.Fprintln(out, strings.TrimRight(line, " "))
			}
		}
	}
	if *jsonOut != "" {
		err := trace.WriteAtomic(*jsonOut, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", " ")
			return enc.Encode(rows)
		})
		if err != nil {
			return outFileError("--json", *jsonOut, err)
		}
	}
	return nil
}

func benchModel(path, shape, typName string) (m *model.Model, name, typ string, err error) {
	switch {
	case path != "" && shape != "":
		return nil, "", "", errors.New("bench takes --model or --shape, not both")
	case path != "":
		m, err = model.Open(path)
		if err != nil {
			return nil, "", "", err
		}
		return m, m.Name, fileTypes(m.File), nil
	case shape == "":
		m, err = models.Open()
		if err != nil {
			return nil, "", "", err
		}
		return m, m.Name, fileTypes(m.File), nil
	}
	s, ok := synth.Shapes[shape]
	if !ok {
		return nil, "", "", fmt.Errorf("unknown --shape %q (choose from %s)", shape, strings.Join(synth.ShapeNames(), ", "))
	}
	mix, err := synth.ParseMix(typName)
	if err != nil {
		return nil, "", "", fmt.Errorf("--type: %w", err)
	}
	m, err = synth.RandomMix(s, mix, 1)
	return m, shape, mix.Name, err
}

func onDevice(b backend.Backend) bool { return b.Capabilities().DeviceMemory }

// timeReadback runs one more prefill and times reading its whole trace
// into host memory, in GB/s (10^9 bytes); closing the trace gives that
// memory to the session's next trace.
func timeReadback(ctx context.Context, s *engine.Session, tokens []int32, o engine.Options) (float64, error) {
	s.Reset()
	tr, err := s.Prefill(ctx, tokens, o)
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	var bytes int64
	for _, name := range tr.Names {
		n := int64(4)
		for _, d := range tr.Shape(name) {
			n *= int64(d)
		}
		bytes += n
	}
	start := time.Now()
	if err := tr.Load(); err != nil {
		return 0, err
	}
	return float64(bytes) / time.Since(start).Seconds() / 1e9, nil
}

// timePrefill runs warm-up prefills for at least warmup (at least one), then
// iters timed ones, each from position 0, and returns the median in
// milliseconds. On the H200 the clocks idle at 345 MHz and fell from 1980 to
// 810 MHz in the 1.8 s of a whole trace's read-back and the collection after
// it; they took 0.6 s to climb back, and after 0.5 s of warm-up the next
// point ran at 1.6x its device time.
func timePrefill(ctx context.Context, s *engine.Session, tokens []int32, o engine.Options, warmup time.Duration, iters int) (float64, error) {
	// The garbage of what ran before (a generated model's making, a trace
	// read back whole: gigabytes) is collected and handed back to the system
	// now, not by the runtime in the background of the timed runs: on the
	// H200 such runs took 1.7-3x their device time.
	debug.FreeOSMemory()
	run := func() (float64, error) {
		s.Reset()
		start := time.Now()
		tr, err := s.Prefill(ctx, tokens, o)
		if err != nil {
			return 0, err
		}
		ms := float64(time.Since(start).Microseconds()) / 1e3
		tr.Close() // a GPU trace stays on the device until read: give it back
		return ms, nil
	}
	for start := time.Now(); ; {
		if _, err := run(); err != nil {
			return 0, err
		}
		if time.Since(start) >= warmup {
			break
		}
	}
	var times []float64
	for range iters {
		ms, err := run()
		if err != nil {
			return 0, err
		}
		times = append(times, ms)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// cpuProfileFile says whether path holds a profile as runtime/pprof writes
// one: a gzip stream of one well-formed protocol buffer.
func cpuProfileFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	z, err := gzip.NewReader(io.LimitReader(f, 64<<20))
	if err != nil {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(z, 256<<20))
	if err != nil || len(b) == 0 {
		return false
	}
	for len(b) > 0 {
		_, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(0, typ, b[n:])
		if m < 0 {
			return false
		}
		b = b[n+m:]
	}
	return true
}

// benchRows says whether path holds rows strata bench --json wrote.
func benchRows(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64<<20 {
		return false
	}
	var rows []map[string]json.RawMessage
	if json.Unmarshal(b, &rows) != nil {
		return false
	}
	for _, r := range rows {
		if _, ok := r["median_ms"]; !ok {
			return false
		}
	}
	return true
}

// fileTypes names a file's weight types: the llama.cpp mix it says it is
// (general.file_type), else the types of its matrices, the one holding the
// most weights first ("Q4_K+Q6_K"): a mix's LM head alone does not name
// the file's format.
func fileTypes(f *gguf.File) string {
	if mix, ok := synth.MixOf(f); ok {
		return mix.Name
	}
	return matrixTypes(f)
}

// matrixTypes names the types of a file's matrices, the one holding the
// most weights first.
func matrixTypes(f *gguf.File) string {
	weights := map[gguf.Type]int64{}
	for _, t := range f.Tensors {
		if len(t.Dims) >= 2 {
			weights[t.Type] += t.Elements()
		}
	}
	types := slices.SortedFunc(maps.Keys(weights), func(a, b gguf.Type) int {
		return cmp.Or(cmp.Compare(weights[b], weights[a]), cmp.Compare(a, b))
	})
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t.String()
	}
	return strings.Join(names, "+")
}
