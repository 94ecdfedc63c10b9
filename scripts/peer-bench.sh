#!/bin/bash
# Strata against llama.cpp on the same generated files, measured side by side in one run.
# usage: scripts/peer-bench.sh [-b vulkan|cpu] [-t THREADS] [-T 128,512,2048] [-c none] [-p fast|exact,fast] [-r 3]
#                              [-n ROUNDS] [-V LABEL=STRATA2]... STRATA PEERBIN OUTDIR SHAPE:TYPE...
#   STRATA   a strata binary; PEERBIN the bin folder ../shared/bench/llama_cpp_peer.sh builds
#   -V       another strata binary (a variant of the code, LABEL letters, digits, _ or .), run right after STRATA on
#            each file: its own columns in the table, so that code changes are compared on the same file and GPU
#   OUTDIR   gets strata-SHAPE-TYPE-ROUND.json (variant-LABEL-SHAPE-TYPE-ROUND.json), llama-SHAPE-TYPE-ROUND.json
#            (.log: its messages; -b cpu: llama-SHAPE-TYPE-buffers.log, a short -v run), lscpu.txt and table.md: a line
#            naming the processor and the libraries llama.cpp loaded (-b cpu: a line a file naming the buffers its
#            weights went to, CPU_REPACK or CPU_AMX where it repacks them for its own kernels), then the side by
#            side (a row per file and T, a column per binary and precision, each ratio against llama.cpp's best -ub)
# Each file is written by `strata gen` into OUTDIR/models, measured by all ROUNDS times (strata, its variants, then
# llama-bench, alternately), then removed (an 8b F16 file is 16 GB). With ROUNDS > 1 each cell is its best round: on a shared
# machine the other load only slows a run down, so the fastest round is the nearest to a quiet one.
# vulkan: llama-bench -ngl 99 -fa 1 at its default -ub 512 and at -ub 2048; cpu: -ngl 0 -t THREADS, run from a
# copy of PEERBIN without libggml-vulkan.so so that llama.cpp cannot reach a GPU.
set -euo pipefail
backend=vulkan threads=$(nproc) tokens=128,512,2048 capture=none precision=fast reps=3 rounds=1 labels=() variants=()
while getopts b:t:T:c:p:r:n:V: o; do
	case $o in
	b) backend=$OPTARG ;; t) threads=$OPTARG ;; T) tokens=$OPTARG ;; c) capture=$OPTARG ;;
	p) precision=$OPTARG ;; r) reps=$OPTARG ;; n) rounds=$OPTARG ;;
	V)
		[[ $OPTARG =~ ^([A-Za-z0-9_.]+)=(.+)$ ]] || { echo "peer-bench: -V $OPTARG: want LABEL=STRATA2, LABEL of letters, digits, _ or ." >&2; exit 2; }
		labels+=("${BASH_REMATCH[1]}") variants+=("$(realpath "${BASH_REMATCH[2]}")") ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 4 ] || { sed -n 3,12p "$0" >&2; exit 2; }
strata=$(realpath "$1") peer=$(realpath "$2") out=$3
shift 3
mkdir -p "$out/models"
out=$(realpath "$out")
case $backend in
vulkan) llama=(-ngl 99 -fa 1 -ub 512,2048) ;;
cpu)
	cpubin=$out/llama-cpu-bin
	mkdir -p "$cpubin" && cp -a "$peer"/. "$cpubin"/ && rm -f "$cpubin/libggml-vulkan.so"
	peer=$cpubin llama=(-ngl 0 -t "$threads") ;;
*) echo "peer-bench: backend $backend: want vulkan or cpu" >&2; exit 2 ;;
esac
# the CPU backend runs GOMAXPROCS threads
[ "$backend" = cpu ] && export GOMAXPROCS=$threads
# Both programs must see a GPU before any file is written: without its Vulkan driver llama-bench runs on its CPU
# library and says so only in its log (a device call of this project was lost to that).
if [ "$backend" = vulkan ]; then
	"$strata" info --devices --backend vulkan >/dev/null || { echo "peer-bench: $strata sees no Vulkan device" >&2; exit 1; }
	devs=$("$peer/llama-bench" --list-devices 2>/dev/null | sed -n '/^Available devices:/,$p' | grep -v -e '^Available' -e '(none)' || true)
	[ -n "$devs" ] || { echo "peer-bench: llama.cpp ($peer) lists no GPU device; it would run on its CPU library" >&2; exit 1; }
