// Command cmptrace says whether two trace folders (strata trace --out)
// hold the same captures with the same bits, as a split run must match an
// unsplit one. It exits 1 at the first difference, naming it.
package main

import (
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/stratalab/strata/trace"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cmptrace DIR1 DIR2")
		os.Exit(2)
	}
	if err := compare(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "cmptrace:", err)
		os.Exit(1)
	}
}

func compare(dirA, dirB string) error {
	a, err := trace.Load(dirA)
	if err != nil {
		return err
	}
	b, err := trace.Load(dirB)
	if err != nil {
		return err
	}
	if !slices.Equal(a.Names, b.Names) {
		i := 0
		for i < min(len(a.Names), len(b.Names)) && a.Names[i] == b.Names[i] {
			i++
		}
		at := func(names []string) string {
			if i < len(names) {
				return names[i]
			}
			return "(none)"
		}
		return fmt.Errorf("the captures differ: %d and %d, the first difference %s and %s", len(a.Names), len(b.Names), at(a.Names), at(b.Names))
	}
	if !slices.Equal(a.Tokens, b.Tokens) {
		return fmt.Errorf("the tokens differ: %v and %v", a.Tokens, b.Tokens)
	}
	elements := 0
	for _, name := range a.Names {
		x, y := a.Tensor(name), b.Tensor(name)
		if !slices.Equal(x.Shape, y.Shape) {
			return fmt.Errorf("%s: shape %v and %v", name, x.Shape, y.Shape)
		}
		for i := range x.Data {
			if math.Float32bits(x.Data[i]) != math.Float32bits(y.Data[i]) {
				return fmt.Errorf("%s[%d]: %g and %g", name, i, x.Data[i], y.Data[i])
			}
		}
		elements += len(x.Data)
	}
	fmt.Printf("equal: %d captures, %d float32s, bit for bit (%s vs %s)\n", len(a.Names), elements, a.Backend, b.Backend)
	return nil
}
