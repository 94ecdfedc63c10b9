package engine_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
)

// A batch's traces equal its prompts' run one at a time bit for bit on the
// CPU, for every family: rows are independent in every product, norm and
// MLP, and attention runs per prompt with the same kernels.
func TestBatchEqualsPromptsOneAtATime(t *testing.T) {
	for _, shape := range synth.ShapeNames() {
		if synth.Shapes[shape].Layers > 6 { // the tiny ones
			continue
		}
		t.Run(shape, func(t *testing.T) {
			enginetest.CheckBatch(t, newEngine(t, genModel(t, shape, gguf.Q8_0, 11)), 0)
		})
	}
}

func TestStories260KBatchEqualsPromptsOneAtATime(t *testing.T) {
	const path = "/work/shared/models/stories260K.gguf"
	if _, err := os.Stat(path); err != nil {
		t.Skip("no ", path)
	}
	m, err := model.Open(path)
	require.NoError(t, err)
	defer m.Close()
	enginetest.CheckBatch(t, newEngine(t, m), 0)
}

// Split over two tiers, the layers' rows go from tier to tier packed, and
// the head takes each prompt's rows on the last.
func TestTieredBatchEqualsPromptsOneAtATime(t *testing.T) {
	for _, shape := range []string{"tiny-gpt2", "tiny-qwen3moe"} {
		t.Run(shape, func(t *testing.T) {
			m := genModel(t, shape, gguf.Q8_0, 4)
			p := engine.Placement{Embed: 0, Layers: []int{0, 1}, Head: 1}
			e, err := engine.NewTieredEngine(m, []backend.Backend{cpu.New(0), cpu.New(0)}, p)
			require.NoError(t, err)
			enginetest.CheckBatch(t, e, 0)
		})
	}
}

func TestBatchRefusesBadRequests(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.Q8_0, 1))
	ctx := context.Background()
	_, err := e.PrefillBatch(ctx, nil, engine.Options{})
	require.EqualError(t, err, "engine: batch of no prompts")
	_, err = e.PrefillBatch(ctx, [][]int32{{1, 2}, {}}, engine.Options{})
	require.EqualError(t, err, "engine: prompt 1 of the batch is empty")
	_, err = e.PrefillBatch(ctx, [][]int32{{1, 2}, {3, 512}}, engine.Options{})
	require.EqualError(t, err, "engine: prompt 1: token 512 at index 1 is outside the vocabulary of 512 (ids are 0..511)")
	_, err = e.PrefillBatch(ctx, [][]int32{make([]int32, 513)}, engine.Options{})
	require.ErrorIs(t, err, engine.ErrCacheFull)
}

// A session that ran a batch is at position 0 with its capacity as it was,
// and prefills as a new one; a refused batch leaves it where it was.
func TestSessionAfterBatch(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-qwen3", gguf.Q8_0, 2))
	ctx, o := context.Background(), engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll}
	s, err := e.NewSession(16)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(ctx, testTokens[:3], o)
	require.NoError(t, err)
	_, err = s.PrefillBatch(ctx, [][]int32{testTokens[:2], make([]int32, 17)}, o)
	require.ErrorIs(t, err, engine.ErrCacheFull, "a prompt longer than the session's capacity")
	_, err = s.PrefillBatch(ctx, [][]int32{testTokens[:2], {1}}, engine.Options{Capture: engine.CaptureOf("blocks.0.attn.hook_pattern"), Budget: 64})
	require.ErrorIs(t, err, engine.ErrOverBudget)
	require.Equal(t, 3, s.Pos(), "a refused batch leaves the session as it was")

	trs, err := s.PrefillBatch(ctx, enginetest.BatchPrompts, o) // 27 tokens, past the capacity
	require.NoError(t, err)
	require.Len(t, trs, len(enginetest.BatchPrompts))
	require.Equal(t, 0, s.Pos())
	require.Equal(t, 16, s.Capacity(), "a batch's cache is no room for a longer prompt")
	_, err = s.Prefill(ctx, make([]int32, 17), o)
	require.ErrorIs(t, err, engine.ErrCacheFull)
	require.NoError(t, s.Grow(20))

	got, err := s.Prefill(ctx, testTokens, o)
	require.NoError(t, err)
	want := prefill(t, e, testTokens, o)
	for _, name := range want.Names {
		enginetest.RequireBits(t, want.Tensor(name).Data, got.Tensor(name).Data, name)
	}
}

// A cancelled batch returns the context's error, and its session runs the
// next batch as a new one would.
func TestCancelledBatch(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-llama", gguf.Q8_0, 5))
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post")}
	_, err = s.PrefillBatch(ctx, enginetest.BatchPrompts, o)
	require.ErrorIs(t, err, context.Canceled)
	got, err := s.PrefillBatch(context.Background(), enginetest.BatchPrompts, o)
	require.NoError(t, err)
	want, err := e.PrefillBatch(context.Background(), enginetest.BatchPrompts, o)
	require.NoError(t, err)
	for i := range want {
		for _, name := range want[i].Names {
			enginetest.RequireBits(t, want[i].Tensor(name).Data, got[i].Tensor(name).Data, name)
		}
	}
}

