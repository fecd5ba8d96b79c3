package pool_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

// Helpers shared by the tests of package pool: bounds, a redis-server per
// test, pools closed when the test ends, error checks, a Receiver that
// records its replies. The fake node is in fake_test.go.

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

// requireTimeout checks that err is a *NodeError naming addr, and a
// timeout.
func requireTimeout(t *testing.T, err error, addr string) *pool.NodeError {
	t.Helper()
	ne := requireNodeError(t, err, addr)
	require.True(t, isTimeout(err), "want a timeout, got %v", err)
	return ne
}

// isTimeout reports whether err says that the node did not answer before
// a deadline.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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

// clientList returns CLIENT LIST as seen by the admin connection.
func clientList(t *testing.T, s *redistest.Server) string {
	t.Helper()
	list, err := redis.String(s.Do("CLIENT", "LIST"))
	require.NoError(t, err)
	return list
}

var concatScript = pool.NewScript(1, `
redis.call("SET", KEYS[1], ARGV[1])
return redis.call("GET", KEYS[1]) .. ":" .. ARGV[2]`)

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
