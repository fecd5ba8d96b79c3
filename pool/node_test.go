package pool_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Bounds used throughout. They are generous on purpose: the assertions say
// "a call is bounded", not "a call is fast".
const (
	shortDeadline = 200 * time.Millisecond // a caller's deadline on a stuck node
	boundedBy     = 2 * time.Second        // such a call must end well within this
	waitLimit     = 5 * time.Second        // for anything else the test waits on
)

// startNode starts one redis-server for the test (skipping without one).
func startNode(t *testing.T, opts ...redistest.Options) *redistest.Server {
	t.Helper()
	return redistest.StartT(t, 1, opts...).Node(0)
}

// newNode returns a pool for addr that is closed when the test ends.
func newNode(t *testing.T, addr string, opts ...pool.Option) *pool.Node {
	t.Helper()
	n, err := pool.New(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// ctxTimeout returns a context that expires after d.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// requireNodeError checks that err is a *NodeError naming addr.
func requireNodeError(t *testing.T, err error, addr string) *pool.NodeError {
	t.Helper()
	require.Error(t, err)
	var ne *pool.NodeError
	require.ErrorAs(t, err, &ne, "want a *pool.NodeError, got %T: %v", err, err)
	require.Equal(t, addr, ne.Addr)
	require.Contains(t, err.Error(), addr, "the error must name the node")
	return ne
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond every few milliseconds for up to waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, waitLimit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clientList returns CLIENT LIST as seen by the admin connection.
func clientList(t *testing.T, s *redistest.Server) string {
	t.Helper()
	list, err := redis.String(s.Do("CLIENT", "LIST"))
	require.NoError(t, err)
	return list
}

// ---------------------------------------------------------------------------
// New: validation, no connection at construction.

func TestNew_rejectsAnAddressThatIsNotHostPort(t *testing.T) {
	for _, addr := range []string{"nohost", "", "host:", ":", "a:b:c"} {
		n, err := pool.New(addr)
		require.Error(t, err, "New(%q)", addr)
		require.Nil(t, n)
		require.Contains(t, err.Error(), strconv.Quote(addr), "the error must quote the address")
	}
}

func TestNew_rejectsOutOfRangeOptionsNamingTheValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  pool.Option
		want string // the value as the message must show it
	}{
		{"zero dial timeout", pool.WithDialTimeout(0), "0s"},
		{"negative dial timeout", pool.WithDialTimeout(-time.Second), "-1s"},
		{"zero read timeout", pool.WithReadTimeout(0), "0s"},
		{"negative read timeout", pool.WithReadTimeout(-2 * time.Second), "-2s"},
		{"zero write timeout", pool.WithWriteTimeout(0), "0s"},
		{"negative write timeout", pool.WithWriteTimeout(-3 * time.Millisecond), "-3ms"},
		{"zero connections", pool.WithConns(0), "0"},
		{"negative connections", pool.WithConns(-7), "-7"},
		{"too many connections", pool.WithConns(65), "65"},
		{"zero queue size", pool.WithQueueSize(0), "0"},
		{"negative queue size", pool.WithQueueSize(-3), "-3"},
		{"negative ping after idle", pool.WithPingAfterIdle(-5 * time.Second), "-5s"},
		{"negative db", pool.WithDB(-4), "-4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := pool.New("127.0.0.1:6379", tc.opt)
			require.Error(t, err)
			require.Nil(t, n)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNew_rejectsAUsernameWithoutAPassword(t *testing.T) {
	_, err := pool.New("127.0.0.1:6379", pool.WithUser("bob", ""))
	require.Error(t, err)
	require.Contains(t, err.Error(), `"bob"`)
}

func TestNew_acceptsTheEdgesOfEachRange(t *testing.T) {
	for _, opts := range [][]pool.Option{
		{pool.WithPingAfterIdle(0), pool.WithDB(0), pool.WithConns(1), pool.WithQueueSize(1)},
		{pool.WithConns(64)},
	} {
		n, err := pool.New("127.0.0.1:6379", opts...)
		require.NoError(t, err)
		require.NoError(t, n.Close())
	}

	// WithPassword after WithUser drops the user, so this is valid.
	n, err := pool.New("127.0.0.1:6379", pool.WithUser("bob", ""), pool.WithPassword("pw"))
	require.NoError(t, err)
	require.NoError(t, n.Close())
}

func TestNew_doesNotConnectUntilTheFirstCall(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t)) // nothing listens there
	n := newNode(t, addr)
	require.Equal(t, addr, n.Addr())

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	ne := requireNodeError(t, err, addr)
	require.Equal(t, "dial", ne.Op, "NodeError.Op is documented as \"dial\" while connecting: %v", err)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.False(t, ne.Replied())
}

// ---------------------------------------------------------------------------
// NodeError.

func TestNodeError_Error_namesTheNodeTheCommandAndTheCause(t *testing.T) {
	cause := errors.New("boom")
	ne := &pool.NodeError{Addr: "node-a:6379", Op: "SET", Err: cause}
	require.Contains(t, ne.Error(), "node-a:6379")
	require.Contains(t, ne.Error(), "SET")
	require.Contains(t, ne.Error(), "boom")
	require.Same(t, cause, errors.Unwrap(ne))
	require.ErrorIs(t, ne, cause)
}

func TestNodeError_Timeout_recognisesDeadlineErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		{os.ErrDeadlineExceeded, true},
		{&net.DNSError{Err: "slow", IsTimeout: true}, true},
		{&net.DNSError{Err: "no such host"}, false},
		{context.Canceled, false},
		{redis.Error("ERR timeout is not an integer"), false},
		{errors.New("i/o timeout"), false},
	} {
		ne := &pool.NodeError{Addr: "a:1", Op: "GET", Err: tc.err}
		require.Equal(t, tc.want, ne.Timeout(), "Timeout() for %v", tc.err)
	}
}