// A batch's estimate counts every prompt: a KV cache part for each and the
// captures of all their rows; a batch of one is a prefill's estimate.
func TestEstimateBatch(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q8_0, 1)
	c := &m.Config
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsLast}
	require.Equal(t, engine.EstimateMemory(c, 9, 0, 9, o), engine.EstimateBatch(c, []int{9}, o))
	one, three := engine.EstimateBatch(c, []int{9}, o), engine.EstimateBatch(c, []int{9, 9, 9}, o)
	require.Equal(t, 3*one.Cache, three.Cache)
	// resid_post is [T, d_model] a layer, in an arena of its own: 27 rows' worth.
	require.Equal(t, int64(4*27*c.DModel*c.Layers), three.Capture)
	require.Greater(t, three.Scratch, one.Scratch)
	require.Equal(t, int64(engine.MaxEstimate), engine.EstimateBatch(c, []int{1 << 40, 1 << 40}, o).Cache)
}

// MicroBatches fills each run in order as far as the budget, or the limit,
// allows, and names a prompt that fits in none.
func TestMicroBatches(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q8_0, 1)
	c := &m.Config
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsLast}
	row := int64(4 * c.DModel * c.Layers) // the capture of a row
	lens := []int{4, 3, 2, 5, 1}
	ends, err := engine.MicroBatches(c, lens, o, 0)
	require.NoError(t, err)
	require.Equal(t, []int{5}, ends, "the default budget holds them all")
	o.Budget = 7 * row
	ends, err = engine.MicroBatches(c, lens, o, 0)
	require.NoError(t, err)
	require.Equal(t, []int{2, 4, 5}, ends, "4+3, 2+5, then 1")
	o.Budget = 4 * row
	_, err = engine.MicroBatches(c, lens, o, 0)
	require.ErrorIs(t, err, engine.ErrOverBudget)
	require.ErrorContains(t, err, "prompt 3 of the batch (5 tokens) alone captures")
	o.Budget = 0
	limit := engine.EstimateBatch(c, []int{6}, o).Total()
	ends, err = engine.MicroBatches(c, lens, o, limit)
	require.NoError(t, err)
	for start, i := 0, 0; i < len(ends); i++ {
		require.LessOrEqual(t, engine.EstimateBatch(c, lens[start:ends[i]], o).Total(), limit)
		if ends[i] < len(lens) {
			require.Greater(t, engine.EstimateBatch(c, lens[start:ends[i]+1], o).Total(), limit, "each run as long as fits")
		}
		start = ends[i]
	}
	_, err = engine.MicroBatches(c, lens, o, limit/10)
	require.ErrorContains(t, err, "prompt 0 of the batch (4 tokens) alone needs")
}

// PerPrompt gives each prompt of a batch its own hook, in micro-batches
// too: the batch equals each prompt run alone with its hook, bit for bit.
func TestPerPromptHooks(t *testing.T) {
	e := newEngine(t, genModel(t, "tiny-qwen3", gguf.Q8_0, 3))
	c := &e.Model.Config
	ctx, prompts := context.Background(), enginetest.BatchPrompts
	zo := engine.Options{Capture: engine.CaptureOf("blocks.*.attn.hook_z"), Logits: engine.LogitsNone}
	var steer, patch []engine.Hook
	vec := make([]float32, c.DModel)
	for i := range vec {
		vec[i] = float32(i%5) - 2
	}
	for i, p := range prompts {
		steer = append(steer, engine.AddVector("blocks.1.hook_resid_pre", vec, float32(i+1), []int{-1}))
		// Each prompt's source is another run of itself, with its head 0 zeroed.
		src := prefill(t, e, p, engine.Options{Capture: zo.Capture, Logits: zo.Logits, Hooks: []engine.Hook{engine.AblateHead(0, 0)}})
		patch = append(patch, engine.PatchHead(0, 0, src))
	}
	o := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsAll,
		Hooks: []engine.Hook{engine.PerPrompt(steer...), engine.PerPrompt(patch...)}}
	for _, budget := range []int64{0, engine.EstimateBatch(c, []int{len(prompts[0])}, o).Capture} {
		o.Budget = budget
		got, err := e.PrefillBatch(ctx, prompts, o)
		require.NoError(t, err)
		for i, p := range prompts {
			one := o
			one.Hooks = []engine.Hook{steer[i], patch[i]}
			want := prefill(t, e, p, one)
			for _, name := range want.Names {
				enginetest.RequireBits(t, want.Tensor(name).Data, got[i].Tensor(name).Data, "budget %d, prompt %d, %s", budget, i, name)
			}
		}
	}
	_, err := e.PrefillBatch(ctx, prompts[:2], o)
	require.EqualError(t, err, `engine: PerPrompt hook at "blocks.1.hook_resid_pre" has 4 hooks for 2 prompts: give one for each prompt`)
	_, err = e.PrefillBatch(ctx, prompts, engine.Options{Hooks: []engine.Hook{engine.PerPrompt(steer[0], patch[0])}})
	require.ErrorContains(t, err, `PerPrompt's hooks are at "blocks.1.hook_resid_pre" and "blocks.0.attn.hook_z"`)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(ctx, prompts[0], o)
	require.ErrorContains(t, err, "has 4 hooks for 1 prompts")
}
