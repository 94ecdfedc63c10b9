// Package backend is the contract between the engine and the devices that
// run it, as database/sql/driver is to database/sql: what an implementer
// writes (Backend, Stream and its kernels), not what a user calls. The
// engine runs its one layer program on any Backend; backend/cpu and
// backend/vulkan implement it and never hold a copy of the program.
package backend

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/stratalab/strata/model"
)

// Tensor is a float32 buffer owned by a backend, on its device.
type Tensor interface {
	Len() int
}

// Matrix is a weight uploaded to a backend, kept resident in its packed format.
type Matrix interface {
	Rows() int
	Cols() int
}

// Backend owns a device: resident weights and streams that run kernels on it.
type Backend interface {
	// Name says which device runs the kernels, for users and benchmarks.
	Name() string
	// Upload makes a weight resident; called once per weight per engine.
	Upload(w *model.Weight) (Matrix, error)
	// UploadGroup makes several weights resident together, in one
	// allocation where the backend can: a mixture's experts, which would
	// otherwise need more allocations than a GPU allows.
	UploadGroup(ws []*model.Weight) ([]Matrix, error)
	// NewStream starts an independent command stream; one per session, so
	// sessions may run from different goroutines.
	NewStream() Stream
	// Capabilities says what the backend offers beyond the kernels every
	// Stream has.
	Capabilities() Capabilities
	Close() error
}

// Capabilities is what a backend offers beyond the kernels every Stream
// has. A wrapper around a backend says what its own streams offer: a
// stream type that embeds Stream hides the optional methods of the one it
// wraps.
type Capabilities struct {
	// DeviceMemory says tensors live in device memory: traces stay there
	// until read. Without it (the CPU) traces are handed over in Go memory
	// as the prefill ends.
	DeviceMemory bool
	// HostTensors says the streams' tensors are Go memory and the streams
	// implement HostTensors.
	HostTensors bool
	// AttentionCapture says the streams implement AttentionCapture.
	AttentionCapture bool
	// ExpertRouting says the streams implement ExpertRouting.
	ExpertRouting bool
}

