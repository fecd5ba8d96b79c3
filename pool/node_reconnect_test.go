package pool_test

import (
	"errors"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// Lost connections: a killed node, the check of an idle connection, the
// reconnect back-off, and Generation.

func TestNode_Do_failsOnAKilledNodeAndWorksAgainAfterRestart(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())

	_, err := n.Do(ctxTimeout(t, waitLimit), "SET", "k", "v")
	require.NoError(t, err)
	require.NoError(t, s.Kill())

	// The idle connection is dead.
	_, err = n.Do(ctxTimeout(t, waitLimit), "GET", "k")
	ne := requireNodeError(t, err, s.Addr())
	require.False(t, ne.Replied())

	// It was dropped: the next call dials, and is refused.
	_, err = n.Do(ctxTimeout(t, waitLimit), "GET", "k")
	requireNodeError(t, err, s.Addr())
	require.ErrorIs(t, err, syscall.ECONNREFUSED)

	require.NoError(t, s.Restart())
	// A failed dial puts the node in a short reconnect back-off (10ms after
	// one failure), during which calls fail at once: retry for a while.
	waitFor(t, "the restarted node answers", func() bool {
		_, err = redis.String(n.Do(ctxTimeout(t, waitLimit), "GET", "k"))
		return err == nil || errors.Is(err, redis.ErrNil)
	})
	require.ErrorIs(t, err, redis.ErrNil, "the restarted node works (and lost its data)")
	_, err = n.Do(ctxTimeout(t, waitLimit), "SET", "k", "v2")
	require.NoError(t, err)
}

func TestNode_Do_withPingAfterIdleReplacesADeadIdleConnection(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithPingAfterIdle(time.Millisecond))

	_, err := n.Do(ctxTimeout(t, waitLimit), "SET", "k", "v")
	require.NoError(t, err)
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	time.Sleep(5 * time.Millisecond) // longer than the ping-after-idle

	pong, err := redis.String(n.Do(ctxTimeout(t, waitLimit), "PING"))
	require.NoError(t, err, "the dead idle connection should have been replaced")
	require.Equal(t, "PONG", pong)
}

// The counterpart of the test above: without the ping, the dead idle
// connection costs one failed call. This shows that the test above
// exercises the ping.
func TestNode_Do_withoutPingAfterIdleFailsOnceOnADeadIdleConnection(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithPingAfterIdle(0))

	_, err := n.Do(ctxTimeout(t, waitLimit), "SET", "k", "v")
	require.NoError(t, err)
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())

	_, err = n.Do(ctxTimeout(t, waitLimit), "PING")
	requireNodeError(t, err, s.Addr())
	_, err = n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
}

// A user whose ACL lacks PING fails the check of every idle connection:
// the connection is replaced, and the call still works. (tests/ checks the
// whole client without the permission.)
func TestNode_Do_withPingAfterIdleRefusedReplacesTheConnection(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	_, err := s.Do("ACL", "SETUSER", "noping", "on", ">noping-pw", "~*", "+@all", "-ping")
	require.NoError(t, err)
	const idle = 50 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithUser("noping", "noping-pw"), pool.WithPingAfterIdle(idle))

	const calls = 3
	for i := range calls {
		if i > 0 {
			time.Sleep(idle + 10*time.Millisecond) // the connection is due a ping
		}
		_, err := n.Do(ctxTimeout(t, waitLimit), "SET", "k", i)
		require.NoError(t, err, "call %d", i)
	}
	require.EqualValues(t, calls, n.Generation(), "each refused PING replaced the connection")
	log, err := redis.Values(s.Do("ACL", "LOG"))
	require.NoError(t, err)
	require.NotEmpty(t, log, "the node logged no refused PING")
}

// The ping of an idle connection is part of the call, so it must respect
// the caller's deadline, not only the I/O timeout.
func TestNode_Do_withPingAfterIdleOnAPausedNodeTimesOutAtTheContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithPingAfterIdle(time.Millisecond), pool.WithIOTimeout(5*time.Second))

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the idle connection is now due a ping
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err = n.Do(ctxTimeout(t, shortDeadline), "PING")
	elapsed := time.Since(start)
	requireTimeout(t, err, s.Addr())
	require.Less(t, elapsed, boundedBy,
		"a call with a %v deadline took %v: the idle-connection PING ignored the deadline", shortDeadline, elapsed)
}

