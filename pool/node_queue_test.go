package pool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

// The request queue, callers that leave, and Close.

// stalledDial returns a node whose first dial cannot finish while s is
// paused (AUTH gets no answer), so that commands pile up in its queue.
func stalledDial(t *testing.T, queueSize int) (*redistest.Server, *pool.Node) {
	t.Helper()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"), pool.WithQueueSize(queueSize),
		pool.WithDialTimeout(10*time.Second), pool.WithIOTimeout(10*time.Second))
	require.NoError(t, s.Pause())
	t.Cleanup(func() { _ = s.Resume() }) // before the node's Close, which waits for the dial
	return s, n
}

// A caller that finds the queue full waits for room until its deadline,
// and then fails with a *NodeError whose Op is "queue".
func TestNode_Do_withAFullQueueFailsWithAQueueError(t *testing.T) {
	t.Parallel()
	const queueSize, callers = 4, 20
	s, n := stalledDial(t, queueSize)

	ctx := ctxTimeout(t, 300*time.Millisecond)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, err := n.Do(ctx, "PING")
			errs <- err
		}()
	}
	full := 0
	for range callers {
		var err error
		select {
		case err = <-errs:
		case <-time.After(waitLimit):
			t.Fatalf("a caller with a 300ms deadline had not returned %v later", waitLimit)
		}
		if ne := requireTimeout(t, err, s.Addr()); ne.Op == "queue" {
			require.ErrorContains(t, err, "queue full")
			full++
		}
	}
	require.GreaterOrEqual(t, full, callers-queueSize, "callers that found no room in the queue")

	require.NoError(t, s.Resume())
	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
}

// A node that stops answering must not hold up callers beyond their
// deadlines, however many commands are waiting for replies.
func TestNode_Do_manyCallersOnAStalledNodeAllReturnByTheirDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithIOTimeout(10*time.Second))
	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.NoError(t, s.Pause())

	const callers = 2000
	ctx := ctxTimeout(t, time.Second)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, err := n.Do(ctx, "PING")
			errs <- err
		}()
	}
	for range callers {
		var err error
		select {
		case err = <-errs:
		case <-time.After(waitLimit):
			t.Fatalf("a caller with a 1s deadline had not returned %v later", waitLimit)
		}
		requireNodeError(t, err, s.Addr())
	}

	require.NoError(t, s.Resume())
	waitFor(t, "the node answers again", func() bool {
		_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
		return err == nil
	})
}

// The package documents that "a context that is cancelled before the
// command is sent stops it": a caller that gave up must not have its
// command run later.
func TestNode_Do_doesNotSendACommandWhoseCallerHasLeft(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	// Generous dial and I/O timeouts: the dial (AUTH) outlives the pause.
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"),
		pool.WithDialTimeout(10*time.Second), pool.WithIOTimeout(10*time.Second))
	require.NoError(t, s.Pause())

	// The connection cannot be set up (AUTH gets no answer), so the SET
	// is still waiting to be sent when its caller gives up.
	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "SET", "late", "v1")
	requireTimeout(t, err, s.Addr())
	require.Less(t, time.Since(start), boundedBy, "the caller's deadline bounds the call")
	require.NoError(t, s.Resume())

	// Same key, same connection: the GET is answered after anything that
	// was queued before it.
	_, err = redis.String(n.Do(ctxTimeout(t, waitLimit), "GET", "late"))
	require.ErrorIs(t, err, redis.ErrNil, "the SET of a caller that had already timed out was sent to the node")
}

// Close is documented to fail calls in flight with ErrClosed.
func TestNode_Close_failsCallsInFlightWithErrClosed(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n, err := pool.New(s.Addr(), pool.WithIOTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })

	res := make(chan error, 1)
	ctx := ctxTimeout(t, 10*time.Second)
	go func() {
		_, err := n.Do(ctx, "BLPOP", "queue", "8")
		res <- err
	}()
	waitFor(t, "BLPOP is blocked", func() bool { return strings.Contains(clientList(t, s), "cmd=blpop") })

	start := time.Now()
	require.NoError(t, n.Close())
	require.Less(t, time.Since(start), boundedBy, "Close must not wait for the blocked command")
	select {
	case err = <-res:
	case <-time.After(waitLimit):
		t.Fatal("the call in flight did not return after Close")
	}
	requireNodeError(t, err, s.Addr())
	require.ErrorIs(t, err, pool.ErrClosed, "a call in flight when Close ran")
}

func TestNode_Do_afterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n, err := pool.New(s.Addr(), pool.WithClientName("closing-x"))
	require.NoError(t, err)
	_, err = n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.Contains(t, clientList(t, s), "name=closing-x")

	require.NoError(t, n.Close())
	waitFor(t, "the idle connection is closed", func() bool {
		return !strings.Contains(clientList(t, s), "name=closing-x")
	})

	_, err = n.Do(ctxTimeout(t, waitLimit), "GET", "k")
	ne := requireNodeError(t, err, s.Addr())
	require.ErrorIs(t, err, pool.ErrClosed)
	require.Equal(t, "GET", ne.Op)

	_, err = n.Eval(ctxTimeout(t, waitLimit), concatScript, "k", "a", "b")
	requireNodeError(t, err, s.Addr())
	require.ErrorIs(t, err, pool.ErrClosed)

	require.NoError(t, n.Close(), "a second Close is harmless")
}
