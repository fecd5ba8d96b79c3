package redlock

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestNewTokenWith_isThePrefixAndARandomVersion4UUID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok, err := newTokenWith("c1:")
		require.NoError(t, err)
		rest, ok := strings.CutPrefix(tok, "c1:")
		require.True(t, ok, tok)
		u, err := uuid.Parse(rest)
		require.NoError(t, err)
		require.Equal(t, u.String(), rest, "canonical text")
		require.Equal(t, uuid.Version(4), u.Version())
		require.Equal(t, uuid.RFC4122, u.Variant())
		require.False(t, seen[tok], "a token came twice")
		seen[tok] = true
	}
}
