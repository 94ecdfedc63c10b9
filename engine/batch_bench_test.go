package engine_test

import (
	"testing"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/internal/enginetest"
)

// BenchmarkBatch16x128 compares a batch of 16 prompts of 128 tokens with 16
// single prefills on the CPU (see enginetest.BenchBatch):
// go test ./engine -run=^$ -bench=Batch16x128 -benchtime=3x
func BenchmarkBatch16x128(b *testing.B) {
	enginetest.BenchBatch(b, cpu.New(0), enginetest.BatchBenchModel(b), 16, 128)
}