// When the node is dialled again after a failure, the commands that
// started the dial wait for it; commands that come meanwhile fail at once
// with the cause of the failure, as during the back-off.
func TestNode_Do_whileRedialingAfterAFailureLaterCallsFailAtOnceWithTheCause(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := startFake(t, func(i int, c *fakeConn) {
		if _, err := c.readCommand(); err != nil { // AUTH
			return
		}
		if i == 0 {
			_, _ = io.WriteString(c, "-ERR max number of clients reached\r\n")
			return
		}
		<-release
		_, _ = io.WriteString(c, "+OK\r\n")
		c.answerAll(pong)
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the fake's cleanup, which waits for its goroutines
	n := newNode(t, f.addr, pool.WithPassword("redial-s3cret"), pool.WithDialTimeout(waitLimit))

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	ne := requireNodeError(t, err, f.addr)
	require.Equal(t, "dial", ne.Op)
	require.ErrorContains(t, err, "max number of clients reached")
	time.Sleep(20 * time.Millisecond) // past the first back-off (10ms)

	first := make(chan error, 1)
	go func() {
		_, err := n.Do(ctxTimeout(t, 2*waitLimit), "PING")
		first <- err
	}()
	waitFor(t, "the node is dialled again", func() bool { return f.accepted.Load() == 2 })
	_, err = n.Do(ctxTimeout(t, 2*waitLimit), "PING")
	unblock()
	ne = requireNodeError(t, err, f.addr)
	require.Equal(t, "dial", ne.Op)
	require.ErrorContains(t, err, "node down, reconnecting")
	require.ErrorContains(t, err, "max number of clients reached")
	require.NoError(t, <-first, "the call that started the dial waits for it")
}

// A node at its client limit accepts a connection, sends an error and
// closes it. That is not a successful dial: the node must be dialled again
// only after the growing back-off, not for every batch of commands.
func TestNode_Do_onANodeThatAcceptsAndClosesBacksOff(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(_ int, c *fakeConn) {
		_, _ = io.WriteString(c, "-ERR max number of clients reached\r\n")
		c.Close()
	})
	n := newNode(t, f.addr)

	calls := 0
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; calls++ {
		_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
		requireNodeError(t, err, f.addr)
	}
	// The back-off doubles from 10ms to 1s: about 8 dials in 1.5s.
	dials := f.accepted.Load()
	t.Logf("%d dials for %d calls", dials, calls)
	require.LessOrEqual(t, dials, int64(20), "the node was dialled in a loop (%d calls)", calls)
}

// After a failure the back-off is reset only by a link that worked: the
// node is dialled again at once when such a link breaks.
func TestNode_Do_redialsAtOnceAfterALinkThatWorked(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(_ int, c *fakeConn) {
		args, err := c.readCommand()
		if err == nil {
			_, _ = io.WriteString(c, pong(args))
		}
		c.Close() // one reply per connection
	})
	n := newNode(t, f.addr, pool.WithPingAfterIdle(0))
	for i := range 20 {
		waitFor(t, "a reply", func() bool {
			_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
			return err == nil
		})
		require.LessOrEqual(t, f.accepted.Load(), int64(3*(i+1)), "dials")
	}
}

func TestNode_Generation_growsWhenTheNodeIsRestartedAndNotOtherwise(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	var rc pool.Reconnector = n
	require.Zero(t, rc.Generation(), "no connection before the first call")

	ctx := ctxTimeout(t, 30*time.Second)
	_, err := n.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	g := rc.Generation()
	require.NotZero(t, g)
	for range 200 {
		_, err := n.Do(ctx, "GET", "k")
		require.NoError(t, err)
	}
	c, err := n.DialPubSub(ctx, func(pool.PubSubEvent) {})
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.Equal(t, g, rc.Generation(), "no new connection on a healthy node")

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	waitFor(t, "the restarted node answers", func() bool {
		_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
		return err == nil
	})
	require.Greater(t, rc.Generation(), g)
}
