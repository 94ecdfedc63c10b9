//go:build !linux

package trace

import "errors"

// exchangeDirs is Linux's: elsewhere swapIn falls back to two renames.
func exchangeDirs(a, b string) error { return errors.ErrUnsupported }
