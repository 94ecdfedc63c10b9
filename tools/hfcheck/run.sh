#!/bin/sh
# Checks Strata's architectures against HuggingFace transformers: generates
# each tiny model, traces a 100-token prompt on each backend, and runs
# hf_check.py, which rebuilds the model in transformers from the GGUF file
# and compares in float64. Needs strata (or $STRATA) and python3 with numpy,
# torch and transformers. Writes under $OUT (default .).
set -e
OUT=${OUT:-.}
STRATA=${STRATA:-strata}
SHAPES=${SHAPES:-tiny-gpt2 tiny-gemma2 tiny-gemma3 tiny-phi3 tiny-qwen3moe tiny-mixtral}
BACKENDS=${BACKENDS:-cpu vulkan}
TOK=$(python3 -c "import random; random.seed(3); print(','.join(str(random.randrange(512)) for _ in range(100)))")
specs=""
for s in $SHAPES; do
  $STRATA gen --shape "$s" --out "$OUT/$s.gguf"
  spec="$OUT/$s.gguf"
  for b in $BACKENDS; do
    $STRATA trace --model "$OUT/$s.gguf" --backend "$b" --tokens "$TOK" --capture 'blocks.*.hook_resid_pre,logits' --out "$OUT/$s-$b" | tail -1
    rm -f "$OUT/$s-$b"/*.png "$OUT/$s-$b"/*.svg
    spec="$spec:$OUT/$s-$b/trace.npz"
  done
  specs="$specs $spec"
done
python3 "$(dirname "$0")/hf_check.py" "$TOK" $specs
