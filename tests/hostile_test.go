package tests

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// scriptLiar is a fake node that takes every SET NX (as a node that
// grants) and answers every script with reply, a well-formed answer of
// the wrong kind: a node that did not run the script it was sent.
func scriptLiar(t *testing.T, reply string) *fakeServer {
	return startFakeServer(t, func(c net.Conn) {
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			cmd, err := readCommand(r)
			if err != nil {
				return
			}
			answer := "-ERR unknown command\r\n"
			switch strings.ToUpper(cmd[0]) {
			case "PING":
				answer = "+PONG\r\n"
			case "SET":
				answer = "+OK\r\n"
			case "EVALSHA", "EVAL":
				answer = reply
			}
			if _, err := c.Write([]byte(answer)); err != nil {
				return
			}
		}
	})
}

// wrongReplies are well-formed answers that no release, extension or
// forced release script gives.
var wrongReplies = map[string]string{
	"status":       "+OK\r\n",
	"integer":      ":7\r\n",
	"bulk":         "$3\r\nabc\r\n",
	"array":        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
	"short array":  "*1\r\n:1\r\n",
	"array with 0": "*2\r\n:0\r\n$1\r\nx\r\n",
}

// A node whose answer to ForceRelease's script is none that the script
// gives did not release the key: ForceRelease says so, naming the node.
// It returned nil.
func TestForceRelease_aWrongKindOfReplyIsAnErrorNamingTheNode(t *testing.T) {
	t.Parallel()
	for name, reply := range wrongReplies {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 4)
			liar := scriptLiar(t, reply)
			pools := append(append([]pool.Pool(nil), e.pools...), newPools(t, []string{liar.Addr()})...)
			c := newClient(t, pools)
			err := c.ForceRelease(ctxT(t, 10*time.Second), newKey(t))
			require.Error(t, err)
			require.Contains(t, err.Error(), liar.Addr())
			require.Contains(t, err.Error(), "unexpected reply")
		})
	}
}

// Extend and Unlock fail a node whose answer is none that their scripts
// give, with the reply in the error: such an answer is no "not ours".
// It counted as a refusal, and two such nodes with one real node that had
// lost the key made a quorum out of reach: the extension was decided
// "lost" without waiting for the two real nodes that held it.
func TestExtendAndUnlock_aWrongKindOfReplyFailsTheNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	liars := []*fakeServer{scriptLiar(t, "+OK\r\n"), scriptLiar(t, "+OK\r\n")}
	pools := append(append([]pool.Pool(nil), e.pools...), newPools(t, []string{liars[0].Addr(), liars[1].Addr()})...)
	c := newClient(t, pools, redlock.WithRestartSafety(0))
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())
	_, err = e.nodes[0].Do("DEL", key) // node 0 lost it: it refuses
	require.NoError(t, err)

	check := func(op string, err error) {
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		for k, liar := range liars {
			n := qe.Nodes[3+k]
			require.Equal(t, redlock.NodeFailed, n.Status, "%s: %s answered +OK", op, liar.Addr())
			require.ErrorContains(t, n.Err, "unexpected reply", op)
			require.ErrorContains(t, n.Err, liar.Addr(), op)
		}
	}
	err = l.Extend(ctxT(t, 10*time.Second), longTTL)
	require.ErrorIs(t, err, redlock.ErrLockLost, "nodes 1 and 2 extended, two of five")
	check("Extend", err)
	err = l.Unlock(ctxT(t, 10*time.Second))
	require.ErrorIs(t, err, redlock.ErrLockLost, "nodes 1 and 2 released, two of five")
	check("Unlock", err)
	awaitAbsent(t, e.nodes, key)
}

// A node that answers SET NX GET with +OK, which Redis never answers to
// SET with GET, failed: its error names the reply. It was reported as
// "held by another owner", which sent the reader looking for a holder
// that did not exist.
func TestTryLock_aNodeThatAnswersSETWithOKFailsNamingTheReply(t *testing.T) {
	e := newEnv(t, 2)
	liars := []*fakeServer{scriptLiar(t, "+OK\r\n"), scriptLiar(t, "+OK\r\n"), scriptLiar(t, "+OK\r\n")}
	addrs := []string{liars[0].Addr(), liars[1].Addr(), liars[2].Addr()}
	pools := append(append([]pool.Pool(nil), e.pools...), newPools(t, addrs)...)
	c := newClient(t, pools, redlock.WithRestartSafety(0))
	key := newKey(t)
	_, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	qe := asQuorumError(t, err)
	for k, addr := range addrs {
		n := qe.Nodes[2+k]
		require.Equal(t, redlock.NodeFailed, n.Status, "%s answered +OK", addr)
		require.ErrorContains(t, n.Err, `unexpected reply "OK"`)
		require.ErrorContains(t, n.Err, addr)
		require.NotContains(t, err.Error(), addr+" held by another owner")
	}
	awaitAbsent(t, e.nodes, key) // the real nodes' grants were released
}
