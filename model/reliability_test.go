package model_test

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// withKeys generates a model of shape and writes it again with the keys in
// set replaced or added (a nil value drops the key); it returns the file's
// bytes.
func withKeys(t *testing.T, shape string, set map[string]any) []byte {
	t.Helper()
	w, err := synth.Generate(synth.Shapes[shape], gguf.F32, 1)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes(), shape)
	require.NoError(t, err)
	out := gguf.NewWriter()
	done := map[string]bool{}
	for _, kv := range f.KVs {
		v := kv.Value.Any()
		if nv, ok := set[kv.Key]; ok {
			v, done[kv.Key] = nv, true
		}
		if v != nil {
			require.NoError(t, out.AddKV(kv.Key, v))
		}
	}
	for k, v := range set {
		if !done[k] && v != nil {
			require.NoError(t, out.AddKV(k, v))
		}
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		require.NoError(t, out.AddTensor(ti.Name, ti.Type, ti.Dims, f.Data(ti)))
	}
	buf.Reset()
	_, err = out.WriteTo(&buf)
	require.NoError(t, err)
	return buf.Bytes()
}

func loadBytes(t *testing.T, data []byte) (*model.Model, error) {
	t.Helper()
	f, err := gguf.Parse(data, "crafted")
	require.NoError(t, err)
	return model.Load(f)
}

// Issue 15.2: block_count = 2^24 in a small file cost 8.2 GB and 75 s
// before the missing tensor was noticed, as Load sized its layers by the
// claimed count. Now a claim the file's tensors cannot hold is refused
// before anything is sized by it.
func TestHugeBlockCountCostsNothing(t *testing.T) {
	for _, count := range []uint32{1 << 24, 1 << 20, 3} {
		data := withKeys(t, "tiny-llama", map[string]any{"llama.block_count": count})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := loadBytes(t, data)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		require.ErrorContains(t, err, fmt.Sprintf("llama.block_count = %d needs at least %d tensors, but the file has 21", count, 9*int64(count)))
		allocated := after.TotalAlloc - before.TotalAlloc
		require.Less(t, allocated, uint64(4<<20), "bytes allocated by Load for block_count %d", count)
		require.Less(t, took, 2*time.Second)
	}

	// A count the tensors could hold, with the last block absent.
	_, err := loadBytes(t, withKeys(t, "tiny-llama", map[string]any{"llama.block_count": uint32(2), "general.name": "x"}))
	require.NoError(t, err)

	// Fewer than the file's blocks: a truncated model ran silently ("time
	// time time ...").
	_, err = loadBytes(t, withKeys(t, "tiny-llama", map[string]any{"llama.block_count": uint32(1)}))
	require.ErrorContains(t, err, "llama.block_count = 1 but the file holds tensor blk.1.")
}

// Issue 15.5: rope.scale_linear 0, NaN and -1 and layer_norm_rms_epsilon
// 1e300 (+Inf as float32) or 1e-300 (0) were accepted. Every float and
// count read from metadata is checked, and the error names the key, the
// value and the range.
func TestMetadataOutOfRangeIsRefusedByName(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"llama.rope.scale_linear": float32(0)}, "llama.rope.scale_linear = 0 is out of range: want a number in [0.015625, 1024]"},
		{map[string]any{"llama.rope.scale_linear": float32(nan)}, "llama.rope.scale_linear = NaN is out of range"},
		{map[string]any{"llama.rope.scale_linear": float32(-1)}, "llama.rope.scale_linear = -1 is out of range"},
		{map[string]any{"llama.rope.scale_linear": "two"}, "key llama.rope.scale_linear is STRING"},
		{map[string]any{"llama.attention.layer_norm_rms_epsilon": 1e300}, "llama.attention.layer_norm_rms_epsilon = 1e+300 is out of range: want a number in [1e-30, 1]"},
		{map[string]any{"llama.attention.layer_norm_rms_epsilon": 1e-300}, "llama.attention.layer_norm_rms_epsilon = 1e-300 is out of range"},
		{map[string]any{"llama.attention.layer_norm_rms_epsilon": nan}, "layer_norm_rms_epsilon = NaN is out of range"},
		{map[string]any{"llama.attention.layer_norm_rms_epsilon": math.Inf(1)}, "layer_norm_rms_epsilon = +Inf is out of range"},
		{map[string]any{"llama.attention.layer_norm_rms_epsilon": float32(-1e-5)}, "layer_norm_rms_epsilon = -1e-05 is out of range"},
		{map[string]any{"llama.rope.freq_base": float32(0)}, "llama.rope.freq_base = 0 is out of range: want a number in [1, 1e+12]"},
		{map[string]any{"llama.rope.freq_base": math.Inf(1)}, "llama.rope.freq_base = +Inf is out of range"},
		{map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(0)}, "llama.rope.scaling.factor = 0 is out of range"},
		{map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 1e9}, "llama.rope.scaling.factor = 1e+09 is out of range"},
		{map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.yarn_beta_fast": float32(nan)}, "llama.rope.scaling.yarn_beta_fast = NaN is out of range"},
		{map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.yarn_beta_slow": float32(-1)}, "llama.rope.scaling.yarn_beta_slow = -1 is out of range"},
		{map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.original_context_length": int32(-4)}, "llama.rope.scaling.original_context_length = -4 is out of range: want 1..16777216"},
		{map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.original_context_length": "long"}, "key llama.rope.scaling.original_context_length is STRING"},
		{map[string]any{"llama.attention.head_count": uint32(0)}, "llama.attention.head_count = 0 is out of range: want 1..16777216"},
		{map[string]any{"llama.attention.head_count_kv": uint64(1 << 40)}, "llama.attention.head_count_kv = 1099511627776 is out of range"},
		{map[string]any{"llama.context_length": int32(-1)}, "llama.context_length = -1 is out of range"},
		{map[string]any{"llama.block_count": uint32(0)}, "llama.block_count = 0 is out of range"},
		{map[string]any{"llama.attention.value_length": "x"}, "key llama.attention.value_length is STRING"},
	} {
		_, err := loadBytes(t, withKeys(t, "tiny-llama", c.set))
		require.ErrorContains(t, err, c.want, "%v", c.set)
	}

	// Values in range still load, and as given.
	m, err := loadBytes(t, withKeys(t, "tiny-llama", map[string]any{
		"llama.rope.scale_linear": float32(2), "llama.attention.layer_norm_rms_epsilon": float32(1e-6), "llama.rope.freq_base": float32(5e5),
	}))
	require.NoError(t, err)
	require.Equal(t, model.RopeScaling{Type: "linear", Factor: 2, BetaFast: 32, BetaSlow: 1, AttnFactor: 1}, m.Rope.Scaling)
	require.Equal(t, float32(1e-6), m.NormEps)
	require.Equal(t, 5e5, m.Rope.Theta)
	m, err = loadBytes(t, withKeys(t, "tiny-llama", map[string]any{"llama.rope.scale_linear": float32(1)}))
	require.NoError(t, err)
	require.Equal(t, "none", m.Rope.Scaling.Type)
}

func TestNilModelCloses(t *testing.T) {
	var m *model.Model
	require.NoError(t, m.Close())
}