func TestNodeError_Replied_recognisesRedisErrorReplies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redis.Error("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{fmt.Errorf("wrapped: %w", redis.Error("READONLY")), true},
		{context.DeadlineExceeded, false},
		{errors.New("ERR looks like a reply but is not"), false},
	} {
		ne := &pool.NodeError{Addr: "a:1", Op: "GET", Err: tc.err}
		require.Equal(t, tc.want, ne.Replied(), "Replied() for %v", tc.err)
	}
}

// ---------------------------------------------------------------------------
// Contexts that are already over.

func TestNode_Do_withACancelledContextFailsWithoutConnecting(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	n := newNode(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Do(ctx, "get", "k")
	ne := requireNodeError(t, err, addr)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "GET", ne.Op, "it failed before dialling")
	require.False(t, ne.Timeout())

	_, err = n.Eval(ctx, redis.NewScript(0, "return 1"))
	ne = requireNodeError(t, err, addr)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "EVALSHA", ne.Op)
}

func TestNode_Do_withAnExpiredDeadlineTimesOutWithoutConnecting(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	n := newNode(t, addr)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := n.Do(ctx, "PING")
	ne := requireNodeError(t, err, addr)
	require.True(t, ne.Timeout())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, "PING", ne.Op)
}

// ---------------------------------------------------------------------------
// Commands and scripts on a healthy node.