// Stream records kernels in order. A CPU stream may run each as it is
// recorded; a GPU stream collects them into one submission until Sync (or
// Flush). Kernel methods do not return errors: a stream keeps its first error
// and Sync returns it, so that recording never waits on the device. The
// error is the request's: after Sync has returned it, the stream works again.
type Stream interface {
	// Alloc returns a zeroed tensor of n float32s; name appears in errors.
	Alloc(name string, n int) (Tensor, error)
	// Free releases t; its views are not to be used after it.
	Free(t Tensor)
	// View is elements [off, off+n) of t as a tensor of its own, which
	// kernels write in place: captured points go straight into their places
	// in the trace's arenas. It is nil where the device cannot bind a range
	// starting at off (at multiples of SlotAlign elements it always can).
	View(t Tensor, off, n int) Tensor
	// Write copies host data into dst at element offset off (ordered with kernels).
	Write(dst Tensor, off int, src []float32)
	// Read copies from src at off into dst; it syncs first.
	Read(src Tensor, off int, dst []float32) error
	// ReadBatch copies each request's range to the host after the work
	// recorded so far, in as few submissions as the backend's staging
	// allows: what a lazily read trace uses.
	ReadBatch(reqs []ReadRequest) error
	// Download asks for tensors to come back to the host with the next
	// Sync, so that reading many tensors costs one submission, not one each.
	Download(ts ...Tensor)
	// Sync submits what was recorded and waits for it.
	Sync() error
	// Flush submits what was recorded without waiting for it, so that the
	// device starts while recording goes on; it blocks only to bound the
	// work in flight. A cancellable run flushes each layer.
	Flush()
	// Close waits for the stream's work and releases what it holds now,
	// rather than when it is garbage; later calls fail.
	Close()

	// Embed gathers rows ids of table into dst [len(ids), table.Cols()].
	Embed(dst Tensor, table Matrix, ids []int32)
	// RMSNorm normalises rows of dim elements: dst = src / s * gain with
	// s = sqrt(mean(src^2) + eps), which it writes to scale[row] unless
	// scale is nil (TransformerLens's hook_scale).
	RMSNorm(dst, src, gain, scale Tensor, rows, dim int, eps float32)
	// LayerNorm normalises rows of dim elements to zero mean and unit
	// variance: dst = (src - mean) / s * gain + bias with s = sqrt(var +
	// eps), which it writes to scale[row] unless scale is nil.
	LayerNorm(dst, src, gain, bias, scale Tensor, rows, dim int, eps float32)
	// NormApply normalises rows by given scales: dst = (src - mean) /
	// scale[row] * gain + bias when center (LayerNorm), src / scale[row] *
	// gain otherwise (bias nil): a norm whose hook_scale was edited.
	NormApply(dst, src, scale, gain, bias Tensor, rows, dim int, center bool)
	// MatMul computes dst = x W^T (+ bias) for each projection, all reading
	// the same rows of x; backends fuse them into one pass where they can.
	MatMul(x Tensor, rows int, outs ...Proj)
	// SetPrecision sets how the MatMuls and flash attention recorded after
	// it multiply. A backend without a faster way computes in float32
	// either way.
	SetPrecision(p Precision)
	// Rope writes to dst the rows [rows, heads, headDim] of src rotated for
	// positions pos0...; dst may be src.
	Rope(dst, src Tensor, rows, heads, headDim, pos0 int, r *model.Rope)
	// AttnScores writes scaled, causally masked scores [Heads, T, Pos0+T].
	AttnScores(a *Attention)
	// Softmax normalises rows of n elements: dst = softmax(src).
	Softmax(dst, src Tensor, rows, n int)
	// AttnMix writes Z = Pattern V.
	AttnMix(a *Attention)
	// FlashAttention computes Z directly, without materialising scores.
	FlashAttention(a *Attention)
	// Add computes dst[i] = a[i] + b[i] for i < n; dst may be a.
	Add(dst, a, b Tensor, n int)
	// SwiGLU computes dst = silu(gate) * up over n elements.
	SwiGLU(dst, gate, up Tensor, n int)
	// GELU computes dst = gelu(src) over n elements with GPT-2's tanh
	// approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
	GELU(dst, src Tensor, n int)
	// GeGLU computes dst = gelu(gate) * up over n elements (GELU as above).
	GeGLU(dst, gate, up Tensor, n int)
	// Softcap computes x = cap * tanh(x / cap) in place over n elements.
	Softcap(x Tensor, n int, cap float32)
	// Copy moves n elements from src at srcOff to dst at dstOff.
	Copy(dst Tensor, dstOff int, src Tensor, srcOff, n int)
	// Edit changes a strided view of t in place; interventions are built from it.
	Edit(t Tensor, e Edit)
	// Argmax writes, for each of rows rows of n elements, the index of the
	// largest (as a float32, exact below 2^24; the first on ties), or -1
	// where the row holds a NaN.
	Argmax(dst, src Tensor, rows, n int)
	// Rank writes, for each of rows rows of n elements, how many are larger
	// than the row's element col (0 when it is the largest), as a float32.
	Rank(dst, src Tensor, rows, n, col int)
	// RowNorms writes the L2 norm of each of rows rows of n elements of src,
	// starting at element off.
	RowNorms(dst, src Tensor, off, rows, n int)

	// Route picks each of rows tokens' experts from its router logits
	// [rows, experts]: the softmax's top k, renormalised to sum to 1
	// (ties to the lower index). It writes their ids (as float32) and
	// weights, [rows, k] each, best first; -1 and 0 for a slot only
	// experts of probability 0 could fill (every slot when every logit is
	// -Inf: each expert ablated). A row with a NaN logit gets experts
	// 0..k-1 at NaN weights.
	Route(ids, weights, logits Tensor, rows, experts, k int)
	// GatherRows copies row rows[i] of src to row i of dst, cols wide.
	GatherRows(dst, src Tensor, rows []int32, cols int)
	// ScatterRows copies row i of src to row rows[i] of dst, cols wide.
	ScatterRows(dst, src Tensor, rows []int32, cols int)
	// MatMulExperts computes, for each run and projection, the run's rows
	// of Dst = x W[run.Expert]^T: a mixture's experts, each on the rows of
	// the tokens routed to it, in one pass where the backend can (the
	// weights of one UploadGroup).
	MatMulExperts(x Tensor, runs []ExpertRun, outs ...ExpertProj)
	// WeightedSum writes dst[r] = sum over j < k of weights[r*k+j] *
	// src[r*k+j] for rows rows of cols elements: each token's experts'
	// outputs, mixed.
	WeightedSum(dst, src, weights Tensor, rows, k, cols int)
}

