package vulkan

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/shaders"
)

// pushBlocks is the Go struct of each shader source's push-constant block.
var pushBlocks = map[string]any{
	"matmul.comp": tiledPush{}, "matvec.comp": tiledPush{}, "matmul_coop.comp": coopPush{}, "matmul_coop2.comp": coop2Push{},
	"weights16.comp": weights16Push{}, "tohalf.comp": toHalfPush{}, "splitk.comp": splitKPush{},
	"embed.comp": embedPush{}, "rmsnorm.comp": normPush{}, "layernorm.comp": normPush{},
	"normapply.comp": normApplyPush{}, "rope.comp": ropePush{},
	"mix.comp": mixPush{}, "scores.comp": scoresPush{}, "flash.comp": flashPush{}, "flash_coop.comp": flashCoopPush{},
	"softmax.comp": softmaxPush{}, "add.comp": elemPush{}, "swiglu.comp": elemPush{}, "gelu.comp": elemPush{},
	"geglu.comp": elemPush{}, "softcap.comp": softcapPush{}, "copy.comp": copyPush{}, "edit.comp": editPush{},
	"edit_mean.comp": editMeanPush{}, "argmax.comp": rowsPush{}, "rows.comp": gatherPush{}, "rank.comp": rankPush{},
	"rownorm.comp": rowNormPush{}, "route.comp": routePush{}, "weighted_sum.comp": weightedSumPush{},
	"sortexperts.comp": sortExpertsPush{}, "experttiles.comp": expertTilesPush{},
}

// Every compiled shader's push-constant block has the members of its Go
// struct: the same count, each of the same name (but for case, and GLSL's
// half_ for a reserved word), at the same offset, of the same size and of
// the same kind (uint or float), so that a field added, dropped, renamed
// or reordered on one side fails here rather than feeding a kernel the
// wrong words.
func TestPushBlocksMatchSPIRV(t *testing.T) {
	used := map[string]bool{}
	for _, v := range shaders.Variants {
		t.Run(v.Name, func(t *testing.T) {
			block, ok := pushBlocks[v.Source]
			require.True(t, ok, "no Go push-constant struct for %s", v.Source)
			used[v.Source] = true
			words, err := shaders.SPIRV(v.Name)
			require.NoError(t, err)
			want, err := spirvPushBlock(words)
			require.NoError(t, err)
			got := goPushBlock(reflect.TypeOf(block), 0)
			require.Equal(t, len(want), len(got), "%s: the members of %T against %v", v.Source, block, want)
			for i := range want {
				require.Equal(t, strings.ToLower(strings.TrimSuffix(want[i].name, "_")), strings.ToLower(got[i].name), "%s member %d: name", v.Source, i)
				require.Equal(t, want[i].offset, got[i].offset, "%s member %d (%s, Go %s): offset", v.Source, i, want[i].name, got[i].name)
				require.Equal(t, want[i].size, got[i].size, "%s member %d (%s, Go %s): size", v.Source, i, want[i].name, got[i].name)
				require.Equal(t, want[i].float, got[i].float, "%s member %d (%s, Go %s): float or uint", v.Source, i, want[i].name, got[i].name)
			}
			require.LessOrEqual(t, int(reflect.TypeOf(block).Size()), pushBytes, "the block fits the pipeline layout's push range")
		})
	}
	for src := range pushBlocks {
		require.True(t, used[src], "%s is no shader's source", src)
	}
}

// pushMember is one member of a push-constant block.
type pushMember struct {
	name         string
	offset, size uint32
	float        bool
}

func (m pushMember) String() string { return fmt.Sprintf("%s@%d", m.name, m.offset) }

// goPushBlock lists the members of a push-constant struct, embedded
// structs' in place, from base.
func goPushBlock(t reflect.Type, base uintptr) []pushMember {
	var ms []pushMember
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			ms = append(ms, goPushBlock(f.Type, base+f.Offset)...)
			continue
		}
		ms = append(ms, pushMember{name: f.Name, offset: uint32(base + f.Offset), size: uint32(f.Type.Size()), float: f.Type.Kind() == reflect.Float32})
	}
	return ms
}

// SPIR-V opcodes, a storage class and a decoration (SPIR-V 1.0, section 3).
const (
	opMemberName     = 6
	opTypeInt        = 21
	opTypeFloat      = 22
	opTypeStruct     = 30
	opTypePointer    = 32
	opVariable       = 59
	opMemberDecorate = 72

	storagePushConstant = 9
	decorationOffset    = 35
)

// spirvPushBlock reads the members of a module's push-constant block from
// its SPIR-V: the struct a PushConstant variable points to, its members'
// Offset decorations and their scalar types' widths.
func spirvPushBlock(words []uint32) ([]pushMember, error) {
	if len(words) < 5 || words[0] != 0x07230203 {
		return nil, fmt.Errorf("not a SPIR-V module")
	}
	type member struct{ st, i uint32 }
	ints, floats := map[uint32]uint32{}, map[uint32]uint32{}
	structs := map[uint32][]uint32{}
	pointees := map[uint32]uint32{} // pointer types of the PushConstant class
	offsets, names := map[member]uint32{}, map[member]string{}
	var block []uint32 // the block's pointer types
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("instruction at word %d runs past the module", i)
		}
		a := words[i+1 : i+n]
		switch op {
		case opMemberName:
			names[member{a[0], a[1]}] = literalString(a[2:])
		case opTypeInt:
			ints[a[0]] = a[1]
		case opTypeFloat:
			floats[a[0]] = a[1]
		case opTypeStruct:
			structs[a[0]] = a[1:]
		case opTypePointer:
			if a[1] == storagePushConstant {
				pointees[a[0]] = a[2]
			}
		case opVariable:
			if a[2] == storagePushConstant {
				block = append(block, a[0])
			}
		case opMemberDecorate:
			if a[2] == decorationOffset {
				offsets[member{a[0], a[1]}] = a[3]
			}
		}
		i += n
	}
	switch len(block) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, fmt.Errorf("%d push-constant variables", len(block))
	}
	st, ok := pointees[block[0]]
	types, isStruct := structs[st]
	if !ok || !isStruct {
		return nil, fmt.Errorf("the push-constant variable is not a block")
	}
	ms := make([]pushMember, len(types))
	for i, typ := range types {
		m := member{st, uint32(i)}
		off, ok := offsets[m]
		if !ok {
			return nil, fmt.Errorf("member %d (%s) has no offset", i, names[m])
		}
		ms[i] = pushMember{name: names[m], offset: off}
		if w, ok := ints[typ]; ok {
			ms[i].size = w / 8
		} else if w, ok := floats[typ]; ok {
			ms[i].size, ms[i].float = w/8, true
		} else {
			return nil, fmt.Errorf("member %d (%s) is not a scalar", i, names[m])
		}
	}
	return ms, nil
}

// literalString decodes a SPIR-V literal string: UTF-8 bytes, little-endian
// in words, ending in a NUL.
func literalString(ws []uint32) string {
	var b []byte
	for _, w := range ws {
		for k := range 4 {
			c := byte(w >> (8 * k))
			if c == 0 {
				return string(b)
			}
			b = append(b, c)
		}
	}
	return string(b)
}
