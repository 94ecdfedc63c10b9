#!/usr/bin/env bash
# Tiers on one H200 (issue 17): two logical Vulkan devices opened on the
# one GPU. It runs the tier tests, checks that a bonsai-8b-shape model
# split over two tiers traces the same bits as whole, and benchmarks both.
# It needs no Go: build the binaries first, from the repository root:
#
#   CGO_ENABLED=0 go build -o .devrun/strata ./cmd/strata
#   CGO_ENABLED=0 go build -o .devrun/cmptrace ./tools/tiers/cmptrace
#   CGO_ENABLED=0 go test -c -o .devrun/vulkan.test ./gpu/vulkan
#
# then run it from the root with OUT set to the results folder:
#
#   OUT=/some/dir tools/tiers/h200.sh
#
# SHAPE, BENCH_TOKENS and DEVICE (a Vulkan index) override the model shape,
# the benchmark's lengths and the GPU found, for a dry run elsewhere:
#
#   OUT=/tmp/o SHAPE=tiny-qwen3 BENCH_TOKENS=1,16 DEVICE=0 tools/tiers/h200.sh
#
# Results: $OUT/summary.txt (each step and its outcome), tier-tests.txt,
# plan.txt, equal.txt, bench-one.txt/json and bench-two.txt/json. It takes
# about two to three minutes; each step has its own time limit.
set -uo pipefail
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
root=$(pwd)
bin=$root/.devrun
for b in strata cmptrace vulkan.test; do
	[ -x "$bin/$b" ] || { echo "h200.sh: $bin/$b is missing: build it first (see the top of this script)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
# step NAME SECONDS CMD...: runs CMD with a time limit and notes the outcome.
step() {
	local name=$1 limit=$2
	shift 2
	local start=$SECONDS
	timeout "$limit" "$@"
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
	[ $rc -eq 0 ] || failed=1
	return $rc
}
: >"$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv >"$OUT/gpu.txt" 2>&1

# The tier tests, every case (not -short): two logical devices, random
# placements, captures, hooks, steps and a cancel on the second tier.
step tier-tests 150 sh -c "cd '$root/gpu/vulkan' && '$bin/vulkan.test' -test.run 'TwoVulkanTiers|CancelOnSecondVulkanTier' -test.v -test.count=1 >'$OUT/tier-tests.txt' 2>&1"
tail -n 3 "$OUT/tier-tests.txt" >>"$OUT/summary.txt"

# A bonsai-8b-shape model (36 layers, d_model 4096) of random 1-bit weights.
shape=${SHAPE:-bonsai-8b}
model=$work/$shape.gguf
step gen 150 "$bin/strata" gen --shape "$shape" --type Q1_0_g128 --out "$model" >/dev/null || exit 1

# The GPU's Vulkan index: the first device that is not a CPU implementation.
"$bin/strata" info "$model" --devices --backend vulkan >"$OUT/devices.txt" 2>&1
dev=${DEVICE:-$(awk '/^  [0-9]+: / && !/, cpu, / { sub(":", "", $1); print $1; exit }' "$OUT/devices.txt")}
if [ -z "$dev" ]; then
	echo "no GPU among the Vulkan devices (see devices.txt)" | tee -a "$OUT/summary.txt"
	exit 1
fi
layers=$(awk '/^layers / { print $2; exit }' "$OUT/devices.txt")
half=$((layers / 2))
split="$dev:0-$((half - 1)),$dev:$half-$((layers - 1))"
echo "GPU is Vulkan device $dev; the split is $split" | tee -a "$OUT/summary.txt"
lengths=${BENCH_TOKENS:-1,128,512,2048}
step plan 60 sh -c "'$bin/strata' info '$model' --devices --backend vulkan --placement '$split' -n ${lengths##*,} >'$OUT/plan.txt' 2>&1"

# Same bits whole and split: 64 tokens, the residual stream, attention
# patterns and logits of every layer.
tokens=$(seq -s, 100 13 919)
for p in one two; do
	placement=""
	[ $p = two ] && placement="--placement $split"
	# shellcheck disable=SC2086
	step "trace-$p" 120 "$bin/strata" trace --model "$model" --backend vulkan $placement --tokens "$tokens" \
		--capture 'blocks.*.hook_resid_post,blocks.*.attn.hook_pattern,logits' --out "$work/trace-$p" >>"$OUT/equal.txt" 2>&1
done
step equal 60 sh -c "'$bin/cmptrace' '$work/trace-one' '$work/trace-two' >>'$OUT/equal.txt' 2>&1"
tail -n 1 "$OUT/equal.txt" >>"$OUT/summary.txt"

# The cost of the split: prefill time whole and over two tiers.
for p in one two; do
	placement=""
	[ $p = two ] && placement="--placement $split"
	# shellcheck disable=SC2086
	step "bench-$p" 150 sh -c "'$bin/strata' bench --model '$model' --backend vulkan $placement --tokens $lengths --capture none,all --iters 5 --json '$OUT/bench-$p.json' >'$OUT/bench-$p.txt' 2>&1"
	cat "$OUT/bench-$p.txt" >>"$OUT/summary.txt"
done
exit $failed
