package pool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// FromRedigo: a redigo pool the caller already has, whose connections may
// have no timeouts at all.

// newRedigoPool returns a redigo pool whose connections have no timeouts
// at all, the worst case FromRedigo must cope with.
func newRedigoPool(addr string) *redis.Pool {
	return &redis.Pool{
		Dial:    func() (redis.Conn, error) { return redis.Dial("tcp", addr) },
		MaxIdle: 4,
	}
}

// fromRedigo wraps a fresh redigo pool for addr, naming it name; the
// pool is closed when the test ends.
func fromRedigo(t *testing.T, addr, name string) pool.Pool {
	t.Helper()
	p := closable(t, pool.FromRedigo(newRedigoPool(addr), name))
	t.Cleanup(func() { p.Close() })
	return p
}

// closingPool is what FromRedigo's value is: a Pool with a Close method,
// which the Pool interface does not have.
type closingPool interface {
	pool.Pool
	io.Closer
}

// closable returns p with its Close method.
func closable(t *testing.T, p pool.Pool) closingPool {
	t.Helper()
	c, ok := p.(closingPool)
	require.True(t, ok, "FromRedigo's pool (%T) has a Close method", p)
	return c
}

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

func TestFromRedigo_Do_andEvalWork(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := fromRedigo(t, s.Addr(), "node-a")
	require.Equal(t, "node-a", p.Addr())
	ctx := ctxTimeout(t, waitLimit)

	_, err := p.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	v, err := redis.String(p.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)

	got, err := redis.String(p.Eval(ctx, concatScript, "sk", "x", "y"))
	require.NoError(t, err)
	require.Equal(t, "x:y", got)
	_, err = s.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	got, err = redis.String(p.Eval(ctx, concatScript, "sk", "z", "w"))
	require.NoError(t, err)
	require.Equal(t, "z:w", got)

	_, err = p.Do(ctx, "HGET", "k", "f")
	ne := requireNodeError(t, err, "node-a")
	require.True(t, ne.Replied())
	require.Equal(t, "HGET", ne.Op)
}

func TestFromRedigo_Do_timesOutOnAPausedNodeAtTheContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := fromRedigo(t, s.Addr(), "paused-node-a")
	ctx := ctxTimeout(t, waitLimit)
	_, err := p.Do(ctx, "SET", "k", "v0") // leave an idle connection
	require.NoError(t, err)
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err = p.Do(ctxTimeout(t, shortDeadline), "SET", "k", "v1")
	requireTimeout(t, err, "paused-node-a")
	require.Less(t, time.Since(start), boundedBy)

	// A fresh connection (dialled without timeouts) is bounded too.
	start = time.Now()
	errs := make(chan error, 2)
	ctxs := []context.Context{ctxTimeout(t, shortDeadline), ctxTimeout(t, shortDeadline)}
	for _, c := range ctxs {
		go func() {
			_, err := p.Eval(c, concatScript, "k", "v2", "x")
			errs <- err
		}()
	}
	for range ctxs {
		requireTimeout(t, <-errs, "paused-node-a")
	}
	require.Less(t, time.Since(start), boundedBy)

	require.NoError(t, s.Resume())
	for i := range 10 {
		want := fmt.Sprintf("echo-%d", i)
		got, err := redis.String(p.Do(ctx, "ECHO", want))
		require.NoError(t, err)
		require.Equal(t, want, got, "a stale reply was handed to a later command")
	}
}

// Without a deadline, a call is bounded by the documented 1s.
func TestFromRedigo_Do_isBoundedByASecondWithoutADeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := fromRedigo(t, s.Addr(), s.Addr())
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := p.Do(context.Background(), "PING")
	elapsed := time.Since(start)
	requireTimeout(t, err, s.Addr())
	require.Less(t, elapsed, 5*time.Second)
	require.GreaterOrEqual(t, elapsed, time.Second-100*time.Millisecond)
}

func TestFromRedigo_Do_afterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := closable(t, pool.FromRedigo(newRedigoPool(s.Addr()), "node-a"))
	_, err := p.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.NoError(t, p.Close())

	_, err = p.Do(ctxTimeout(t, waitLimit), "GET", "k")
	requireNodeError(t, err, "node-a")
	require.ErrorIs(t, err, pool.ErrClosed)

	_, err = p.Eval(ctxTimeout(t, waitLimit), concatScript, "k", "a", "b")
	requireNodeError(t, err, "node-a")
	require.ErrorIs(t, err, pool.ErrClosed)
}

func TestFromRedigo_withANilPoolIsANilPool(t *testing.T) {
	// A nil Pool is what redlock.New rejects by name ("pool 2 is nil").
	require.Nil(t, pool.FromRedigo(nil, "nil-node"))
}

func TestFromRedigo_Do_withADialThatIgnoresContextsReturnsAtTheDeadline(t *testing.T) {
	t.Parallel()
	f := silentNode(t)
	p := closable(t, pool.FromRedigo(stuckDial(f.addr), "stuck-a"))
	defer within(t, boundedBy, "Close", func() { p.Close() })

	for _, call := range []func(ctx context.Context) error{
		func(ctx context.Context) error { _, err := p.Do(ctx, "PING"); return err },
		func(ctx context.Context) error { _, err := p.Eval(ctx, concatScript, "k", "a", "b"); return err },
	} {
		var err error
		within(t, boundedBy, "a call with a short deadline", func() { err = call(ctxTimeout(t, shortDeadline)) })
		ne := requireNodeError(t, err, "stuck-a")
		require.Equal(t, "dial", ne.Op)
		require.True(t, isTimeout(err), "want a timeout, got %v", err)
	}
}

func TestFromRedigo_DialPubSub_withADialThatIgnoresContextsReturnsAtTheDeadline(t *testing.T) {
	t.Parallel()
	f := silentNode(t)
	p := closable(t, pool.FromRedigo(stuckDial(f.addr), "stuck-a"))
	defer p.Close()

	var err error
	within(t, boundedBy, "DialPubSub with a short deadline", func() {
		_, err = p.(pool.Subscriber).DialPubSub(ctxTimeout(t, shortDeadline), func(pool.PubSubEvent) {})
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
	c, err := p.(pool.Subscriber).DialPubSub(ctx, func(pool.PubSubEvent) {})
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