// ReadRequest is one range of a ReadBatch: len(Dst) elements of Src from Off.
type ReadRequest struct {
	Src Tensor
	Off int
	Dst []float32
}

// SlotAlign is the alignment of each captured point in its arena, in
// elements: 256 bytes, the largest minStorageBufferOffsetAlignment Vulkan
// allows, so that any device can bind a point as a range of its arena.
const SlotAlign = 64

// HostTensors is implemented by the streams of a backend whose
// Capabilities say HostTensors (the CPU's): a finished prefill's arenas become its trace as they are, not
// copied, and the session makes new ones for its next prefill.
type HostTensors interface {
	HostData(t Tensor) []float32
	// AllocArena is Alloc for a capture arena, which a finished run writes
	// whole: its elements may be a collected trace's, not zeros.
	AllocArena(name string, n int) (Tensor, error)
	// RecycleArena takes back an arena of a closed trace that nothing
	// refers to any more, for a later AllocArena.
	RecycleArena(t Tensor)
}

// AttentionCapture is implemented by the streams of a backend whose
// Capabilities say AttentionCapture, whose flash attention can also write
// the scores and pattern it computes (the CPU's; Vulkan's on cooperative
// matrices): capturing them then costs little more than their
// writes, where AttnScores, Softmax and AttnMix pass over each.
type AttentionCapture interface {
	// FlashAttentionCapture writes Z, a.Scores and a.Pattern as AttnScores,
	// Softmax and AttnMix do (the CPU's bit for bit, a GPU's to their
	// precision) and returns true, or returns false, having recorded
	// nothing, where it has no such kernel for a.
	FlashAttentionCapture(a *Attention) bool
}

// ExpertRouting is implemented by the streams of a backend whose
// Capabilities say ExpertRouting (Vulkan's): they line a mixture's tokens
// up by expert on the device, so that a layer of experts needs no
// read-back of its routing. A routing tensor (RoutingLen elements, as
// SortExperts writes it) holds each expert's count of slots and where its
// rows start, then the slots in expert order; the routed rows of x, and of
// the experts' outputs, are in that order.
type ExpertRouting interface {
	// SortExperts writes routing for ids [rows, k] (Route's: each an
	// expert below experts, or -1 for an empty slot; any other value
	// counts as empty): each expert's slots in the order of the slots
	// (token by token).
	SortExperts(routing, ids Tensor, rows, k, experts int)
	// GatherRouted copies, for the i-th routed slot s, row s / k of src to
	// row i of dst, cols wide; rows past the routed slots are left.
	GatherRouted(dst, src, routing Tensor, slots, experts, k, cols int)
	// ScatterRouted copies row i of src to row s of dst for the i-th
	// routed slot s, cols wide.
	ScatterRouted(dst, src, routing Tensor, slots, experts, cols int)
	// MatMulExpertsRouted is MatMulExperts with the runs of routing, of
	// slots rows at most. It returns false, having recorded nothing, where
	// it cannot take the weights (Routable).
	MatMulExpertsRouted(x, routing Tensor, slots int, outs ...ExpertProj) bool
	// Routable reports whether MatMulExpertsRouted takes these experts'
	// weights.
	Routable(w []Matrix) bool
}

// RoutingLen is the elements of a routing tensor for slots slots among
// experts experts: a count and a first row for each expert, and the slots.
func RoutingLen(slots, experts int) int { return 2*experts + slots }

// ErrBackendClosed is wrapped by the errors of a backend used after Close.
var ErrBackendClosed = errors.New("the backend is closed")

// Proj is one projection of a MatMul: Dst [rows, W.Rows()] = x W^T + Bias.
type Proj struct {
	W    Matrix
	Dst  Tensor
	Bias Tensor // nil for none
}

