// Command bpe builds the training data of Strata's default model from the Go standard
// library's sources: it splits the files into training and held-out sets, learns a byte-level
// BPE tokenizer (GPT-2 style, Qwen2 pre-tokenizer) on the training files, and writes both sets
// as uint16 token ids.
//
//	go run ./tools/train/bpe -out .traindata
//
// Outputs in -out: tokenizer.json, corpus.json (split, counts, reference prompt),
// train.bin.gz and val.bin.gz (little-endian uint16 ids; each file is preceded by
// <|endoftext|>), and val_text.bin.gz (the held-out files' bytes, for cross-checks).
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

const endOfText = "<|endoftext|>"

// heldOutModulus puts about 1 file in 50 (2%) into the held-out set.
const heldOutModulus = 50

// promptTokens is the approximate length of the reference prompt (without <|endoftext|>).
const promptTokens = 64

type document struct {
	path string // relative to GOROOT/src, slash separated
	text []byte
}

func main() {
	root := flag.String("src", filepath.Join(runtime.GOROOT(), "src"), "corpus root: the Go standard library's sources")
	out := flag.String("out", ".traindata", "output folder")
	vocab := flag.Int("vocab", 2048, "vocabulary size: 256 byte tokens + merges + <|endoftext|>")
	flag.Parse()
	if err := run(*root, *out, *vocab); err != nil {
		log.Fatal(err)
	}
}

func run(root, out string, vocab int) error {
	if vocab < 258 || vocab > 65536 {
		return fmt.Errorf("-vocab %d: must be in [258, 65536] so ids fit uint16 and at least one merge is learned", vocab)
	}
	start := time.Now()
	train, val, err := readCorpus(root)
	if err != nil {
		return err
	}
	if len(val) == 0 || len(train) == 0 {
		return fmt.Errorf("%s: split left %d training and %d held-out files; need both", root, len(train), len(val))
	}
	for _, d := range append(append([]document{}, train...), val...) {
		if bytes.Contains(d.text, []byte(endOfText)) {
			return fmt.Errorf("%s contains %q, which would read as the special token", d.path, endOfText)
		}
	}
	log.Printf("read %d training and %d held-out files (%d and %d bytes) in %v",
		len(train), len(val), totalBytes(train), totalBytes(val), time.Since(start))

	counts := map[string]int64{}
	for _, d := range train {
		preTokenize(d.text, func(c []byte) { counts[string(c)]++ })
	}
	log.Printf("%d distinct pre-tokenizer chunks; learning %d merges", len(counts), vocab-257)
	t := time.Now()
	merges, err := learnMerges(counts, vocab-257)
	if err != nil {
		return err
	}
	log.Printf("learned merges in %v", time.Since(t))

	tok := buildTokenizer(merges)
	enc := newEncoder(merges)
	eot := uint16(len(tok.Tokens) - 1)
	trainIDs, _ := encodeDocs(enc, train, eot)
	valIDs, valLens := encodeDocs(enc, val, eot)
	log.Printf("encoded: %d training and %d held-out tokens (%.2f bytes/token)",
		len(trainIDs), len(valIDs), float64(totalBytes(train))/float64(len(trainIDs)-len(train)))

	prompt, err := referencePrompt(enc, val, eot)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	info := corpusInfo{
		Source:       root,
		GoVersion:    runtime.Version(),
		Split:        fmt.Sprintf("held out when fnv1a32(path relative to GOROOT/src) %% %d == 0; *.go files outside testdata folders, without generated files (// Code generated ... DO NOT EDIT.)", heldOutModulus),
		TrainFiles:   len(train),
		ValFiles:     len(val),
		TrainBytes:   totalBytes(train),
		ValBytes:     totalBytes(val),
		TrainTokens:  len(trainIDs),
		ValTokens:    len(valIDs),
		Prompt:       prompt,
		ValDocuments: valLens,
	}
	for _, w := range []struct {
		name string
		data []byte
	}{
		{"tokenizer.json", mustJSON(tok)},
		{"corpus.json", mustJSON(info)},
	} {
		if err := os.WriteFile(filepath.Join(out, w.name), w.data, 0o644); err != nil {
			return err
		}
	}
	var valText []byte
	for _, d := range val {
		valText = append(valText, d.text...)
	}
	if err := writeGzip(filepath.Join(out, "train.bin.gz"), idBytes(trainIDs)); err != nil {
		return err
	}
	if err := writeGzip(filepath.Join(out, "val.bin.gz"), idBytes(valIDs)); err != nil {
		return err
	}
	if err := writeGzip(filepath.Join(out, "val_text.bin.gz"), valText); err != nil {
		return err
	}
	log.Printf("wrote %s in %v", out, time.Since(start))
	return nil
}

// readCorpus reads every hand-written .go file under root outside testdata folders, sorted by path.
func readCorpus(root string) (train, val []document, err error) {
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated(text) {
			return nil
		}
		doc := document{path: filepath.ToSlash(rel), text: text}
		if heldOut(doc.path) {
			val = append(val, doc)
		} else {
			train = append(train, doc)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("corpus root %s: %w (pass -src)", root, err)
	}
	return train, val, err // WalkDir visits in lexical order, so both lists are sorted
}

