package pool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

// A paused node (SIGSTOP: the kernel accepts connections, nothing answers):
// every call ends by its deadline or the I/O timeout, and no reply is ever
// handed to another caller.

func TestNode_Do_timesOutOnAPausedNodeAtTheContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithIOTimeout(30*time.Second))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "SET", "k", "v")
	elapsed := time.Since(start)
	ne := requireTimeout(t, err, s.Addr())
	require.False(t, ne.Replied())
	require.Less(t, elapsed, boundedBy)
	require.GreaterOrEqual(t, elapsed, shortDeadline-50*time.Millisecond, "it waited for the deadline")
}

func TestNode_Do_isBoundedByTheIOTimeoutWithoutAContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const ioTimeout = 300 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithIOTimeout(ioTimeout))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(context.Background(), "GET", "k")
	elapsed := time.Since(start)
	requireTimeout(t, err, s.Addr())
	require.Less(t, elapsed, boundedBy)
	require.GreaterOrEqual(t, elapsed, ioTimeout-50*time.Millisecond)

	// A later context deadline does not extend the I/O timeout either.
	// (The error may be the timeout, or the broken connection that the
	// first call's timeout left behind.)
	start = time.Now()
	_, err = n.Do(ctxTimeout(t, time.Minute), "GET", "k")
	requireNodeError(t, err, s.Addr())
	require.Less(t, time.Since(start), boundedBy)
}

func TestNode_Eval_timesOutOnAPausedNode(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithIOTimeout(30*time.Second))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Eval(ctxTimeout(t, shortDeadline), concatScript, "k", "a", "b")
	ne := requireTimeout(t, err, s.Addr())
	require.Equal(t, "EVALSHA", ne.Op)
	require.Less(t, time.Since(start), boundedBy)
}

func TestNode_Do_onAPausedNodeWithAPasswordTimesOutAtTheContextDeadline(t *testing.T) {
	// With a password, dialling runs AUTH; that too must respect the
	// caller's deadline rather than the (long) I/O timeout.
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"), pool.WithClientName("paused-x"),
		pool.WithDB(2), pool.WithIOTimeout(30*time.Second), pool.WithDialTimeout(5*time.Second))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "PING")
	requireTimeout(t, err, s.Addr())
	require.Less(t, time.Since(start), boundedBy, "the caller's deadline bounds the call, not the dial timeout")
	require.NotContains(t, err.Error(), "s3cret-pass")
	require.NoError(t, s.Resume()) // lets the pending dial end before Close waits for it
}

func TestNode_Do_afterATimeoutEveryCommandGetsItsOwnReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithIOTimeout(30*time.Second))
	ctx := ctxTimeout(t, time.Minute)

	_, err := n.Do(ctx, "SET", "k", "v0")
	require.NoError(t, err)

	// Several callers time out with their commands on the wire.
	const conns = 4
	errs := make(chan error, conns)
	for i := range conns {
		go func() {
			_, err := n.Do(ctx, "ECHO", fmt.Sprintf("warm-%d", i))
			errs <- err
		}()
	}
	for range conns {
		require.NoError(t, <-errs)
	}

	require.NoError(t, s.Pause())
	ctxs := make([]context.Context, conns)
	for i := range ctxs {
		ctxs[i] = ctxTimeout(t, shortDeadline)
	}
	for i := range conns {
		go func() {
			_, err := n.Do(ctxs[i], "SET", "k", "v1")
			errs <- err
		}()
	}
	for range conns {
		requireTimeout(t, <-errs, s.Addr())
	}
	require.NoError(t, s.Resume())

	// The SETs may or may not have run once the node resumed, but their
	// "OK" must never be handed to a later command.
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Contains(t, []string{"v0", "v1"}, v)

	for i := range 25 {
		want := fmt.Sprintf("echo-%d", i)
		got, err := redis.String(n.Do(ctx, "ECHO", want))
		require.NoError(t, err)
		require.Equal(t, want, got)

		count, err := redis.Int(n.Do(ctx, "INCR", "counter"))
		require.NoError(t, err)
		require.Equal(t, i+1, count)

		pong, err := redis.String(n.Do(ctx, "PING"))
		require.NoError(t, err)
		require.Equal(t, "PONG", pong)
	}
}

// A I/O timeout shorter than the deadline slack must still be honoured as
// a minimum: a call on a healthy node never fails before the I/O timeout,
// however the calls are spaced. On a busy machine a PING can take longer
// than 5ms: such a call may fail, but not early; and the call after it may
// fail early, when the reply the failed call left behind times out and
// breaks the connection, so it is not checked.
func TestNode_Do_withAShortIOTimeoutNeverTimesOutEarly(t *testing.T) {
	s := startNode(t)
	for _, timeout := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond} {
		n, err := pool.New(s.Addr(), pool.WithIOTimeout(timeout))
		require.NoError(t, err)
		failed, prevOK := 0, true
		for i := range 15 {
			start := time.Now()
			_, err := n.Do(context.Background(), "PING")
			if elapsed := time.Since(start); err != nil {
				failed++
				require.False(t, prevOK && elapsed < timeout,
					"I/O timeout %v, call %d failed after %v: %v", timeout, i, elapsed, err)
			}
			prevOK = err == nil
			time.Sleep(timeout + 3*time.Millisecond)
		}
		require.Less(t, failed, 15, "I/O timeout %v: no call succeeded", timeout)
		require.NoError(t, n.Close())
	}
}