// ExpertRun is one expert's rows of a MatMulExperts: rows [First,
// First+Rows) of x and of each Dst.
type ExpertRun struct{ Expert, First, Rows int }

// ExpertProj is one projection of a MatMulExperts: W[e] is expert e's
// weight, Dst [rows of x, W[e].Rows()] its output.
type ExpertProj struct {
	W   []Matrix
	Dst Tensor
}

// Attention describes causal grouped-query attention of T new queries at
// positions Pos0.. over the cache's first Pos0+T keys. A query at position
// p sees key j when j <= p and, with a Window, p - j < Window. Scores are
// Scale * q.k, then Softcap * tanh(score / Softcap) when Softcap is not 0.
type Attention struct {
	Q       Tensor // [T, Heads, HeadDim], rotated
	K, V    Tensor // caches [capacity, KVHeads, HeadDim]
	Z       Tensor // [T, Heads, HeadDim]
	Scores  Tensor // [Heads, T, Pos0+T]
	Pattern Tensor // [Heads, T, Pos0+T]
	T, Pos0 int
	Heads   int
	KVHeads int
	HeadDim int
	Scale   float32
	Window  int     // 0: every key up to the query
	Softcap float32 // 0: none
}

// Visible reports whether the query at position p sees the key at j.
func (a *Attention) Visible(p, j int) bool { return j <= p && (a.Window == 0 || p-j < a.Window) }

// Keys is the number of key positions each query row spans.
func (a *Attention) Keys() int { return a.Pos0 + a.T }

// EditOp is what an Edit does to each element of its view.
type EditOp int

const (
	EditFill  EditOp = iota // x = Scalar
	EditScale               // x *= Scalar
	EditSet                 // x = src
	EditAdd                 // x += Scalar * src
	EditMean                // each row = mean of the view's rows
)

// Edit names a view of a tensor (Rows rows of Cols elements, row r at
// Off + r*Stride) and an operation on it. Src rows are read at SrcOff +
// r*SrcStride; SrcStride 0 broadcasts one row to all.
type Edit struct {
	Op                EditOp
	Off, Rows, Cols   int
	Stride            int
	Scalar            float32
	Src               Tensor
	SrcOff, SrcStride int
}

// Precision is how a prefill's matrix products multiply.
type Precision int

const (
	// PrecisionExact keeps float32's accuracy (the default): the parity
	// tests hold every capture point to the CPU backend within 2e-5.
	PrecisionExact Precision = iota
	// PrecisionFast rounds both inputs of each tiled product (more than 8
	// rows) to float16 and accumulates in float32, one tensor-core product
	// per step, as a 16-bit PyTorch run does. Values outside float16's
	// range stay float32. Matrix-vector products (8 rows or fewer) are
	// bound by memory, not arithmetic, and stay float32. On the CPU, with
	// AVX-512 VNNI or AVX2, quantized weights multiply as their integer
	// codes with x rounded to int8 per block (as llama.cpp's q8 products
	// do): one to two orders of magnitude coarser than float16, 2-3% of a
	// point's largest value after 4 layers; float weights stay float32.
	PrecisionFast
)

