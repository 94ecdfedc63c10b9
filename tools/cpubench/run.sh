#!/usr/bin/env bash
# Issue #18's side by side on this machine's cores, in one command: PyTorch
# float32 on OpenBLAS (../shared/bench/torch_cpu_anchor.py, OpenBLAS as it
# detects the processor, as the issue prescribes) before and after Strata's
# CPU prefills of the same shapes (quantized types at both precisions: fast
# is int8 x where the CPU has AVX-512 VNNI); NumPy's sgemm beside Strata's
# GEMM; and what capturing every point costs. Needs Go, python3-torch and
# libopenblas0-pthread (Debian). From the repository root:
#
#   tools/cpubench/run.sh [OUT]      # results in OUT (default /tmp/cpubench)
#
# THREADS (default: all cores; every side gets as many), ITERS (default 5),
# PYTHON (default Debian's /usr/bin/python3, which has python3-torch) and
# ANCHOR (the anchor script) override. It exits non-zero if any step fails.
set -u -o pipefail
out=${1:-/tmp/cpubench}
threads=${THREADS:-$(nproc)}
iters=${ITERS:-5}
anchor=${ANCHOR:-../shared/bench/torch_cpu_anchor.py}
python=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
[ -f "$anchor" ] || { echo "cpubench: $anchor not found (it is in ../shared)"; exit 1; }
go build -o "$out/strata" ./cmd/strata || exit 1
go test -c -o "$out/cpu.test" ./gpu/cpu || exit 1
"$python" -c 'import torch, numpy' || { echo "cpubench: $python lacks torch or numpy (apt-get install python3-torch libopenblas0-pthread)"; exit 1; }
failed=0
step() { "$@" || { echo "cpubench: failed: $*"; failed=1; }; }
torch() { step env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$python" "$anchor" "$@"; }
bench() { step env GOMAXPROCS="$threads" "$out/strata" bench --backend cpu --iters "$iters" --json "$out/strata-$1-$2-$3-${4:-exact}.json" --shape "$1" --type "$2" --tokens "$3" --precision "${4:-exact}"; }
{
echo "# $(date -u) on $(nproc) cores, $threads threads; $(git describe --always --dirty)"
echo "## default model's shape (tiny-qwen3): PyTorch, Strata F32 and F16, PyTorch again"
torch tiny-qwen3 "$threads" 64,256
bench tiny-qwen3 F32 64,256
bench tiny-qwen3 F16 64,256
torch tiny-qwen3 "$threads" 64,256
echo "## bonsai-1.7b: PyTorch, Strata by type, PyTorch again"
torch bonsai-1.7b "$threads" 64,256
bench bonsai-1.7b F32 64,256
bench bonsai-1.7b F16 64,256
for ty in Q8_0 Q4_0 Q4_K Q1_0_g128 TQ2_0_g128; do bench bonsai-1.7b $ty 64 exact,fast; done
torch bonsai-1.7b "$threads" 64
echo "## GEMM, x[64, 2048] times a 2048 x 2048 weight: NumPy (OpenBLAS as detected), Strata, NumPy again"
gemm() { step env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS="$threads" OMP_WAIT_POLICY=PASSIVE "$python" -c '
import time, numpy as np
x, w = np.random.rand(64, 2048).astype(np.float32), np.random.rand(2048, 2048).astype(np.float32)
for _ in range(20): x @ w.T
ts = []
for _ in range(200):
    s = time.perf_counter(); x @ w.T; ts.append(time.perf_counter() - s)
ts.sort(); print("numpy sgemm 64x2048x2048: %.1f GFLOP/s (median of 200)" % (2 * 64 * 2048 * 2048 / ts[100] / 1e9))'; }
gemm
step env GOMAXPROCS="$threads" "$out/cpu.test" -test.run '^$' -test.bench 'MatMul/T=64/F32$' -test.benchtime 2s
gemm
echo "## capture all against none, default model's shape, alternated in one loop"
step env GOMAXPROCS="$threads" "$out/cpu.test" -test.run '^$' -test.bench CaptureCost -test.benchtime 200x
exit $failed
} 2>&1 | tee "$out/summary.txt"
