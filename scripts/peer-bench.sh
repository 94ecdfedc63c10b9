#!/bin/bash
# Strata against llama.cpp on the same generated files, measured side by side in one run.
# usage: scripts/peer-bench.sh [-b vulkan|cpu] [-t THREADS] [-T 128,512,2048] [-c none] [-p fast] [-r 3]
#                              STRATA PEERBIN OUTDIR SHAPE:TYPE...
#   STRATA   a strata binary; PEERBIN the bin folder ../shared/bench/llama_cpp_peer.sh builds
#   OUTDIR   gets strata-SHAPE-TYPE.json, llama-SHAPE-TYPE.json and table.md (the side by side)
# Each file is written by `strata gen` into OUTDIR/models, measured by both, then removed (an 8b F16 file is 16 GB).
# vulkan: llama-bench -ngl 99 -fa 1 at its default -ub 512 and at -ub 2048; cpu: -ngl 0 -t THREADS, run from a
# copy of PEERBIN without libggml-vulkan.so so that llama.cpp cannot reach a GPU.
set -euo pipefail
backend=vulkan threads=$(nproc) tokens=128,512,2048 capture=none precision=fast reps=3
while getopts b:t:T:c:p:r: o; do
	case $o in
	b) backend=$OPTARG ;; t) threads=$OPTARG ;; T) tokens=$OPTARG ;; c) capture=$OPTARG ;;
	p) precision=$OPTARG ;; r) reps=$OPTARG ;; *) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 4 ] || { sed -n 3,5p "$0" >&2; exit 2; }
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
for st in "$@"; do
	shape=${st%%:*} type=${st#*:} f=$out/models/$shape-$type.gguf
	"$strata" gen --shape "$shape" --type "$type" --out "$f"
	"$strata" bench --backend "$backend" --model "$f" --tokens "$tokens" --capture "$capture" \
		--precision "$precision" --iters "$reps" --json "$out/strata-$shape-$type.json" || echo "strata bench failed on $st"
	"$peer/llama-bench" -m "$f" -p "$tokens" -n 0 -r "$reps" "${llama[@]}" -o json >"$out/llama-$shape-$type.json" ||
		echo "llama-bench failed on $st"
	rm -f "$f"
done
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = ["| file | T | capture | precision | Strata tok/s | llama.cpp tok/s (-ub 512) | llama.cpp tok/s (-ub 2048) | Strata / best llama.cpp |",
        "|---|---|---|---|---|---|---|---|"]
for sf in sorted(glob.glob(os.path.join(out, "strata-*.json"))):
    name = os.path.basename(sf)[len("strata-"):-len(".json")]
    lf = os.path.join(out, "llama-" + name + ".json")
    peer = {}
    try:
        for r in json.load(open(lf)):
            peer[(r["n_prompt"], r["n_ubatch"])] = r["avg_ts"]
    except (OSError, ValueError):
        pass
    for r in json.load(open(sf)):
        if "tok_s" not in r:
            continue
        T = r["T"]
        ub = {u: peer.get((T, u)) for u in sorted({k[1] for k in peer})}
        cells = [f"{v:,.0f}" if v else "" for v in ub.values()]
        cells += [""] * (2 - len(cells))
        best = max((v for v in ub.values() if v), default=0)
        ratio = f"{r['tok_s'] / best:.2f}x" if best else ""
        rows.append(f"| {name} | {T} | {r['capture']} | {r['precision']} | {r['tok_s']:,.0f} | {cells[0]} | {cells[1]} | {ratio} |")
open(os.path.join(out, "table.md"), "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
