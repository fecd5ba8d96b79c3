package pool_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// A TLS client on a plain node fails its handshake after the dial timeout
// (or at once, when the node happens to answer the ClientHello). Callers
// whose deadlines are much shorter must still learn why: while the node is
// being dialled they are told so, and once a dial failed, every call says
// how.
func TestNode_Do_overTLSOnAPlainNodeReportsTheHandshakeToShortDeadlines(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const password = "tls-plain-s3cret"
	const dialTimeout = 300 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithTLS(&tls.Config{InsecureSkipVerify: true}),
		pool.WithPassword(password), pool.WithDialTimeout(dialTimeout))

	handshake := 0 // calls that reported the failed handshake
	seen := map[string]bool{}
	for start := time.Now(); time.Since(start) < 4*dialTimeout; {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := n.Do(ctx, "PING")
		cancel()
		ne := requireNodeError(t, err, s.Addr())
		require.Equal(t, "dial", ne.Op, "a call on a node that cannot be dialled: %v", err)
		require.NotContains(t, err.Error(), password)
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			t.Log(msg)
		}
		if strings.Contains(err.Error(), "TLS handshake") {
			handshake++
		} else {
			require.Zero(t, handshake, "once a dial failed, every call must say how: %v", err)
			require.ErrorContains(t, err, "still connecting")
			require.True(t, ne.Timeout(), "%v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NotZero(t, handshake, "no call reported the failed handshake")
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
	c, err := n.DialPubSub(ctx)
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

// ---------------------------------------------------------------------------
// FromRedigo.

// silentNode accepts connections and never answers.
func silentNode(t *testing.T) *fakeNode {
	return startFake(t, func(_ int, c *fakeConn) {})
}

// stuckDial is a redigo pool whose Dial (no context, no timeouts) sends
// AUTH to addr and waits for an answer that never comes.
func stuckDial(addr string) *redis.Pool {
	return &redis.Pool{Dial: func() (redis.Conn, error) {
		return redis.Dial("tcp", addr, redis.DialPassword("never-answered"))
	}}
}

// within runs f and fails the test unless it returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s had not returned after %v", what, d)
	}
}

func TestFromRedigo_Do_withADialThatIgnoresContextsReturnsAtTheDeadline(t *testing.T) {
	t.Parallel()
	f := silentNode(t)
	p := pool.FromRedigo(stuckDial(f.addr), "stuck-a")
	defer within(t, boundedBy, "Close", func() { p.Close() })

	for _, call := range []func(ctx context.Context) error{
		func(ctx context.Context) error { _, err := p.Do(ctx, "PING"); return err },
		func(ctx context.Context) error { _, err := p.Eval(ctx, concatScript, "k", "a", "b"); return err },
	} {
		var err error
		within(t, boundedBy, "a call with a short deadline", func() { err = call(ctxTimeout(t, shortDeadline)) })
		ne := requireNodeError(t, err, "stuck-a")
		require.Equal(t, "dial", ne.Op)
		require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	}
}

func TestFromRedigo_DialPubSub_withADialThatIgnoresContextsReturnsAtTheDeadline(t *testing.T) {
	t.Parallel()
	f := silentNode(t)
	p := pool.FromRedigo(stuckDial(f.addr), "stuck-a")
	defer p.Close()

	var err error
	within(t, boundedBy, "DialPubSub with a short deadline", func() {
		_, err = p.(pool.Subscriber).DialPubSub(ctxTimeout(t, shortDeadline))
	})
	ne := requireNodeError(t, err, "stuck-a")
	require.Equal(t, "dial", ne.Op)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}

func TestFromRedigo_Generation_growsWhenTheNodeIsRestartedAndNotOtherwise(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := fromRedigo(t, s.Addr(), s.Addr())
	rc, ok := p.(pool.Reconnector)
	require.True(t, ok, "FromRedigo's pools implement Reconnector")
	require.Zero(t, rc.Generation())

	ctx := ctxTimeout(t, 30*time.Second)
	_, err := p.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	require.EqualValues(t, 1, rc.Generation())
	for range 100 {
		_, err := p.Do(ctx, "GET", "k")
		require.NoError(t, err)
	}
	c, err := p.(pool.Subscriber).DialPubSub(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.EqualValues(t, 1, rc.Generation(), "one connection, reused")

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	waitFor(t, "the restarted node answers", func() bool {
		_, err := p.Do(ctxTimeout(t, waitLimit), "PING")
		return err == nil
	})
	require.Greater(t, rc.Generation(), uint64(1))
}
