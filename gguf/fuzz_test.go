package gguf

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzParse/seed-* from fuzzSeeds")

// fuzzSeeds are the generated corpus: valid files, each cut short at a few
// points, and every malformed case of TestParseErrors.
func fuzzSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{"hand-built": handBuilt()}
	w := NewWriter()
	require.NoError(t, w.AddKV("general.alignment", uint32(16)))
	require.NoError(t, w.AddKV("tokenizer.ggml.tokens", []string{"<s>", "a"}))
	require.NoError(t, w.AddKV("llama.block_count", uint32(1)))
	require.NoError(t, w.AddTensor("q", Q4_K, []int64{256}, filled(144, 3)))
	require.NoError(t, w.AddTensor("f", F16, []int64{3}, filled(6, 4)))
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	seeds["written"] = buf.Bytes()
	for _, name := range []string{"hand-built", "written"} {
		valid := seeds[name]
		for _, cut := range []int{4, 23, 40, len(valid) / 2, len(valid) - 1} {
			seeds[fmt.Sprintf("%s-cut-%d", name, cut)] = valid[:cut]
		}
	}
	for _, m := range malformed() {
		seeds[strings.ReplaceAll(m.name, " ", "-")] = m.data
	}
	return seeds
}

func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	seeds := fuzzSeeds(t)
	for name, data := range seeds {
		path := filepath.Join(dir, "seed-"+name)
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if *updateSeeds {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "run go test ./gguf -run TestFuzzSeeds -update-seeds")
		require.Equal(t, want, string(got), "%s is stale; run go test ./gguf -run TestFuzzSeeds -update-seeds", path)
	}
}

// FuzzParse checks Parse never panics or hangs, that what it accepts is
// self-consistent, and that writing an accepted file and parsing it again
// is stable: the rewrite of the rewrite is byte-identical.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz.gguf")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: fuzz.gguf: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if file.DataOffset%file.Alignment != 0 {
			t.Fatalf("data offset %d not aligned to %d", file.DataOffset, file.Alignment)
		}
		for _, kv := range file.KVs {
			kv.Value.Any()
			file.Uint32(kv.Key)
			file.Uint64(kv.Key)
			file.Int(kv.Key)
			file.Float32(kv.Key)
			file.Float64(kv.Key)
			file.Bool(kv.Key)
			file.String(kv.Key)
			file.Strings(kv.Key)
			file.Float32s(kv.Key)
			file.Int32s(kv.Key)
		}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			if size, err := ti.Type.RowBytes(ti.Elements()); err != nil || size != ti.Size {
				t.Fatalf("tensor %q size %d, RowBytes gives %d, %v", ti.Name, ti.Size, size, err)
			}
			if n := len(file.Data(ti)); int64(n) != ti.Size {
				t.Fatalf("tensor %q: Data has %d bytes, want %d", ti.Name, n, ti.Size)
			}
			if n := len(file.Extent(ti)); int64(n) < ti.Size {
				t.Fatalf("tensor %q: Extent has %d bytes, less than its size %d", ti.Name, n, ti.Size)
			}
		}
		if file.Alignment > 1<<16 {
			// Rewriting pads to the alignment (up to 2 GiB), too slow for
			// one fuzz iteration; the checks above still ran.
			return
		}
		var once, twice bytes.Buffer
		if _, err := copyFile(t, file).WriteTo(&once); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(once.Bytes(), "rewrite.gguf")
		if err != nil {
			t.Fatalf("rewrite of an accepted file does not parse: %v", err)
		}
		if len(again.KVs) != len(file.KVs) || len(again.Tensors) != len(file.Tensors) {
			t.Fatalf("rewrite has %d KVs and %d tensors, want %d and %d",
				len(again.KVs), len(again.Tensors), len(file.KVs), len(file.Tensors))
		}
		for i := range file.Tensors {
			a, b := &file.Tensors[i], &again.Tensors[i]
			if a.Name != b.Name || a.Type != b.Type || fmt.Sprint(a.Dims) != fmt.Sprint(b.Dims) || !bytes.Equal(file.Data(a), again.Data(b)) {
				t.Fatalf("tensor %d changed in the rewrite: %+v vs %+v", i, *a, *b)
			}
		}
		if _, err := copyFile(t, again).WriteTo(&twice); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatal("rewriting the rewrite changed its bytes")
		}
	})
}
