package engine

import "github.com/stratalab/strata/backend"

// Precision is how a prefill's matrix products multiply; the backends
// implement it (see backend.Precision).
type Precision = backend.Precision

const (
	PrecisionExact = backend.PrecisionExact
	PrecisionFast  = backend.PrecisionFast
)

// ParsePrecision reads "exact" or "fast".
func ParsePrecision(s string) (Precision, error) { return backend.ParsePrecision(s) }
