package simnode_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/simnode"
)

// The node's script engine converts replies and results as Redis does.
func TestNode_scriptsConvertAsRedisDoes(t *testing.T) {
	n := simnode.New("s:1")
	defer n.Close()
	do := func(args ...string) (any, error) { t.Helper(); return n.Do(args...) }

	_, err := do("SET", "k", "v")
	require.NoError(t, err)
	for _, c := range []struct {
		script string
		args   []string
		want   any
		err    string
	}{
		{script: `return redis.call("GET", KEYS[1])`, args: []string{"1", "k"}, want: "v"},
		{script: `return redis.call("GET", "missing") == false`, args: []string{"0"}, want: 1},
		{script: `return {1, "a", false, 3}`, args: []string{"0"}, want: []any{1, "a", nil, 3}},
		{script: `return {1, nil, 3}`, args: []string{"0"}, want: []any{1}},
		{script: `return 3.9`, args: []string{"0"}, want: 3},
		{script: `return redis.status_reply("FINE")`, args: []string{"0"}, want: "FINE"},
		{script: `return redis.error_reply("nope")`, args: []string{"0"}, err: "ERR nope"},
		{script: `return redis.error_reply("redlock: bad")`, args: []string{"0"}, err: "redlock: bad"},
		{script: `local r = redis.pcall("HGET", KEYS[1], "f"); return r.err`, args: []string{"1", "k"}, want: "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{script: `return redis.call("SET", KEYS[1], ARGV[1], "PX", 1000).ok`, args: []string{"1", "k2", "x"}, want: "OK"},
		{script: `return string.match(redis.call("INFO", "server"), "uptime_in_seconds:(%d+)")`, args: []string{"0"}, want: "0"},
		{script: `return #KEYS + #ARGV * 10`, args: []string{"2", "a", "b", "c"}, want: 12},
	} {
		got, err := do(append([]string{"EVAL", c.script}, c.args...)...)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.script)
			continue
		}
		require.NoError(t, err, c.script)
		require.Equal(t, c.want, got, c.script)
	}
	_, err = do("EVAL", `return redis.call("HGET", KEYS[1], "f")`, "1", "k")
	require.ErrorContains(t, err, "WRONGTYPE", "redis.call raises the error")
}

// EVALSHA finds a script once EVAL or SCRIPT LOAD ran it, and not after
// SCRIPT FLUSH or a restart.
func TestNode_scriptCacheIsTheNodes(t *testing.T) {
	n := simnode.New("s:1")
	defer n.Close()
	sha, err := n.Do("SCRIPT", "LOAD", "return 7")
	require.NoError(t, err)
	got, err := n.Do("EVALSHA", sha.(string), "0")
	require.NoError(t, err)
	require.Equal(t, 7, got)
	_, err = n.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	_, err = n.Do("EVALSHA", sha.(string), "0")
	require.ErrorContains(t, err, "NOSCRIPT")
	_, err = n.Do("EVAL", "return 7", "0")
	require.NoError(t, err)
	exists, err := n.Do("SCRIPT", "EXISTS", sha.(string), "0000")
	require.NoError(t, err)
	require.Equal(t, []any{1, 0}, exists)
	n.Restart(simnode.Kept)
	_, err = n.Do("EVALSHA", sha.(string), "0")
	require.ErrorContains(t, err, "NOSCRIPT", "a restarted node has no scripts")
}
