package pool_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// Transactions (StartTx): MULTI, the commands and EXEC in one write, for
// a waiting Lock's first round.

func TestNode_StartTx_runsTheCommandsAndRepliesWithEXECsArray(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	rec := newRecorder(1)
	n.StartTx(rec, "tx:k", [][]any{{"SET", "tx:k", "v", "PX", 60000}, {"INCR", "tx:n"}, {"GET", "tx:k"}})
	r := rec.next(t)
	require.NoError(t, r.err)
	vs, ok := r.v.([]any)
	require.True(t, ok, "EXEC's array: %#v", r.v)
	require.Len(t, vs, 3)
	require.Equal(t, "OK", vs[0])
	require.Equal(t, int64(1), vs[1])
	require.Equal(t, []byte("v"), vs[2])
}

// A command the node refuses as it is queued aborts the transaction:
// nothing runs, the refusal is the error, and the connection serves the
// next command.
func TestNode_StartTx_aCommandRefusedAsQueuedRunsNothingAndIsTheError(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	rec := newRecorder(1)
	n.StartTx(rec, "tx:k", [][]any{{"SET", "tx:k", "v"}, {"NOSUCHCOMMAND", "tx:k"}})
	r := rec.next(t)
	ne := requireNodeError(t, r.err, s.Addr())
	require.Equal(t, "MULTI", ne.Op)
	require.ErrorContains(t, r.err, "unknown command")
	require.True(t, ne.Replied(), "the node answered")
	_, err := redis.String(s.Do("GET", "tx:k"))
	require.ErrorIs(t, err, redis.ErrNil, "the SET did not run")

	v, err := redis.String(n.Do(ctxTimeout(t, waitLimit), "ECHO", "next"))
	require.NoError(t, err)
	require.Equal(t, "next", v, "the connection is out of the transaction")
}

// A user who may run MULTI but not EXEC: the node discards the
// transaction (EXECABORT, naming the refusal), and the connection serves
// the next command, which runs rather than being queued.
func TestNode_StartTx_anEXECRefusedLeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	_, err := s.Do("ACL", "SETUSER", "noexec", "on", ">pw", "~*", "&*", "+@all", "-exec")
	require.NoError(t, err)
	n := newNode(t, s.Addr(), pool.WithUser("noexec", "pw"))
	ctx := ctxTimeout(t, waitLimit)
	_, err = n.Do(ctx, "PING")
	require.NoError(t, err)
	rec := newRecorder(1)
	n.StartTx(rec, "tx:k", [][]any{{"SET", "tx:k", "v"}})
	r := rec.next(t)
	ne := requireNodeError(t, r.err, s.Addr())
	var re pool.ReplyError
	require.ErrorAs(t, r.err, &re)
	require.True(t, strings.HasPrefix(string(re), "NOPERM "), "the refusal, not EXECABORT: %q", re)
	require.Contains(t, string(re), "'exec'")
	require.True(t, ne.Replied())
	_, err = redis.String(s.Do("GET", "tx:k"))
	require.ErrorIs(t, err, redis.ErrNil, "the SET did not run")

	v, err := redis.String(n.Do(ctx, "SET", "tx:after", "1"))
	require.NoError(t, err)
	require.Equal(t, "OK", v, "run, not queued")
	got, err := redis.String(s.Do("GET", "tx:after"))
	require.NoError(t, err)
	require.Equal(t, "1", got)
}

// A transaction keeps its place among the commands started on its key,
// with one connection or several.
func TestNode_StartTx_keepsTheOrderOfTheCommandsOnItsKey(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	for _, conns := range []int{1, 4} {
		n := newNode(t, s.Addr(), pool.WithConns(conns))
		key := "tx:order:" + strconv.Itoa(conns)
		const rounds = 200
		rec := newRecorder(3 * rounds)
		for i := range rounds {
			n.Start(rec, "SET", key, i)
			n.StartTx(rec, key, [][]any{{"GET", key}, {"SET", key, i + 1000}})
			n.Start(rec, "GET", key)
		}
		for i := range rounds {
			r := rec.next(t)
			require.NoError(t, r.err)
			r = rec.next(t)
			require.NoError(t, r.err)
			vs := r.v.([]any)
			require.Equal(t, []byte(strconv.Itoa(i)), vs[0], "conns %d, round %d: the transaction saw the SET before it", conns, i)
			r = rec.next(t)
			require.NoError(t, r.err)
			require.Equal(t, []byte(strconv.Itoa(i+1000)), r.v, "conns %d, round %d: the GET after it saw its SET", conns, i)
		}
	}
}

// A node that refuses EXEC without discarding the transaction (no server
// does; a hostile one may) could go on queueing the commands behind it:
// the pool drops the connection, and the node is dialled again.
func TestNode_StartTx_anEXECRefusedWithoutDiscardingDropsTheConnection(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(i int, c *fakeConn) {
		if i > 0 {
			c.answerAll(pong)
			return
		}
		c.answerAll(func(args []string) string {
			switch strings.ToUpper(args[0]) {
			case "MULTI":
				return "+OK\r\n"
			case "EXEC":
				return "-ERR not now\r\n"
			case "PING":
				return "+PONG\r\n"
			}
			return "+QUEUED\r\n"
		})
	})
	n := newNode(t, f.addr)
	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	rec := newRecorder(1)
	n.StartTx(rec, "tx:k", [][]any{{"SET", "tx:k", "v"}})
	r := rec.next(t)
	ne := requireNodeError(t, r.err, f.addr)
	require.ErrorContains(t, r.err, "EXEC refused (ERR not now)")
	require.False(t, ne.Replied(), "the connection's state is unknown: it is not a reply to count")
	waitFor(t, "the client drops the connection", func() bool { return f.dropped.Load() == 1 })
	waitFor(t, "the node answers on a new connection", func() bool {
		_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
		return err == nil
	})
}