func TestNode_Do_setsAndGets(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	ok, err := redis.String(n.Do(ctx, "SET", "k", "v", "PX", 60000))
	require.NoError(t, err)
	require.Equal(t, "OK", ok)
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)

	_, err = redis.String(n.Do(ctx, "GET", "missing"))
	require.ErrorIs(t, err, redis.ErrNil, "a missing key is a nil reply, not an error")

	// Written where the admin connection sees it.
	v, err = redis.String(s.Do("GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

var concatScript = redis.NewScript(1, `
redis.call("SET", KEYS[1], ARGV[1])
return redis.call("GET", KEYS[1]) .. ":" .. ARGV[2]`)

func TestNode_Eval_runsAScriptWithKeysAndArgs(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	got, err := redis.String(n.Eval(ctx, concatScript, "sk", "value", "tail"))
	require.NoError(t, err)
	require.Equal(t, "value:tail", got)
	v, err := redis.String(s.Do("GET", "sk"))
	require.NoError(t, err)
	require.Equal(t, "value", v)
}

func TestNode_Eval_fallsBackToEvalAfterScriptFlush(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	got, err := redis.String(n.Eval(ctx, concatScript, "sk", "one", "1"))
	require.NoError(t, err)
	require.Equal(t, "one:1", got)
	exists, err := redis.Ints(s.Do("SCRIPT", "EXISTS", concatScript.Hash()))
	require.NoError(t, err)
	require.Equal(t, []int{1}, exists, "the script is cached after the first Eval")

	_, err = s.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	exists, err = redis.Ints(s.Do("SCRIPT", "EXISTS", concatScript.Hash()))
	require.NoError(t, err)
	require.Equal(t, []int{0}, exists)

	got, err = redis.String(n.Eval(ctx, concatScript, "sk", "two", "2"))
	require.NoError(t, err, "NOSCRIPT must not reach the caller")
	require.Equal(t, "two:2", got)
	v, err := redis.String(s.Do("GET", "sk"))
	require.NoError(t, err)
	require.Equal(t, "two", v, "the script ran exactly with the new arguments")
	exists, err = redis.Ints(s.Do("SCRIPT", "EXISTS", concatScript.Hash()))
	require.NoError(t, err)
	require.Equal(t, []int{1}, exists, "EVAL loaded the script again")
}

func TestNode_Eval_reportsAScriptErrorAsAReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	script := redis.NewScript(0, `return redis.error_reply("MYERR boom")`)

	_, err := n.Eval(ctxTimeout(t, waitLimit), script)
	ne := requireNodeError(t, err, s.Addr())
	require.Contains(t, []string{"EVALSHA", "EVAL"}, ne.Op)
	require.True(t, ne.Replied())
	require.False(t, ne.Timeout())
	var re redis.Error
	require.ErrorAs(t, err, &re)
	require.Contains(t, string(re), "MYERR boom")
}

func TestNode_Do_reportsRedisErrorRepliesAsReplied(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	_, err := n.Do(ctx, "SET", "str", "not-a-number")
	require.NoError(t, err)

	_, err = n.Do(ctx, "HGET", "str", "field")
	ne := requireNodeError(t, err, s.Addr())
	require.Equal(t, "HGET", ne.Op)
	require.True(t, ne.Replied())
	require.False(t, ne.Timeout())
	var re redis.Error
	require.ErrorAs(t, err, &re)
	require.True(t, strings.HasPrefix(string(re), "WRONGTYPE"), "got %q", re)

	_, err = n.Do(ctx, "incr", "str")
	ne = requireNodeError(t, err, s.Addr())
	require.Equal(t, "INCR", ne.Op, "the command is named in upper case")
	require.True(t, ne.Replied())
	require.ErrorAs(t, err, &re)
	require.Contains(t, string(re), "not an integer")

	// An error reply does not spoil the connection.
	v, err := redis.String(n.Do(ctx, "GET", "str"))
	require.NoError(t, err)
	require.Equal(t, "not-a-number", v)
}

// ---------------------------------------------------------------------------
// A paused node (SIGSTOP): the kernel accepts connections, nothing answers.

func TestNode_Do_timesOutOnAPausedNodeAtTheContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithReadTimeout(30*time.Second))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "SET", "k", "v")
	elapsed := time.Since(start)
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.False(t, ne.Replied())
	require.Less(t, elapsed, boundedBy)
	require.GreaterOrEqual(t, elapsed, shortDeadline-50*time.Millisecond, "it waited for the deadline")
}

func TestNode_Do_isBoundedByTheReadTimeoutWithoutAContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const readTimeout = 300 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithReadTimeout(readTimeout))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(context.Background(), "GET", "k")
	elapsed := time.Since(start)
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, elapsed, boundedBy)
	require.GreaterOrEqual(t, elapsed, readTimeout-50*time.Millisecond)

	// A later context deadline does not extend the read timeout either.
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
	n := newNode(t, s.Addr(), pool.WithReadTimeout(30*time.Second))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Eval(ctxTimeout(t, shortDeadline), concatScript, "k", "a", "b")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Equal(t, "EVALSHA", ne.Op)
	require.Less(t, time.Since(start), boundedBy)
}

func TestNode_Do_onAPausedNodeWithAPasswordTimesOutAtTheContextDeadline(t *testing.T) {
	// With a password, dialling runs AUTH; that too must respect the
	// caller's deadline rather than the (long) read timeout.
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"), pool.WithClientName("paused-x"),
		pool.WithDB(2), pool.WithReadTimeout(30*time.Second), pool.WithDialTimeout(5*time.Second))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "PING")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, time.Since(start), boundedBy, "the caller's deadline bounds the call, not the dial timeout")
	require.NotContains(t, err.Error(), "s3cret-pass")
	require.NoError(t, s.Resume()) // lets the pending dial end before Close waits for it
}

func TestNode_Do_afterATimeoutEveryCommandGetsItsOwnReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithReadTimeout(30*time.Second))
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
		ne := requireNodeError(t, <-errs, s.Addr())
		require.True(t, ne.Timeout())
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

// ---------------------------------------------------------------------------
// A killed node.

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

