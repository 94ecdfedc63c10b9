package backends

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpenNamesTheChoice(t *testing.T) {
	b, note, err := Open("cpu")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(b.Name(), "cpu ("))
	require.Equal(t, "using "+b.Name(), note)

	b, note, err = Open("auto")
	require.NoError(t, err)
	require.Contains(t, note, b.Name(), "the note says which backend runs")
	require.NoError(t, b.Close())

	_, _, err = Open("tpu")
	require.ErrorContains(t, err, `unknown backend "tpu"`)
}
