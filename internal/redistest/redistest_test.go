package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requireRedis skips the test if redis-server is not installed.
func requireRedis(t *testing.T) {
	t.Helper()
	if _, err := Path(); err != nil && os.Getenv(requireEnv) != "1" {
		t.Skip(err)
	}
}

// processGone reports whether pid no longer exists (it was reaped).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestLifecycle(t *testing.T) {
	requireRedis(t)
	c, err := Start(3, Options{})
	require.NoError(t, err)

	nodes := c.Nodes()
	require.Len(t, nodes, 3)
	require.Len(t, c.Addrs(), 3)
	seen := map[string]bool{}
	var pids []int
	for i, s := range nodes {
		require.Same(t, s, c.Node(i))
		require.Equal(t, c.Addrs()[i], s.Addr())
		require.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())
		require.False(t, seen[s.Addr()], "duplicate address %s", s.Addr())
		seen[s.Addr()] = true
		require.True(t, s.Running())

		pong, err := redis.String(s.Do("PING"))
		require.NoError(t, err)
		require.Equal(t, "PONG", pong)

		save, err := redis.Strings(s.Do("CONFIG", "GET", "save"))
		require.NoError(t, err)
		require.Equal(t, []string{"save", ""}, save)
		pids = append(pids, s.pid())
	}

	// SET/GET.
	n0 := c.Node(0)
	_, err = n0.Do("SET", "k", "v")
	require.NoError(t, err)
	v, err := redis.String(n0.Do("GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)

	// Kill makes Do fail; Kill is idempotent.
	n1 := c.Node(1)
	_, err = n1.Do("SET", "k", "v")
	require.NoError(t, err)
	oldPid, addr := n1.pid(), n1.Addr()
	require.NoError(t, n1.Kill())
	require.False(t, n1.Running())
	require.True(t, processGone(oldPid))
	_, err = n1.Do("PING")
	require.Error(t, err)
	require.NoError(t, n1.Kill())

	// Restart on the same port; data is gone.
	require.NoError(t, n1.Restart())
	require.True(t, n1.Running())
	require.Equal(t, addr, n1.Addr())
	require.NotEqual(t, oldPid, n1.pid())
	pids = append(pids, n1.pid())
	_, err = redis.String(n1.Do("GET", "k"))
	require.ErrorIs(t, err, redis.ErrNil)
	require.Error(t, n1.Restart(), "restart of a running node")

	// Pause makes commands time out; Resume makes them work again.
	n2 := c.Node(2)
	require.NoError(t, n2.Pause())
	require.True(t, n2.Running())
	_, err = n2.do(200*time.Millisecond, "PING")
	require.Error(t, err)
	require.True(t, isTimeout(err), "want a timeout, got %v", err)
	require.NoError(t, n2.Resume())
	_, err = n2.do(200*time.Millisecond, "PING")
	require.NoError(t, err)

	// Close stops everything, even a paused node, and is idempotent.
	require.NoError(t, n2.Pause())
	start := time.Now()
	require.NoError(t, c.Close())
	require.Less(t, time.Since(start), termGrace, "paused node should stop on SIGTERM after SIGCONT")
	require.NoError(t, c.Close())
	for _, pid := range pids {
		require.True(t, processGone(pid), "pid %d still exists", pid)
	}
	for _, s := range nodes {
		require.False(t, s.Running())
		require.NoDirExists(t, s.dir)
		require.ErrorIs(t, s.Restart(), errClosed)
	}

	goleak.VerifyNone(t)
}

func TestPasswordAndArgs(t *testing.T) {
	c := StartT(t, 1, Options{Password: "s3cret", Args: []string{"--maxmemory", "1mb"}})
	s := c.Node(0)

	mem, err := redis.Strings(s.Do("CONFIG", "GET", "maxmemory"))
	require.NoError(t, err)
	require.Equal(t, []string{"maxmemory", "1048576"}, mem)

	_, err = do(s.Addr(), "", time.Second, "PING")
	require.ErrorContains(t, err, "NOAUTH")

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	_, err = s.Do("PING")
	require.NoError(t, err, "password kept across restart")
}

func TestStartFailureCleansUp(t *testing.T) {
	requireRedis(t)
	dir := t.TempDir()
	_, err := Start(2, Options{Dir: dir, Args: []string{"--no-such-directive", "x"}})
	require.Error(t, err)
	require.ErrorContains(t, err, "no-such-directive", "error should include the log tail")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "temp dirs left behind")
}

