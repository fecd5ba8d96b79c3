package redlock

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// A command refused inside any of the scripts is named, whichever script
// it is (Redis 7.0 names only the script and the line).
func TestExplainDenied_namesTheCommandInEveryScript(t *testing.T) {
	for _, s := range wire.Scripts {
		line, want := firstCall(t, s.Source)
		reply := pool.ReplyError(fmt.Sprintf("ERR The user executing the script can't run this command or subcommand script: %s, on @user_script:%d.",
			s.Script.Hash(), line))
		err := explainDenied(&pool.NodeError{Addr: "n:1", Op: "EVALSHA", Err: reply})
		require.Contains(t, err.Error(), "NOPERM: the user may not run "+want, s.Name)
		require.Contains(t, err.Error(), "n:1", "the node is named")
		require.ErrorIs(t, err, reply, "the node's own reply stays in the chain")
	}
}

// firstCall returns the line of the first redis.call in src, from 1, and
// the command it calls.
func firstCall(t *testing.T, src string) (int, string) {
	for n, l := range strings.Split(src, "\n") {
		if _, rest, ok := strings.Cut(l, `redis.call("`); ok {
			cmd, _, _ := strings.Cut(rest, `"`)
			return n + 1, strings.ToUpper(cmd)
		}
	}
	t.Fatal("no redis.call in the script")
	return 0, ""
}
