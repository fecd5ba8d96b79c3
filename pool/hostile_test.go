package pool_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// hostileReplies are replies a broken or hostile node could send. Without
// checks, each makes redigo panic (a length it cannot allocate), allocate
// tens of gigabytes, recurse without bound or buffer a line without end.
var hostileReplies = []struct{ name, reply string }{
	{"a bulk string of 2^50 bytes", "$1125899906842624\r\n"},
	{"an array of 2^50 elements", "*1125899906842624\r\n"},
	{"a bulk length that overflows int64", "$99999999999999999999\r\n"},
	{"a bulk string of 64 GiB", "$68719476736\r\n"},
	{"arrays that declare 2^21 elements between them", "*1048576\r\n*1048576\r\n"},
	{"arrays nested 100 deep", strings.Repeat("*1\r\n", 100)},
	{"a status line of 2 MiB", "+" + strings.Repeat("a", 2<<20)},
}

// hostileOnce returns a fakeNode whose first connection answers its first
// command with reply; later connections behave.
func hostileOnce(t *testing.T, reply string) *fakeNode {
	return startFake(t, func(i int, c *fakeConn) {
		if i > 0 {
			c.answerAll(pong)
			return
		}
		if _, err := c.readCommand(); err == nil {
			_, _ = io.WriteString(c, reply)
		}
	})
}

func TestNode_Do_failsOnAHostileReplyAndDropsTheConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range hostileReplies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := hostileOnce(t, tc.reply)
			n := newNode(t, f.addr)

			_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
			ne := requireNodeError(t, err, f.addr)
			require.Equal(t, "PING", ne.Op)
			require.ErrorContains(t, err, "malformed or oversized reply")
			require.False(t, ne.Replied())
			waitFor(t, "the client drops the connection", func() bool { return f.dropped.Load() == 1 })

			// The node is dialled again (after a short back-off) and works.
			waitFor(t, "the node answers on a new connection", func() bool {
				_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
				return err == nil
			})
			require.EqualValues(t, 2, f.accepted.Load())
		})
	}
}

// The replies that came before the bad one still reach their callers.
func TestNode_Do_deliversTheRepliesBeforeAHostileOne(t *testing.T) {
	t.Parallel()
	f := hostileOnce(t, "+PONG\r\n$1125899906842624\r\n")
	n := newNode(t, f.addr)

	pong, err := redis.String(n.Do(ctxTimeout(t, waitLimit), "PING"))
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
	_, err = n.Do(ctxTimeout(t, waitLimit), "PING")
	requireNodeError(t, err, f.addr)
	require.ErrorContains(t, err, "malformed or oversized reply")
}

// AUTH is answered while dialling: a hostile answer fails the dial.
func TestNode_Do_failsTheDialOnAHostileAnswerToAUTH(t *testing.T) {
	t.Parallel()
	const password = "hostile-s3cret"
	f := hostileOnce(t, "$1125899906842624\r\n")
	n := newNode(t, f.addr, pool.WithPassword(password))

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	ne := requireNodeError(t, err, f.addr)
	require.Equal(t, "dial", ne.Op)
	require.ErrorContains(t, err, "malformed or oversized reply")
	require.NotContains(t, err.Error(), password)
}

func TestNode_DialPubSub_failsTheReadOfAHostileReply(t *testing.T) {
	t.Parallel()
	for _, tc := range hostileReplies[:2] {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := hostileOnce(t, tc.reply)
			n := newNode(t, f.addr)

			evs := newEvents()
			c, err := n.DialPubSub(ctxTimeout(t, waitLimit), evs.on)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.Subscribe("ch"))
			ev := evs.next(t)
			require.Equal(t, pool.PubSubClosed, ev.Kind)
			requireNodeError(t, ev.Err, f.addr)
			require.ErrorContains(t, ev.Err, "malformed or oversized reply")
		})
	}
}

// redigo panics on a length it cannot allocate. FromRedigo's pools cannot
// check what their connections read, but the panic must not escape.
func TestFromRedigo_Do_failsOnAHostileReplyAndDropsTheConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range hostileReplies[:3] {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := hostileOnce(t, tc.reply)
			p := fromRedigo(t, f.addr, "hostile-a")

			_, err := p.Do(ctxTimeout(t, waitLimit), "PING")
			ne := requireNodeError(t, err, "hostile-a")
			require.Equal(t, "PING", ne.Op)
			require.ErrorContains(t, err, "malformed or oversized reply")
			waitFor(t, "the client drops the connection", func() bool { return f.dropped.Load() == 1 })

			// The broken connection was not put back in the pool.
			pong, err := redis.String(p.Do(ctxTimeout(t, waitLimit), "PING"))
			require.NoError(t, err)
			require.Equal(t, "PONG", pong)
			require.EqualValues(t, 2, f.accepted.Load())
		})
	}
}

func TestFromRedigo_DialPubSub_failsTheReadOfAHostileReply(t *testing.T) {
	t.Parallel()
	f := hostileOnce(t, "*1125899906842624\r\n")
	p := fromRedigo(t, f.addr, "hostile-a")

	evs := newEvents()
	c, err := p.(pool.Subscriber).DialPubSub(ctxTimeout(t, waitLimit), evs.on)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	require.NoError(t, c.Subscribe("ch"))
	ev := evs.next(t)
	require.Equal(t, pool.PubSubClosed, ev.Kind)
	requireNodeError(t, ev.Err, "hostile-a")
	require.ErrorContains(t, ev.Err, "malformed or oversized reply")
	require.Less(t, time.Since(start), boundedBy)
}

// A node that declares a 64 MiB bulk string on every connection, and never
// sends it, gets one: the others' connections are dropped with a bad
// reply, so that the client holds one such buffer at a time, not one per
// connection (64 connections made 4 GiB). The calls use many keys, so
// that every connection carries some (a key's connection is drawn from a
// hash with a random seed).
func TestNode_Do_largeBulkStringsAreBoundedOverTheNodesConnections(t *testing.T) {
	t.Parallel()
	const conns, calls = 4, 64
	f := startFake(t, func(_ int, c *fakeConn) {
		c.answerAll(func([]string) string { return "$67108864\r\n" })
	})
	n := newNode(t, f.addr, pool.WithConns(conns), pool.WithIOTimeout(2*time.Second))
	errs := make(chan error, calls)
	for k := range calls {
		go func() {
			_, err := n.Do(ctxTimeout(t, waitLimit), "GET", fmt.Sprintf("k%d", k))
			errs <- err
		}()
	}
	over := 0
	for range calls {
		err := <-errs
		requireNodeError(t, err, f.addr)
		if strings.Contains(err.Error(), "declared at once") {
			over++
		}
	}
	require.GreaterOrEqual(t, over, conns-1, "calls failed for the node's allowance")
}