// The ping of an idle connection is part of the call, so it must respect
// the caller's deadline, not only the read timeout.
func TestNode_Do_withPingAfterIdleOnAPausedNodeTimesOutAtTheContextDeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithPingAfterIdle(time.Millisecond), pool.WithReadTimeout(5*time.Second))

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the idle connection is now due a ping
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err = n.Do(ctxTimeout(t, shortDeadline), "PING")
	elapsed := time.Since(start)
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, elapsed, boundedBy,
		"a call with a %v deadline took %v: the idle-connection PING ignored the deadline", shortDeadline, elapsed)
}

// ---------------------------------------------------------------------------
// The request queue and Close.

// stalledDial returns a node whose first dial cannot finish while s is
// paused (AUTH gets no answer), so that commands pile up in its queue.
func stalledDial(t *testing.T, queueSize int) (*redistest.Server, *pool.Node) {
	t.Helper()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"), pool.WithQueueSize(queueSize),
		pool.WithDialTimeout(10*time.Second), pool.WithReadTimeout(10*time.Second))
	require.NoError(t, s.Pause())
	t.Cleanup(func() { _ = s.Resume() }) // before the node's Close, which waits for the dial
	return s, n
}

func TestNode_Do_withAFullQueueFailsWithErrQueueFull(t *testing.T) {
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
		ne := requireNodeError(t, err, s.Addr())
		require.True(t, ne.Timeout(), "want a timeout, got %v", err)
		if errors.Is(err, pool.ErrQueueFull) {
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
	n := newNode(t, s.Addr(), pool.WithReadTimeout(10*time.Second))
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

// Close is documented to fail calls in flight with ErrClosed.
func TestNode_Close_failsCallsInFlightWithErrClosed(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n, err := pool.New(s.Addr(), pool.WithReadTimeout(10*time.Second))
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

// The package documents that "a context that is cancelled before the
// command is sent stops it": a caller that gave up must not have its
// command run later.
func TestNode_Do_doesNotSendACommandWhoseCallerHasLeft(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	// Generous dial and read timeouts: the dial (AUTH) outlives the pause.
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"),
		pool.WithDialTimeout(10*time.Second), pool.WithReadTimeout(10*time.Second))
	require.NoError(t, s.Pause())

	// The connection cannot be set up (AUTH gets no answer), so the SET
	// is still waiting to be sent when its caller gives up.
	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "SET", "late", "v1")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, time.Since(start), boundedBy, "the caller's deadline bounds the call")
	require.NoError(t, s.Resume())

	// Same key, same connection: the GET is answered after anything that
	// was queued before it.
	_, err = redis.String(n.Do(ctxTimeout(t, waitLimit), "GET", "late"))
	require.ErrorIs(t, err, redis.ErrNil, "the SET of a caller that had already timed out was sent to the node")
}

// ---------------------------------------------------------------------------
// Authentication, database, client name.

func TestNode_Do_withAWrongPasswordFailsWithoutLeakingPasswords(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("wrong-pass-xyz"))

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	ne := requireNodeError(t, err, s.Addr())
	require.NotContains(t, err.Error(), "wrong-pass-xyz")
	require.NotContains(t, err.Error(), "s3cret-pass")
	require.Contains(t, err.Error(), "WRONGPASS")
	require.True(t, ne.Replied(), "the node answered WRONGPASS: %v", err)
	require.False(t, ne.Timeout())
}

func TestNode_Do_withTheRightPasswordWorks(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"))
	ctx := ctxTimeout(t, waitLimit)

	_, err := n.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)

	// Without a password the node answers NOAUTH.
	anon := newNode(t, s.Addr())
	_, err = anon.Do(ctx, "GET", "k")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Replied())
	require.Contains(t, err.Error(), "NOAUTH")
}

func TestNode_Do_redactsThePasswordFromErrorText(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"))

	// Redis quotes an unknown subcommand in its error reply.
	_, err := n.Do(ctxTimeout(t, waitLimit), "CONFIG", "s3cret-pass")
	ne := requireNodeError(t, err, s.Addr())
	var re redis.Error
	require.ErrorAs(t, err, &re, "redaction keeps the redis.Error reachable")
	require.Contains(t, string(re), "s3cret-pass", "sanity: the reply itself quotes the password")
	require.True(t, ne.Replied())
	require.NotContains(t, err.Error(), "s3cret-pass")
	require.Contains(t, err.Error(), "xxxxx")
}