func (p Precision) String() string {
	switch p {
	case PrecisionExact:
		return "exact"
	case PrecisionFast:
		return "fast"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision reads "exact" or "fast".
func ParsePrecision(s string) (Precision, error) {
	for _, p := range []Precision{PrecisionExact, PrecisionFast} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%q is not a precision: want exact or fast", s)
}

// Check reports whether the edit is well formed for a view of n elements
// and its source, if the operation reads one: a known operation, rows that
// do not overlap, and every element it touches inside the tensor. It works
// in 64-bit arithmetic with overflow checks, so a huge or negative field is
// refused rather than wrapped. The engine checks every edit of a hook with
// it; backends check edits they are given directly with it too, so both
// refuse the same edits.
func (e *Edit) Check(n int) error {
	switch e.Op {
	case EditFill, EditScale, EditSet, EditAdd, EditMean:
	default:
		return fmt.Errorf("edit: unknown operation EditOp(%d) (EditFill, EditScale, EditSet, EditAdd or EditMean)", e.Op)
	}
	if e.Rows <= 0 || e.Cols <= 0 {
		return fmt.Errorf("edit: view of %d rows x %d: both must be at least 1", e.Rows, e.Cols)
	}
	if e.Rows > 1 && e.Stride < e.Cols {
		return fmt.Errorf("edit: stride %d is less than the row length %d: rows would overlap (or run backwards)", e.Stride, e.Cols)
	}
	if end, ok := viewEnd(e.Off, e.Rows, e.Stride, e.Cols); !ok || end > uint64(max(n, 0)) {
		return fmt.Errorf("edit of %d rows x %d at offset %d stride %d falls outside the point's %d elements", e.Rows, e.Cols, e.Off, e.Stride, n)
	}
	if e.Op != EditSet && e.Op != EditAdd {
		return nil
	}
	if e.Src == nil {
		return fmt.Errorf("edit: operation %d needs a source (Src or DeviceEdit.Data)", e.Op)
	}
	if end, ok := viewEnd(e.SrcOff, e.Rows, e.SrcStride, e.Cols); !ok || end > uint64(e.Src.Len()) {
		return fmt.Errorf("edit source of %d elements is too short for %d rows x %d at offset %d stride %d", e.Src.Len(), e.Rows, e.Cols, e.SrcOff, e.SrcStride)
	}
	return nil
}

// viewEnd is off + (rows-1)*stride + cols, the end of a strided view;
// ok is false when a field is negative or the sum passes 2^63.
func viewEnd(off, rows, stride, cols int) (uint64, bool) {
	if off < 0 || rows < 1 || stride < 0 || cols < 0 {
		return 0, false
	}
	hi, span := bits.Mul64(uint64(rows-1), uint64(stride))
	end, c1 := bits.Add64(span, uint64(off), 0)
	end, c2 := bits.Add64(end, uint64(cols), 0)
	if hi != 0 || c1 != 0 || c2 != 0 || end > 1<<63-1 {
		return 0, false
	}
	return end, true
}

// CheckExperts checks a MatMulExperts before it reaches a device: every run
// within x's rows and naming an expert each projection has, every weight
// there, as wide as the others, and every output long enough. It returns x's
// row width.
func CheckExperts(x Tensor, runs []ExpertRun, outs []ExpertProj) (cols int, err error) {
	if x == nil || len(outs) == 0 || len(outs[0].W) == 0 || outs[0].W[0] == nil {
		return 0, fmt.Errorf("experts' matmul: x is nil, or no projection or expert is given")
	}
	cols = outs[0].W[0].Cols()
	for i, o := range outs {
		if o.Dst == nil || len(o.W) == 0 || o.W[0] == nil || o.W[0].Rows() <= 0 {
			return 0, fmt.Errorf("experts' matmul: projection %d has no output, no experts or a weight of no rows", i)
		}
		for e, w := range o.W {
			if w == nil {
				return 0, fmt.Errorf("experts' matmul: projection %d's expert %d has no weight", i, e)
			}
			if w.Cols() != cols || w.Rows() != o.W[0].Rows() {
				return 0, fmt.Errorf("experts' matmul: projection %d's expert %d is %d x %d, where the first is %d x %d and x %d wide",
					i, e, w.Rows(), w.Cols(), o.W[0].Rows(), o.W[0].Cols(), cols)
			}
		}
	}
	if cols <= 0 {
		return 0, fmt.Errorf("experts' matmul: weights of %d columns", cols)
	}
	xRows := x.Len() / cols
	for _, r := range runs {
		if r.First < 0 || r.Rows < 0 || r.First > xRows-r.Rows {
			return 0, fmt.Errorf("experts' matmul: expert %d's rows %d..%d are outside x's %d rows", r.Expert, r.First, r.First+r.Rows, xRows)
		}
		for i, o := range outs {
			if r.Expert < 0 || r.Expert >= len(o.W) {
				return 0, fmt.Errorf("experts' matmul: run of expert %d, where projection %d has %d experts", r.Expert, i, len(o.W))
			}
			if n := o.W[0].Rows(); o.Dst.Len()/n < r.First+r.Rows {
				return 0, fmt.Errorf("experts' matmul: projection %d's output of %d elements is too short for rows up to %d of %d", i, o.Dst.Len(), r.First+r.Rows, n)
			}
		}
	}
	return cols, nil
}
