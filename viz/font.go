package viz

import (
	"encoding/binary"
	"slices"

	"codeberg.org/go-fonts/liberation/liberationsansregular"
	"golang.org/x/image/font/opentype"
	"gonum.org/v1/plot/font"
)

// sans is Liberation Sans without its kerning, registered under a name of
// our own so that other plots keep gonum's: the font kerns "11" by 0.074
// em, and at the 7 points of a heatmap cell the PNG drew "0.11" with its
// ones on top of each other. SVG names the font by its own family name,
// Liberation Sans, as before.
var sans = font.Font{Typeface: "Strata", Variant: "Sans"}

func init() {
	f, err := opentype.Parse(withoutKerning(liberationsansregular.TTF))
	if err != nil { // the font is compiled in: this cannot differ between runs
		panic("viz: Liberation Sans without kerning: " + err.Error())
	}
	font.DefaultCache.Add(font.Collection{{Font: sans, Face: f}})
}

// withoutKerning returns a copy of a TrueType font whose kern and GPOS
// tables are renamed out of the way: a tag one less in its last letter
// keeps the table directory sorted, which parsers check, and names a
// table no one reads.
func withoutKerning(ttf []byte) []byte {
	out := slices.Clone(ttf)
	tables := int(binary.BigEndian.Uint16(out[4:6]))
	for i := range tables {
		tag := out[12+16*i : 12+16*i+4]
		if string(tag) == "kern" || string(tag) == "GPOS" {
			tag[3]--
		}
	}
	return out
}