func TestNode_Do_authenticatesAsAnACLUser(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	_, err := s.Do("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all")
	require.NoError(t, err)
	ctx := ctxTimeout(t, waitLimit)

	n := newNode(t, s.Addr(), pool.WithUser("alice", "alicepw"))
	who, err := redis.String(n.Do(ctx, "ACL", "WHOAMI"))
	require.NoError(t, err)
	require.Equal(t, "alice", who)

	bad := newNode(t, s.Addr(), pool.WithUser("alice", "bad-alice-pw"))
	_, err = bad.Do(ctx, "PING")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Replied())
	require.NotContains(t, err.Error(), "bad-alice-pw")
	require.NotContains(t, err.Error(), "alicepw")
}

func TestNode_Do_usesTheSelectedDB(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	ctx := ctxTimeout(t, waitLimit)

	n3 := newNode(t, s.Addr(), pool.WithDB(3))
	_, err := n3.Do(ctx, "SET", "dbkey", "in-three")
	require.NoError(t, err)
	info, err := redis.String(n3.Do(ctx, "CLIENT", "INFO"))
	require.NoError(t, err)
	require.Contains(t, info, " db=3 ")

	keyspace, err := redis.String(s.Do("INFO", "keyspace"))
	require.NoError(t, err)
	require.Contains(t, keyspace, "db3:keys=1")
	require.NotContains(t, keyspace, "db0:")

	n0 := newNode(t, s.Addr())
	_, err = redis.String(n0.Do(ctx, "GET", "dbkey"))
	require.ErrorIs(t, err, redis.ErrNil, "db 0 does not have the key")
	v, err := redis.String(n3.Do(ctx, "GET", "dbkey"))
	require.NoError(t, err)
	require.Equal(t, "in-three", v)
}

func TestNode_Do_namesItsConnections(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithClientName("bench-x"))

	name, err := redis.String(n.Do(ctxTimeout(t, waitLimit), "CLIENT", "GETNAME"))
	require.NoError(t, err)
	require.Equal(t, "bench-x", name)
	require.Contains(t, clientList(t, s), "name=bench-x", "the idle connection shows in CLIENT LIST")
}

// ---------------------------------------------------------------------------
// Close.

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

// ---------------------------------------------------------------------------
// TLS.

// tlsFiles writes a fresh CA and a server certificate for 127.0.0.1 to a
// temporary directory and returns the CA pool and the file names.
func tlsFiles(t *testing.T) (roots *x509.CertPool, certFile, keyFile, caFile string) {
	t.Helper()
	dir := t.TempDir()
	writePEM := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	notBefore := time.Now().Add(-time.Hour)
	notAfter := time.Now().Add(24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redlock test CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	srvKeyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	require.NoError(t, err)

	roots = x509.NewCertPool()
	roots.AddCert(caCert)
	return roots,
		writePEM("server.crt", "CERTIFICATE", srvDER),
		writePEM("server.key", "PRIVATE KEY", srvKeyDER),
		writePEM("ca.crt", "CERTIFICATE", caDER)
}

// startTLSNode starts a node that also listens for TLS, and returns it with
// the TLS address and the CA pool. It skips the test when redis-server was
// built without TLS.
func startTLSNode(t *testing.T) (s *redistest.Server, tlsAddr string, roots *x509.CertPool) {
	t.Helper()
	if _, err := redistest.Path(); err != nil {
		redistest.StartT(t, 1) // skips, or fails under REDLOCK_REQUIRE_REDIS=1
	}
	roots, certFile, keyFile, caFile := tlsFiles(t)
	port := freePort(t)
	c, err := redistest.Start(1, redistest.Options{Args: []string{
		// The plain port stays: the harness checks readiness on it.
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", certFile,
		"--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile,
		"--tls-auth-clients", "no",
	}})
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "tls") &&
			(strings.Contains(err.Error(), "Bad directive") || strings.Contains(err.Error(), "not supported")) {
			t.Skipf("redis-server was built without TLS support: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing cluster: %v", err)
		}
	})
	return c.Node(0), "127.0.0.1:" + strconv.Itoa(port), roots
}

func TestNode_Do_worksOverTLS(t *testing.T) {
	t.Parallel()
	_, tlsAddr, roots := startTLSNode(t)
	cfg := &tls.Config{RootCAs: roots}
	n := newNode(t, tlsAddr, pool.WithTLS(cfg))
	ctx := ctxTimeout(t, waitLimit)

	pong, err := redis.String(n.Do(ctx, "PING"))
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
	_, err = n.Do(ctx, "SET", "k", "over-tls")
	require.NoError(t, err)
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "over-tls", v)
	require.Empty(t, cfg.ServerName, "New must not modify the caller's tls.Config")
}