func TestStartBadN(t *testing.T) {
	_, err := Start(0, Options{})
	require.Error(t, err)
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	s := StartT(t, 1).Node(0)
	require.NoError(t, s.Kill())

	// Hold the port for a while: Restart keeps retrying until it is free.
	busy, err := net.Listen("tcp", s.Addr())
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, func() { busy.Close() })
	require.NoError(t, s.Restart())
	_, err = s.Do("PING")
	require.NoError(t, err)

	// Hold it for good: Restart gives up.
	require.NoError(t, s.Kill())
	held, err := net.Listen("tcp", s.Addr())
	require.NoError(t, err)
	defer held.Close()
	start := time.Now()
	err = s.Restart()
	require.ErrorIs(t, err, errAddrInUse)
	require.Less(t, time.Since(start), bindRetryFor+readyTimeout)
	require.False(t, s.Running())
}

func TestConcurrentUse(t *testing.T) {
	s := StartT(t, 1).Node(0)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = s.Running()
				_, _ = s.do(50*time.Millisecond, "PING")
			}
		}()
	}
	for range 5 {
		require.NoError(t, s.Pause())
		require.NoError(t, s.Resume())
		require.NoError(t, s.Kill())
		require.Error(t, s.Pause())
		require.NoError(t, s.Restart())
	}
	close(stop)
	wg.Wait()
	_, err := s.Do("PING")
	require.NoError(t, err)
}

func TestPath(t *testing.T) {
	t.Setenv(binaryEnv, "/nonexistent/redis-server")
	_, err := Path()
	require.ErrorContains(t, err, "apt-get install redis-server")

	t.Setenv(binaryEnv, "")
	t.Setenv("PATH", t.TempDir())
	_, err = Path()
	require.ErrorContains(t, err, "apt-get install redis-server")
}

// fakeTB records how StartT ends a test.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runStartT runs StartT with f in its own goroutine, as Goexit requires.
func runStartT(f *fakeTB) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartT(f, 1)
	}()
	<-done
}

func TestStartTMissingRedis(t *testing.T) {
	t.Setenv(binaryEnv, "")
	t.Setenv("PATH", t.TempDir())

	t.Setenv(requireEnv, "")
	f := &fakeTB{}
	runStartT(f)
	require.Contains(t, f.skipped, "apt-get install redis-server")
	require.Empty(t, f.fatal)

	t.Setenv(requireEnv, "1")
	f = &fakeTB{}
	runStartT(f)
	require.Contains(t, f.fatal, "apt-get install redis-server")
	require.Empty(t, f.skipped)
}

func TestDurableKeepsDataAcrossRestartUnlessEmptied(t *testing.T) {
	s := StartT(t, 1, Options{Durable: true}).Node(0)
	aof, err := redis.Strings(s.Do("CONFIG", "GET", "appendfsync"))
	require.NoError(t, err)
	require.Equal(t, []string{"appendfsync", "always"}, aof)
	_, err = s.Do("SET", "k", "v", "PX", 60000)
	require.NoError(t, err)
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	v, err := redis.String(s.Do("GET", "k"))
	require.NoError(t, err, "a durable node keeps what it acknowledged")
	require.Equal(t, "v", v)
	ttl, err := redis.Int64(s.Do("PTTL", "k"))
	require.NoError(t, err)
	require.Greater(t, ttl, int64(50000), "and its expiry")
	require.NotZero(t, s.Pid())

	require.NoError(t, s.Kill())
	require.Zero(t, s.Pid())
	require.NoError(t, s.RestartEmpty())
	_, err = redis.String(s.Do("GET", "k"))
	require.ErrorIs(t, err, redis.ErrNil)
	// It stays durable after coming back empty.
	_, err = s.Do("SET", "k2", "v2")
	require.NoError(t, err)
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	v, err = redis.String(s.Do("GET", "k2"))
	require.NoError(t, err)
	require.Equal(t, "v2", v)

	require.NoError(t, s.Pause())
	require.True(t, s.Paused())
	require.NoError(t, s.Resume())
	require.False(t, s.Paused())
}
