package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShardReply(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply any
		shard string
		inner any
	}{
		{"a grant (nil)", []any{[]byte("feed01")}, "feed01", nil},
		{"a holder's token", []any{[]byte("feed01"), []byte("tok")}, "feed01", []byte("tok")},
		{"a script's array", []any{"run:abc", []any{int64(1), int64(-1)}}, "run:abc", []any{int64(1), int64(-1)}},
	} {
		shard, inner, err := ShardReply(c.reply)
		require.NoError(t, err, c.name)
		require.Equal(t, c.shard, shard, c.name)
		require.Equal(t, c.inner, inner, c.name)
	}
	for _, bad := range []any{nil, "OK", int64(1), []any{}, []any{int64(1), nil}, []any{"", nil}, []any{"a", "b", "c"}} {
		_, _, err := ShardReply(bad)
		require.ErrorContains(t, err, "without its shard's identity", "%v", bad)
	}
}

// The wrapper starts on the script's first line: a node's error names the
// script's own line, and Called the command there.
func TestSharded_keepsTheLinesOfTheScript(t *testing.T) {
	for _, s := range append(Scripts, ScriptInfo{"set", setScript, setScript.Source()}) {
		w := Sharded(s.Script)
		require.NotEqual(t, s.Script.Hash(), w.Hash(), s.Name)
		require.Equal(t, s.Script.Keys(), w.Keys(), s.Name)
		require.True(t, strings.HasPrefix(w.Source(), shardHead+s.Script.Source()), s.Name)
		for line := 1; line < 400; line++ {
			want, wok := Called(s.Script.Hash(), line)
			got, gok := Called(w.Hash(), line)
			require.Equal(t, wok, gok, "%s:%d", s.Name, line)
			require.Equal(t, want, got, "%s:%d", s.Name, line)
		}
	}
	require.Same(t, Sharded(setScript), Sharded(CommandScript("SET")))
	require.Panics(t, func() { CommandScript("GET") })
}

func TestShardOf(t *testing.T) {
	require.Equal(t, "feed01", ShardOf("abc", "feed01"))
	require.Equal(t, "run:abc", ShardOf("abc", UnknownLineage), "a node that refused INFO replication is told by its run id")
}

func TestParseNodeCheck_readsTheClusterMode(t *testing.T) {
	reply := []any{[]byte("0123abcd"), int64(100), []byte(""), []byte("feed01"), int64(-1), int64(1), []byte(""), int64(1), int64(0)}
	f, err := ParseNodeCheck(reply)
	require.NoError(t, err)
	require.True(t, f.Cluster)
	reply[5] = int64(0)
	f, err = ParseNodeCheck(reply)
	require.NoError(t, err)
	require.False(t, f.Cluster)
	for _, bad := range []any{int64(2), int64(-1), "1"} {
		reply[5] = bad
		_, err = ParseNodeCheck(reply)
		require.Error(t, err, "%v", bad)
	}
	reply[5] = int64(1)
	_, err = ParseNodeCheck(reply[:6])
	require.Error(t, err, "a reply of an older check")
}