func TestNode_Do_overTLSRejectsAnUntrustedCertificate(t *testing.T) {
	t.Parallel()
	_, tlsAddr, roots := startTLSNode(t)
	ctx := ctxTimeout(t, waitLimit)

	n := newNode(t, tlsAddr, pool.WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}))
	_, err := n.Do(ctx, "PING")
	requireNodeError(t, err, tlsAddr)
	require.ErrorContains(t, err, "certificate")
	var cve *tls.CertificateVerificationError
	require.ErrorAs(t, err, &cve)

	// A trusted CA but the wrong server name also fails.
	wrongName := newNode(t, tlsAddr, pool.WithTLS(&tls.Config{RootCAs: roots, ServerName: "other.example"}))
	_, err = wrongName.Do(ctx, "PING")
	requireNodeError(t, err, tlsAddr)
	require.ErrorAs(t, err, &cve)
}

func TestNode_Do_overTLSOnAPausedNodeTimesOutAtTheContextDeadline(t *testing.T) {
	// The TLS handshake is part of the call: it must respect the caller's
	// deadline (and WithDialTimeout), like the TCP connect and AUTH do.
	t.Parallel()
	s, tlsAddr, roots := startTLSNode(t)
	n := newNode(t, tlsAddr, pool.WithTLS(&tls.Config{RootCAs: roots}))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "PING")
	elapsed := time.Since(start)
	ne := requireNodeError(t, err, tlsAddr)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, elapsed, boundedBy,
		"a call with a %v deadline took %v: the TLS handshake ignored the deadline", shortDeadline, elapsed)
}

// silentThenProxy listens on 127.0.0.1: the first connection it accepts is
// held open and never answered (a TLS handshake that gets lost), later
// ones are forwarded to target. stop closes everything and waits for its
// goroutines.
func silentThenProxy(t *testing.T, target string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		conns   []net.Conn
		stopped bool
		wg      sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			c.Close() // accepted or dialled while stopping
		}
		conns = append(conns, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			if first {
				continue // hold it, say nothing
			}
			up, err := net.DialTimeout("tcp", target, waitLimit)
			if err != nil {
				c.Close()
				continue
			}
			track(up)
			for _, dir := range [][2]net.Conn{{c, up}, {up, c}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = io.Copy(dir[0], dir[1])
					dir[0].Close()
					dir[1].Close()
				}()
			}
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		stopped = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// WithDialTimeout is documented to bound the TLS handshake. A handshake
// that gets no answer must be given up after it, so that the node is
// dialled again, instead of stalling every call for redigo's own 10s
// handshake timeout.
func TestNode_Do_overTLSGivesUpALostHandshakeAfterTheDialTimeout(t *testing.T) {
	t.Parallel()
	_, tlsAddr, roots := startTLSNode(t)
	const dialTimeout = 300 * time.Millisecond
	proxy, stop := silentThenProxy(t, tlsAddr)
	n := newNode(t, proxy, pool.WithTLS(&tls.Config{RootCAs: roots}),
		pool.WithDialTimeout(dialTimeout), pool.WithReadTimeout(5*time.Second))
	t.Cleanup(stop) // runs before the node's Close: frees a stuck handshake

	// The first dial meets the silent connection.
	start := time.Now()
	_, err := n.Do(ctxTimeout(t, 2*dialTimeout), "PING")
	ne := requireNodeError(t, err, proxy)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, time.Since(start), boundedBy)

	// Soon after the dial timeout (and the short back-off that follows a
	// failed dial), the node must be dialled again, through the proxy.
	var pong string
	for time.Since(start) < 3*time.Second {
		if pong, err = redis.String(n.Do(ctxTimeout(t, 500*time.Millisecond), "PING")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "%v after the first dial began, the node had not been dialled again", time.Since(start))
	require.Equal(t, "PONG", pong)
}

// ---------------------------------------------------------------------------
// FromRedigo.

// newRedigoPool returns a redigo pool whose connections have no timeouts
// at all, the worst case FromRedigo must cope with.
func newRedigoPool(addr string) *redis.Pool {
	return &redis.Pool{
		Dial:    func() (redis.Conn, error) { return redis.Dial("tcp", addr) },
		MaxIdle: 4,
	}
}

