#!/usr/bin/env bash
# Strata's whole test suite, as CI runs it: set-up, formatting, vet, unit
# tests (the shared stories260K model is read from ../shared when present)
# and short fuzzing runs over the saved corpora.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH="$(go env GOPATH)/bin:$PATH"

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then
	echo "gofmt would change:"; echo "$bad"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== go test"
go test -count=1 -timeout 30m ./...
echo "== vulkan tests as an Apple GPU chooses its kernels (issue 47.14: 32 KiB shared, no cooperative matrices, subgroups of 32)"
STRATA_VULKAN_CLAMP=apple go test -count=1 -timeout 10m ./backend/vulkan \
	-run '^(TestMatMulEveryFormat|TestEveryPointMatchesCPU|TestFlashAttentionShapes|TestAttentionMaterialisedAndFlash|TestRMSNorm|TestSoftmaxOfLongRows|TestOptionsClamp)$'
echo "== go test -race (every package; -short: the soak is short)"
CGO_ENABLED=1 go test -count=1 -race -short -timeout 30m ./...
echo "== fuzz (short runs over the saved corpora)"
# Budgets are counts, not durations: go1.26's fuzz coordinator can fail a
# duration run with a spurious "context deadline exceeded" (golang/go#75804).
go test -run='^$' -fuzz='^FuzzParse$' -fuzztime=200000x ./gguf
go test -run='^$' -fuzz='^FuzzEncode$' -fuzztime=20000x ./model/tokenizer
echo "== all tests passed"
