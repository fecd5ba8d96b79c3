package redlock

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// The refusals for lack of permission, as redis-server 7.0.15 and
// valkey-server 8.0.1 word them (user "locker"; %[1]s stands for a
// script's SHA1 and %[2]d for its line). Each row is one refusal on both
// servers, and what the library reads in it.
var deniedTexts = []struct {
	name          string
	redis, valkey string
	want          denial
}{
	{"command sent", "NOPERM this user has no permissions to run the 'set' command",
		"NOPERM User locker has no permissions to run the 'set' command",
		denial{object: "command", cmd: "SET"}},
	{"subcommand sent", "NOPERM this user has no permissions to run the 'config|get' command",
		"NOPERM User locker has no permissions to run the 'config|get' command",
		denial{object: "command", cmd: "CONFIG|GET"}},
	{"key sent", "NOPERM this user has no permissions to access one of the keys used as arguments",
		"NOPERM No permissions to access a key",
		denial{object: "key"}},
	{"channel sent", "NOPERM this user has no permissions to access one of the channels used as arguments",
		"NOPERM No permissions to access a channel",
		denial{object: "channel"}},
	{"command in a script", "ERR The user executing the script can't run this command or subcommand script: %[1]s, on @user_script:%[2]d.",
		"ERR ACL failure in script: User locker has no permissions to run the 'pexpire' command script: %[1]s, on @user_script:%[2]d.",
		denial{object: "command", cmd: "PEXPIRE", script: true}},
	{"key in a script", "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: %[1]s, on @user_script:%[2]d.",
		"ERR ACL failure in script: No permissions to access a key script: %[1]s, on @user_script:%[2]d.",
		denial{object: "key", cmd: "PEXPIRE", script: true}},
	{"channel in a script", "ERR The user executing the script can't publish to the channel mentioned in the command script: %[1]s, on @user_script:%[2]d.",
		"ERR ACL failure in script: No permissions to access a channel script: %[1]s, on @user_script:%[2]d.",
		denial{object: "channel", cmd: "PEXPIRE", script: true}},
}

// Every refusal reads the same on both servers: the same denial, and the
// same error but for the node's own reply, which follows it and stays in
// the chain. A refusal inside a script names the command from the
// script's line.
func TestExplainDenied_readsEveryServersWording(t *testing.T) {
	line, cmd := firstCall(t, wire.Extend, "pexpire")
	require.Equal(t, "PEXPIRE", cmd)
	for _, tc := range deniedTexts {
		t.Run(tc.name, func(t *testing.T) {
			var said []string
			for _, text := range []string{tc.redis, tc.valkey} {
				if strings.Contains(text, "%") {
					text = fmt.Sprintf(text, wire.Extend.Hash(), line)
				}
				d, ok := asDenial(text)
				require.True(t, ok, text)
				require.Equal(t, tc.want, d, text)
				reply := pool.ReplyError(text)
				err := explainDenied(&pool.NodeError{Addr: "n:1", Op: "EVALSHA", Err: reply})
				require.ErrorIs(t, err, reply, "the node's own reply stays in the chain")
				require.Contains(t, err.Error(), "n:1", "the node is named")
				require.True(t, strings.HasSuffix(err.Error(), ": "+text), err.Error())
				said = append(said, strings.TrimSuffix(err.Error(), text))
			}
			require.Equal(t, said[0], said[1], "the same refusal reads the same on both servers")
			require.Contains(t, said[0], "NOPERM: ")
			if tc.want.cmd != "" {
				require.Contains(t, said[0], tc.want.cmd)
			}
		})
	}
}

// The texts of the errors, whole, for a command refused inside a script
// and for a key the client sent.
func TestExplainDenied_wording(t *testing.T) {
	line, _ := firstCall(t, wire.Extend, "get")
	valkey := fmt.Sprintf("ERR ACL failure in script: User locker has no permissions to run the 'get' command script: %s, on @user_script:%d.", wire.Extend.Hash(), line)
	require.Equal(t, "NOPERM: the user may not run GET (called by the script; docs/operations.md lists the ACL): "+valkey,
		explainDenied(pool.ReplyError(valkey)).Error())
	key := "NOPERM No permissions to access a key"
	require.Equal(t, "NOPERM: a key is outside the user's key patterns (docs/operations.md lists the ACL): "+key,
		explainDenied(pool.ReplyError(key)).Error())
}

// Other errors, replies or not, are left as they are.
func TestExplainDenied_leavesOtherErrorsAlone(t *testing.T) {
	for _, text := range []string{
		"NOSCRIPT No matching script. Please use EVAL.",
		"READONLY You can't write against a read only replica.",
		"OOM command not allowed when used memory > 'maxmemory'.",
		"WRONGPASS invalid username-password pair or user is disabled.",
		"NOAUTH Authentication required.",
		"ERR Error running script (call to f_0): @user_script:9: user_script:9: Wrong number of args calling Redis command from script",
		"ERR unknown command 'zadd', with args beginning with: ",
		"redlock: fence counter x is not a number",
	} {
		_, ok := asDenial(text)
		require.False(t, ok, text)
		err := &pool.NodeError{Addr: "n:1", Op: "EVALSHA", Err: pool.ReplyError(text)}
		require.Same(t, err, explainDenied(err).(*pool.NodeError), text)
	}
	plain := errors.New("read tcp: i/o timeout (no permissions to run the 'get' command)")
	require.Equal(t, plain, explainDenied(plain))
	require.NoError(t, explainDenied(nil))
}

// A command refused inside any of the scripts is named, whichever script
// it is and whichever server refused it (Redis 7.0 names only the script
// and the line).
func TestExplainDenied_namesTheCommandInEveryScript(t *testing.T) {
	for _, s := range wire.Scripts {
		line, want := firstCall(t, s.Script, "")
		for _, text := range []string{
			"ERR The user executing the script can't run this command or subcommand script: %s, on @user_script:%d.",
			"ERR ACL failure in script: User locker has no permissions to run the '" + strings.ToLower(want) + "' command script: %s, on @user_script:%d.",
		} {
			reply := pool.ReplyError(fmt.Sprintf(text, s.Script.Hash(), line))
			err := explainDenied(&pool.NodeError{Addr: "n:1", Op: "EVALSHA", Err: reply})
			require.Contains(t, err.Error(), "NOPERM: the user may not run "+want+" (called by the script", s.Name)
			require.Contains(t, err.Error(), "n:1", "the node is named")
			require.ErrorIs(t, err, reply, "the node's own reply stays in the chain")
		}
	}
}

// firstCall returns the line (from 1) of the first redis.call of script
// sc whose command is cmd (any command when cmd is ""), and the command,
// in upper case.
func firstCall(t *testing.T, sc *pool.Script, cmd string) (int, string) {
	t.Helper()
	for _, s := range wire.Scripts {
		if s.Script != sc {
			continue
		}
		for n, l := range strings.Split(s.Source, "\n") {
			if _, rest, ok := strings.Cut(l, `redis.call("`); ok {
				c, _, _ := strings.Cut(rest, `"`)
				if cmd == "" || strings.EqualFold(c, cmd) {
					return n + 1, strings.ToUpper(c)
				}
			}
		}
	}
	t.Fatalf("no redis.call of %q in the script", cmd)
	return 0, ""
}