// fromRedigo wraps a fresh redigo pool for addr, naming it name.
func fromRedigo(t *testing.T, addr, name string) pool.Pool {
	t.Helper()
	p := pool.FromRedigo(newRedigoPool(addr), name)
	t.Cleanup(func() { p.Close() })
	return p
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
	ne := requireNodeError(t, err, "paused-node-a")
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
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
		ne := requireNodeError(t, <-errs, "paused-node-a")
		require.True(t, ne.Timeout())
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

func TestFromRedigo_Do_isBoundedByDefaultCommandTimeoutWithoutADeadline(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := fromRedigo(t, s.Addr(), s.Addr())
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := p.Do(context.Background(), "PING")
	elapsed := time.Since(start)
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, elapsed, 5*time.Second)
	require.GreaterOrEqual(t, elapsed, pool.DefaultCommandTimeout-100*time.Millisecond)
}

func TestFromRedigo_Do_afterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	p := pool.FromRedigo(newRedigoPool(s.Addr()), "node-a")
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

// ---------------------------------------------------------------------------
// Concurrency.

func TestNode_Do_isSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithConns(4))
	ctx := ctxTimeout(t, 30*time.Second)

	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				want := fmt.Sprintf("w%d-%d", w, i)
				got, err := redis.String(n.Do(ctx, "ECHO", want))
				if err == nil && got != want {
					err = fmt.Errorf("ECHO %s returned %s", want, got)
				}
				if err == nil {
					_, err = n.Eval(ctx, concatScript, "k"+want, want, "x")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// ---------------------------------------------------------------------------
// Starter: Start and StartEval.

// recorder is a Receiver that counts its calls and passes each reply on.
type recorder struct {
	calls   atomic.Int32
	replies chan reply
}

type reply struct {
	v   any
	err error
}

func newRecorder(buf int) *recorder { return &recorder{replies: make(chan reply, buf)} }

func (r *recorder) Receive(v any, err error) {
	r.calls.Add(1)
	select {
	case r.replies <- reply{v, err}:
	default: // never block, as the interface requires
	}
}

// next waits for the next reply.
func (r *recorder) next(t *testing.T) reply {
	t.Helper()
	select {
	case rep := <-r.replies:
		return rep
	case <-time.After(waitLimit):
		t.Fatalf("no reply after %v", waitLimit)
		return reply{}
	}
}

func TestNode_Start_deliversEachReplyToItsReceiverOnce(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	var _ pool.Starter = n

	set := newRecorder(2)
	n.Start(set, "SET", "k", "v")
	rep := set.next(t)
	require.NoError(t, rep.err)
	require.Equal(t, "OK", rep.v)

	get := newRecorder(2)
	n.Start(get, "GET", "k")
	rep = get.next(t)
	require.NoError(t, rep.err)
	v, err := redis.String(rep.v, rep.err)
	require.NoError(t, err)
	require.Equal(t, "v", v)

	bad := newRecorder(2)
	n.Start(bad, "HGET", "k", "f")
	rep = bad.next(t)
	ne := requireNodeError(t, rep.err, s.Addr())
	require.True(t, ne.Replied())
	require.Equal(t, "HGET", ne.Op)

	// A PING afterwards has gone through the same connection: every
	// earlier reply has been delivered, and none twice.
	_, err = n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.Equal(t, int32(1), set.calls.Load())
	require.Equal(t, int32(1), get.calls.Load())
	require.Equal(t, int32(1), bad.calls.Load())
}

func TestNode_StartEval_fallsBackToEvalAfterScriptFlush(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())

	for i, flush := range []bool{false, true, false} {
		if flush {
			_, err := s.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
		r := newRecorder(2)
		arg := fmt.Sprintf("v%d", i)
		n.StartEval(r, concatScript, "sk", arg, "t")
		rep := r.next(t)
		require.NoError(t, rep.err, "round %d", i)
		got, err := redis.String(rep.v, rep.err)
		require.NoError(t, err)
		require.Equal(t, arg+":t", got)
		_, err = n.Do(ctxTimeout(t, waitLimit), "PING", "sk") // same connection: drains
		require.NoError(t, err)
		require.Equal(t, int32(1), r.calls.Load(), "round %d: NOSCRIPT must not reach the receiver", i)
	}
}

func TestNode_Start_onAClosedNodeReceivesErrClosedBeforeReturning(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	n, err := pool.New(addr)
	require.NoError(t, err)
	require.NoError(t, n.Close())

	r := newRecorder(4)
	n.Start(r, "GET", "k")
	n.StartEval(r, concatScript, "k", "a", "b")
	require.Equal(t, int32(2), r.calls.Load(), "Receive runs before Start returns")
	for range 2 {
		rep := r.next(t)
		requireNodeError(t, rep.err, addr)
		require.ErrorIs(t, rep.err, pool.ErrClosed)
	}
}

func TestNode_Start_onAPausedNodeReceivesATimeoutWithinTheReadTimeout(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const readTimeout = 300 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithReadTimeout(readTimeout))
	require.NoError(t, s.Pause())

	start := time.Now()
	r := newRecorder(2)
	n.Start(r, "GET", "k")
	rep := r.next(t)
	elapsed := time.Since(start)
	ne := requireNodeError(t, rep.err, s.Addr())
	require.True(t, ne.Timeout(), "want a timeout, got %v", rep.err)
	require.Less(t, elapsed, boundedBy)
}