// generatedMarker is Go's convention for machine-written files (go.dev/s/generatedcode):
// they are a third of the library (tables, SSA rewrite rules) and teach little Go.
var generatedMarker = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// generated reports whether the marker comes before the package clause.
func generated(text []byte) bool {
	for _, line := range bytes.Split(text, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if generatedMarker.Match(line) {
			return true
		}
		if bytes.HasPrefix(line, []byte("package ")) {
			return false
		}
	}
	return false
}

func heldOut(relPath string) bool {
	h := fnv.New32a()
	h.Write([]byte(relPath))
	return h.Sum32()%heldOutModulus == 0
}

func totalBytes(docs []document) int {
	n := 0
	for _, d := range docs {
		n += len(d.text)
	}
	return n
}

// encodeDocs returns <|endoftext|> doc0 <|endoftext|> doc1 ... and each document's length.
func encodeDocs(enc *encoder, docs []document, eot uint16) ([]uint16, []docLength) {
	var ids []uint16
	lens := make([]docLength, len(docs))
	for k, d := range docs {
		ids = append(ids, eot)
		n := len(ids)
		ids = enc.encode(ids, d.text)
		lens[k] = docLength{Path: d.path, Bytes: len(d.text), Tokens: len(ids) - n}
	}
	return ids, lens
}

// referencePrompt takes whole lines from the first held-out function declaration until
// about promptTokens tokens, so the text tokenizes to the same ids on its own.
func referencePrompt(enc *encoder, val []document, eot uint16) (prompt, error) {
	for _, d := range val {
		at := bytes.Index(d.text, []byte("\nfunc "))
		if at < 0 {
			continue
		}
		var text []byte
		for _, line := range bytes.SplitAfter(d.text[at+1:], []byte("\n")) {
			next := append(append([]byte{}, text...), line...)
			if len(enc.encode(nil, next)) > promptTokens {
				break
			}
			text = next
		}
		if len(enc.encode(nil, text)) < promptTokens/2 {
			continue // a very long line; look further
		}
		ids := append([]uint16{eot}, enc.encode(nil, text)...)
		return prompt{Path: d.path, Text: string(text), IDs: ids}, nil
	}
	return prompt{}, errors.New("no held-out file has a function declaration for the reference prompt")
}

type tokenizerFile struct {
	Model      string   `json:"model"`
	Pre        string   `json:"pre"`
	Tokens     []string `json:"tokens"`
	TokenTypes []int32  `json:"token_types"` // 1 normal, 3 control (llama.cpp's token types)
	Merges     []string `json:"merges"`
	EOS        int      `json:"eos_token_id"`
	BOS        int      `json:"bos_token_id"`
}

func buildTokenizer(merges []pair) tokenizerFile {
	pieces := make([][]byte, 256, 256+len(merges))
	for b := range pieces {
		pieces[b] = []byte{byte(b)}
	}
	tok := tokenizerFile{Model: "gpt2", Pre: "qwen2"}
	for _, m := range merges {
		tok.Merges = append(tok.Merges, tokenString(pieces[m.left])+" "+tokenString(pieces[m.right]))
		pieces = append(pieces, append(append([]byte{}, pieces[m.left]...), pieces[m.right]...))
	}
	for _, p := range pieces {
		tok.Tokens = append(tok.Tokens, tokenString(p))
		tok.TokenTypes = append(tok.TokenTypes, 1)
	}
	tok.Tokens = append(tok.Tokens, endOfText)
	tok.TokenTypes = append(tok.TokenTypes, 3)
	tok.EOS = len(tok.Tokens) - 1
	tok.BOS = tok.EOS // each training file starts after <|endoftext|>
	return tok
}

type docLength struct {
	Path   string `json:"path"`
	Bytes  int    `json:"bytes"`
	Tokens int    `json:"tokens"` // without the leading <|endoftext|>
}

type prompt struct {
	Path string   `json:"path"`
	Text string   `json:"text"`
	IDs  []uint16 `json:"ids"` // <|endoftext|> then the text's tokens
}

type corpusInfo struct {
	Source       string      `json:"source"`
	GoVersion    string      `json:"go_version"`
	Split        string      `json:"split"`
	TrainFiles   int         `json:"train_files"`
	ValFiles     int         `json:"val_files"`
	TrainBytes   int         `json:"train_bytes"`
	ValBytes     int         `json:"val_bytes"`
	TrainTokens  int         `json:"train_tokens"`
	ValTokens    int         `json:"val_tokens"`
	Prompt       prompt      `json:"prompt"`
	ValDocuments []docLength `json:"val_documents"`
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		panic(err) // only plain structs of strings and numbers are marshalled
	}
	return b
}

func idBytes(ids []uint16) []byte {
	b := make([]byte, 2*len(ids))
	for k, id := range ids {
		binary.LittleEndian.PutUint16(b[2*k:], id)
	}
	return b
}

func writeGzip(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
