// Command evalloss measures a model's cross-entropy on the held-out token
// stream that tools/train/bpe writes, through Strata's own engine, the way
// train.py evaluates: non-overlapping windows, each predicting its own next
// tokens.
package main

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/models"
)

func main() {
	data := flag.String("data", ".traindata", "folder with val.bin.gz from tools/train/bpe")
	path := flag.String("model", "", "model file (default: the embedded default model)")
	window := flag.Int("window", 512, "tokens per window")
	windows := flag.Int("windows", 0, "windows to evaluate, spread evenly (0: all)")
	flag.Parse()
	if err := run(*data, *path, *window, *windows); err != nil {
		fmt.Fprintln(os.Stderr, "evalloss:", err)
		os.Exit(1)
	}
}

func run(data, path string, window, windows int) error {
	ids, err := readIDs(filepath.Join(data, "val.bin.gz"))
	if err != nil {
		return err
	}
	m, err := models.Open()
	if path != "" {
		m, err = model.Open(path)
	}
	if err != nil {
		return err
	}
	e, err := engine.NewEngine(m, cpu.New(0))
	if err != nil {
		return err
	}
	s, err := e.NewSession(window)
	if err != nil {
		return err
	}
	total := len(ids) / window
	if windows <= 0 || windows > total {
		windows = total
	}
	start := time.Now()
	var nll float64
	var count int
	for w := range windows {
		off := (w * total / windows) * window
		chunk := ids[off : off+window]
		s.Reset()
		tr, err := s.Prefill(context.Background(), chunk, engine.Options{Logits: engine.LogitsAll})
		if err != nil {
			return err
		}
		logits := tr.Tensor("logits")
		V := logits.Shape[1]
		for p := 0; p+1 < window; p++ {
			nll += crossEntropy(logits.Data[p*V:(p+1)*V], chunk[p+1])
			count++
		}
	}
	fmt.Printf("%s: %d of %d windows of %d tokens (%d predictions): %.4f nats/token in %.1fs on %s\n",
		m.Name, windows, total, window, count, nll/float64(count), time.Since(start).Seconds(), e.Backend.Name())
	return nil
}

func crossEntropy(logits []float32, target int32) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum) - float64(logits[target])
}

func readIDs(path string) ([]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	raw, err := io.ReadAll(z)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw)%2 != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of uint16 ids", path, len(raw))
	}
	ids := make([]int32, len(raw)/2)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return ids, nil
}