func TestNode_Start_withAFullQueueReceivesErrQueueFullAtOnce(t *testing.T) {
	t.Parallel()
	const queueSize, calls = 4, 20
	s, n := stalledDial(t, queueSize)

	r := newRecorder(calls)
	start := time.Now()
	for range calls {
		n.Start(r, "PING")
	}
	require.Less(t, time.Since(start), boundedBy, "Start blocked while the node was being dialled")
	require.GreaterOrEqual(t, int(r.calls.Load()), calls-queueSize,
		"calls that found the queue full are answered before Start returns")
	for range r.calls.Load() {
		rep := r.next(t)
		requireNodeError(t, rep.err, s.Addr())
		require.ErrorIs(t, rep.err, pool.ErrQueueFull)
	}

	// The queued ones are answered once the node is back.
	require.NoError(t, s.Resume())
	waitFor(t, "every call is answered", func() bool { return r.calls.Load() >= calls })
	for range len(r.replies) {
		require.NoError(t, r.next(t).err)
	}
	require.Equal(t, int32(calls), r.calls.Load(), "one Receive per call")
}

// Start is documented to return at once, and Receive to be called exactly
// once per call, even when the node stops answering.
func TestNode_Start_manyCallsOnAStalledNodeNeverBlock(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithReadTimeout(10*time.Second))
	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.NoError(t, s.Pause())

	const calls = 2000
	r := newRecorder(calls)
	start := time.Now()
	for range calls {
		n.Start(r, "PING")
	}
	require.Less(t, time.Since(start), boundedBy, "Start blocked on a stalled node")

	require.NoError(t, s.Resume())
	waitFor(t, "every call is answered", func() bool { return r.calls.Load() >= calls })
	for range calls {
		if rep := r.next(t); rep.err != nil {
			requireNodeError(t, rep.err, s.Addr())
		}
	}
	require.Equal(t, int32(calls), r.calls.Load(), "one Receive per call")
}

// Receive is documented to be called exactly once per call, whatever
// happens: here Close races with callers that are starting commands.
func TestNode_Start_racingWithCloseStillReceivesEveryReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	for round := range 40 {
		n, err := pool.New(s.Addr())
		require.NoError(t, err)
		r := newRecorder(0)
		var started atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 400 {
					started.Add(1)
					n.Start(r, "PING")
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond) // Close early, midway or late
		require.NoError(t, n.Close())
		wg.Wait()
		deadline := time.Now().Add(waitLimit)
		for r.calls.Load() < started.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, started.Load(), r.calls.Load(),
			"round %d: a call started while Close ran never got its Receive", round)
	}
}

// A read timeout shorter than the deadline slack must still be honoured as
// a minimum: a call on a healthy node never fails before the read timeout,
// however the calls are spaced. On a busy machine a PING can take longer
// than 5ms: such a call may fail, but not early; and the call after it may
// fail early, when the reply the failed call left behind times out and
// breaks the connection, so it is not checked.
func TestNode_Do_withAShortReadTimeoutNeverTimesOutEarly(t *testing.T) {
	s := startNode(t)
	for _, timeout := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond} {
		n, err := pool.New(s.Addr(), pool.WithReadTimeout(timeout))
		require.NoError(t, err)
		failed, prevOK := 0, true
		for i := range 15 {
			start := time.Now()
			_, err := n.Do(context.Background(), "PING")
			if elapsed := time.Since(start); err != nil {
				failed++
				require.False(t, prevOK && elapsed < timeout,
					"read timeout %v, call %d failed after %v: %v", timeout, i, elapsed, err)
			}
			prevOK = err == nil
			time.Sleep(timeout + 3*time.Millisecond)
		}
		require.Less(t, failed, 15, "read timeout %v: no call succeeded", timeout)
		require.NoError(t, n.Close())
	}
}