fi
lscpu >"$out/lscpu.txt" 2>/dev/null || true
for st in "$@"; do
	shape=${st%%:*} type=${st#*:} f=$out/models/$shape-$type.gguf
	"$strata" gen --shape "$shape" --type "$type" --out "$f"
	# Where llama.cpp's CPU backend keeps the weights (CPU_REPACK: repacked for its own kernels; CPU_AMX: its AMX-INT8
	# kernels), which it names only with -v: one short untimed run, for the table.
	if [ "$backend" = cpu ]; then
		"$peer/llama-bench" -m "$f" -p 16 -n 0 -r 1 "${llama[@]}" -v >/dev/null 2>"$out/llama-$shape-$type-buffers.log" || true
	fi
	for round in $(seq "$rounds"); do
		bins=("$strata" "${variants[@]}") jsons=("strata") names=("strata")
		for l in "${labels[@]}"; do jsons+=("variant-$l") names+=("$l"); done
		for i in "${!bins[@]}"; do
			"${bins[i]}" bench --backend "$backend" --model "$f" --tokens "$tokens" --capture "$capture" --precision "$precision" \
				--iters "$reps" --json "$out/${jsons[i]}-$shape-$type-$round.json" || echo "${names[i]} bench failed on $st"
		done
		log=$out/llama-$shape-$type-$round.log
		"$peer/llama-bench" -m "$f" -p "$tokens" -n 0 -r "$reps" "${llama[@]}" -o json >"$out/llama-$shape-$type-$round.json" 2>"$log" ||
			{ echo "llama-bench failed on $st:"; tail -3 "$log"; }
	done
	rm -f "$f"
done
python3 - "$out" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
strata, peer = {}, {}  # (file, T, capture) -> {(binary, precision) or ubatch: best tok/s over rounds}
def num(v):  # tokens/s: a decimal below 1,000 (bonsai-size models run at tens)
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"
def keep(d, key, col, v):
    d.setdefault(key, {})
    d[key][col] = max(d[key].get(col, 0), v)
for sf in glob.glob(os.path.join(out, "strata-*-*.json")) + glob.glob(os.path.join(out, "variant-*-*-*.json")):
    base = os.path.basename(sf)[:-len(".json")]
    label, rest = ("Strata", base[len("strata-"):]) if base.startswith("strata-") else base[len("variant-"):].split("-", 1)
    name = re.sub(r"-\d+$", "", rest)
    try:
        for r in json.load(open(sf)):
            if "tok_s" in r:
                keep(strata, (name, r["T"], r["capture"]), (label, r["precision"]), r["tok_s"])
    except (OSError, ValueError):
        pass
    if label != "Strata":
        continue
    lf = os.path.join(out, "llama-" + rest + ".json")
    try:
        for r in json.load(open(lf)):
            for cap in {k[2] for k in strata if k[:2] == (name, r["n_prompt"])}:
                keep(peer, (name, r["n_prompt"], cap), r["n_ubatch"], r["avg_ts"])
    except (OSError, ValueError):
        pass
cols = sorted({c for v in strata.values() for c in v}, key=lambda c: (c[0] != "Strata", c[0], c[1] != "exact", c[1]))
ubs = sorted({u for v in peer.values() for u in v})
head = ["file", "T", "capture"] + [f"{b} {p}" for b, p in cols] + [f"llama.cpp -ub {u}" for u in ubs] + \
       [f"{b} {p} / llama.cpp" for b, p in cols]
rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
for key in sorted(strata, key=lambda k: (k[0], k[2], k[1])):
    s, l = strata[key], peer.get(key, {})
    best = max(l.values(), default=0)
    cells = [key[0], str(key[1]), key[2]] + [num(s[p]) if p in s else "" for p in cols] + \
            [num(l[u]) if u in l else "" for u in ubs] + \
            [f"{s[p] / best:.2f}x" if p in s and best else "" for p in cols]
    rows.append("| " + " | ".join(cells) + " |")
# The machine, and the libraries llama.cpp loaded (its CPU build picks one for the processor: zen4,
# sapphirerapids with AMX, ...), so that a table says what ran.
cpu, flags = "", []
try:
    for line in open(os.path.join(out, "lscpu.txt")):
        k, _, v = line.partition(":")
        if k.strip() == "Model name":
            cpu = v.strip()
        elif k.strip() == "Flags":
            flags = v.split()
except OSError:
    pass
features = [n for f, n in (("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"), ("amx_int8", "AMX-INT8")) if f in flags]
libs = set()
for lf in glob.glob(os.path.join(out, "llama-*.log")):
    libs |= {os.path.basename(m) for m in re.findall(r"loaded \S+ backend from (\S+)", open(lf, errors="replace").read())}
about = f"machine: {cpu or 'unknown'} ({', '.join(features) or 'no VNNI or AMX'}); llama.cpp loaded {', '.join(sorted(libs)) or 'nothing it named'}"
for bf in sorted(glob.glob(os.path.join(out, "llama-*-buffers.log"))):
    bufs = re.findall(r"load_tensors:\s+(\S+) model buffer size\s*=\s*([\d.]+) MiB", open(bf, errors="replace").read())
    name = os.path.basename(bf)[len("llama-"):-len("-buffers.log")]
    about += f"\nllama.cpp's weights of {name}: " + (", ".join(f"{b} {float(m):,.0f} MiB" for b, m in bufs) or "not named in its log")
open(os.path.join(out, "table.md"), "w").write(about + "\n\n" + "\n".join(rows) + "\n")
print(about)
print("\n".join(rows))
PY
