package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// The layer program reaches the points of the table (trace.Points), each
// once and in the table's order, for every family: a dry run of every tiny
// shape, capturing everything, records the points it reaches, with
// attention in separate kernels and in one that captures (the CPU's). A
// run that captures nothing reaches them too (hooks may sit at any), but
// for the attention scores and pattern, which it never makes.
func TestProgramReachesTheTablesPoints(t *testing.T) {
	for _, name := range synth.ShapeNames() {
		if !strings.HasPrefix(name, "tiny-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			m, err := synth.Random(synth.Shapes[name], gguf.F32, 1)
			require.NoError(t, err)
			all := trace.Points(&m.Config)
			everything := Options{Capture: CaptureAll(), Logits: LogitsAll}
			require.Equal(t, all, dryRun(t, m, dryBackend{}, everything))
			require.Equal(t, all, dryRun(t, m, dryBackend{flashCapture: true}, everything))
			unmade := func(name string) bool { _, p := trace.SplitPoint(name); return attentionMap(p) }
			require.Equal(t, slices.DeleteFunc(all, unmade), dryRun(t, m, dryBackend{}, Options{}))
		})
	}
}

// dryRun steps a prefill of a few tokens on a backend that runs no
// kernels, and records the points it reaches in order.
func dryRun(t *testing.T, m *model.Model, b dryBackend, o Options) []string {
	e, err := NewEngine(m, b)
	require.NoError(t, err)
	s, err := e.NewSession(16)
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Start(context.Background(), []int32{1, 2, 3}, o)
	require.NoError(t, err)
	defer r.Close()
	var reached []string
	for r.step() {
		reached = append(reached, r.point)
	}
	require.NoError(t, r.Err())
	return reached
}

// dryBackend runs no kernel: its tensors are only lengths, so that the
// layer program goes through its control flow alone. With flashCapture its
// streams claim to write scores and patterns in flash attention.
type dryBackend struct{ flashCapture bool }

type dryTensor int

func (t dryTensor) Len() int { return int(t) }

type dryMatrix struct{ rows, cols int }

func (w dryMatrix) Rows() int { return w.rows }
func (w dryMatrix) Cols() int { return w.cols }

func (dryBackend) Name() string { return "dry" }
func (dryBackend) Upload(w *model.Weight) (backend.Matrix, error) {
	return dryMatrix{w.Rows, w.Cols}, nil
}
func (b dryBackend) UploadGroup(ws []*model.Weight) ([]backend.Matrix, error) {
	ms := make([]backend.Matrix, len(ws))
	for i, w := range ws {
		ms[i], _ = b.Upload(w)
	}
	return ms, nil
}
func (b dryBackend) NewStream() backend.Stream {
	if b.flashCapture {
		return dryCaptureStream{}
	}
	return dryStream{}
}
func (dryBackend) Close() error { return nil }
func (b dryBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{AttentionCapture: b.flashCapture}
}

// dryStream reads back -1 everywhere: the one value the program reads to
// decide what runs next, a mixture's routing, then has every slot empty.
type dryStream struct{}

func (dryStream) Alloc(_ string, n int) (backend.Tensor, error) { return dryTensor(n), nil }
func (dryStream) Free(backend.Tensor)                           {}
func (dryStream) View(_ backend.Tensor, _, n int) backend.Tensor {
	return dryTensor(n)
}
func (dryStream) Write(backend.Tensor, int, []float32) {}
func (dryStream) Read(_ backend.Tensor, _ int, dst []float32) error {
	for i := range dst {
		dst[i] = -1
	}
	return nil
}
func (s dryStream) ReadBatch(reqs []backend.ReadRequest) error {
	for _, q := range reqs {
		_ = s.Read(q.Src, q.Off, q.Dst)
	}
	return nil
}
func (dryStream) Download(...backend.Tensor)                                               {}
func (dryStream) Sync() error                                                              { return nil }
func (dryStream) Flush()                                                                   {}
func (dryStream) Close()                                                                   {}
func (dryStream) Embed(backend.Tensor, backend.Matrix, []int32)                            {}
func (dryStream) RMSNorm(_, _, _, _ backend.Tensor, _, _ int, _ float32)                   {}
func (dryStream) LayerNorm(_, _, _, _, _ backend.Tensor, _, _ int, _ float32)              {}
func (dryStream) NormApply(_, _, _, _, _ backend.Tensor, _, _ int, _ bool)                 {}
func (dryStream) MatMul(backend.Tensor, int, ...backend.Proj)                              {}
func (dryStream) SetPrecision(backend.Precision)                                           {}
func (dryStream) Rope(_, _ backend.Tensor, _, _, _, _ int, _ *model.Rope)                  {}
func (dryStream) AttnScores(*backend.Attention)                                            {}
func (dryStream) Softmax(_, _ backend.Tensor, _, _ int)                                    {}
func (dryStream) AttnMix(*backend.Attention)                                               {}
func (dryStream) FlashAttention(*backend.Attention)                                        {}
func (dryStream) Add(_, _, _ backend.Tensor, _ int)                                        {}
func (dryStream) SwiGLU(_, _, _ backend.Tensor, _ int)                                     {}
func (dryStream) GELU(_, _ backend.Tensor, _ int)                                          {}
func (dryStream) GeGLU(_, _, _ backend.Tensor, _ int)                                      {}
func (dryStream) Softcap(backend.Tensor, int, float32)                                     {}
func (dryStream) Copy(backend.Tensor, int, backend.Tensor, int, int)                       {}
func (dryStream) Edit(backend.Tensor, backend.Edit)                                        {}
func (dryStream) Argmax(_, _ backend.Tensor, _, _ int)                                     {}
func (dryStream) Rank(_, _ backend.Tensor, _, _, _ int)                                    {}
func (dryStream) RowNorms(_, _ backend.Tensor, _, _, _ int)                                {}
func (dryStream) Route(_, _, _ backend.Tensor, _, _, _ int)                                {}
func (dryStream) GatherRows(_, _ backend.Tensor, _ []int32, _ int)                         {}
func (dryStream) ScatterRows(_, _ backend.Tensor, _ []int32, _ int)                        {}
func (dryStream) MatMulExperts(backend.Tensor, []backend.ExpertRun, ...backend.ExpertProj) {}
func (dryStream) WeightedSum(_, _, _ backend.Tensor, _, _, _ int)                          {}

type dryCaptureStream struct{ dryStream }

func (dryCaptureStream) FlashAttentionCapture(*backend.Attention) bool { return true }
