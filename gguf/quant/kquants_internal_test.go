package quant

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The packing worked by hand in TestQ4_KBlock (formats_test.go), checked
// against the quantizers' packer and back through the unpacker.
func TestScaleMinK4Packing(t *testing.T) {
	sc := [8]uint8{1, 2, 3, 4, 40, 50, 60, 63}
	m := [8]uint8{5, 6, 7, 8, 33, 17, 48, 63}
	var q [12]byte
	putScaleMinK4(&q, &sc, &m)
	assert.Equal(t, [12]byte{0x81, 0xc2, 0xc3, 0xc4, 0x85, 0x46, 0xc7, 0xc8, 0x18, 0x12, 0x0c, 0xff}, q)
	for j := range 8 {
		gotSc, gotM := scaleMinK4(j, &q)
		assert.Equal(t, sc[j], gotSc, "scale %d", j)
		assert.Equal(t, m[j], gotM, "min %d", j)
	}
}
