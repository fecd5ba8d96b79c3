package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Settings shared by the tests. They are generous on purpose: the suite
// runs with -race on small, noisy machines, and a node that is merely slow
// must not look dead.
const (
	// testNodeTimeout is the client's node timeout unless a test needs
	// another one.
	testNodeTimeout = time.Second
	// testReadTimeout is every pool's I/O timeout unless a test needs
	// another one.
	testReadTimeout = 2 * time.Second
	// longTTL is a lock TTL that does not run out during a test.
	longTTL = 10 * time.Second
	// quickly bounds calls that must return "at once" rather than after a
	// TTL (longTTL) or a stuck node: far above a healthy round, far below
	// longTTL.
	quickly = 2 * time.Second
	// foreignTTL is the TTL of keys planted by a foreign owner.
	foreignTTL = time.Minute
	// foreignToken is the value a foreign owner stores under a key.
	foreignToken = "foreign-owner-token"
)

// keySeq makes keys unique within the test binary.
var keySeq atomic.Int64

// newKey returns a key no other test uses.
func newKey(t testing.TB) string {
	return fmt.Sprintf("lock:%s:%d", t.Name(), keySeq.Add(1))
}

// ctxT returns a context that ends with the test or after d.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newPools returns one pool.New pool per address, closed when the test ends.
func newPools(t testing.TB, addrs []string, opts ...pool.Option) []pool.Pool {
	t.Helper()
	opts = append([]pool.Option{pool.WithIOTimeout(testReadTimeout)}, opts...)
	pools := make([]pool.Pool, len(addrs))
	for i, a := range addrs {
		p, err := pool.New(a, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	return pools
}

// newClient returns a client over pools with the test node timeout (opts
// may override it), closed when the test ends.
func newClient(t testing.TB, pools []pool.Pool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(testNodeTimeout)}, opts...)
	c, err := redlock.New(pools, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// env is a cluster of real nodes with a pool per node.
type env struct {
	t       testing.TB
	cluster *redistest.Cluster
	nodes   []*redistest.Server
	addrs   []string
	pools   []pool.Pool
}

// newEnv starts n redis-server nodes and makes a pool for each.
func newEnv(t testing.TB, n int, opts ...redistest.Options) *env {
	t.Helper()
	c := redistest.StartT(t, n, opts...)
	return &env{t: t, cluster: c, nodes: c.Nodes(), addrs: c.Addrs(), pools: newPools(t, c.Addrs())}
}

// client returns a new client over the env's pools.
func (e *env) client(opts ...redlock.Option) *redlock.Client {
	e.t.Helper()
	return newClient(e.t, e.pools, opts...)
}

// idx returns the node indexes in [0, n) that satisfy keep.
func idx(n int, keep func(i int) bool) []int {
	var out []int
	for i := range n {
		if keep(i) {
			out = append(out, i)
		}
	}
	return out
}

// holdForeign plants key=foreignToken with foreignTTL on the given nodes,
// as another owner would.
func holdForeign(t testing.TB, nodes []*redistest.Server, key string, which ...int) {
	t.Helper()
	for _, i := range which {
		_, err := nodes[i].Do("SET", key, foreignToken, "PX", foreignTTL.Milliseconds())
		require.NoError(t, err, "node %d", i)
	}
}

// get returns the value of key on s, and whether it exists.
func get(t testing.TB, s *redistest.Server, key string) (string, bool) {
	t.Helper()
	v, err := redis.String(s.Do("GET", key))
	if errors.Is(err, redis.ErrNil) {
		return "", false
	}
	require.NoError(t, err, "GET on %s", s.Addr())
	return v, true
}

// pttl returns PTTL key on s (-2: no key, -1: no TTL).
func pttl(t testing.TB, s *redistest.Server, key string) time.Duration {
	t.Helper()
	ms, err := redis.Int64(s.Do("PTTL", key))
	require.NoError(t, err, "PTTL on %s", s.Addr())
	if ms < 0 {
		return time.Duration(ms)
	}
	return time.Duration(ms) * time.Millisecond
}

// requireValue asserts that key holds want on node i.
func requireValue(t testing.TB, nodes []*redistest.Server, i int, key, want string) {
	t.Helper()
	v, ok := get(t, nodes[i], key)
	require.True(t, ok, "node %d (%s): key %q missing, want %q", i, nodes[i].Addr(), key, want)
	require.Equal(t, want, v, "node %d (%s): key %q", i, nodes[i].Addr(), key)
}

// requireAbsent asserts that key does not exist on node i.
func requireAbsent(t testing.TB, nodes []*redistest.Server, i int, key string) {
	t.Helper()
	v, ok := get(t, nodes[i], key)
	require.False(t, ok, "node %d (%s): key %q still holds %q", i, nodes[i].Addr(), key, v)
}

// requireForeignIntact asserts that the foreign owner still holds key on
// node i with (nearly) the TTL it planted: nobody deleted, overwrote or
// re-timed it.
func requireForeignIntact(t testing.TB, nodes []*redistest.Server, i int, key string) {
	t.Helper()
	requireValue(t, nodes, i, key, foreignToken)
	d := pttl(t, nodes[i], key)
	require.Greater(t, d, foreignTTL-20*time.Second, "node %d: foreign key's TTL was changed to %v", i, d)
	require.LessOrEqual(t, d, foreignTTL, "node %d: foreign key's TTL was changed to %v", i, d)
}

// requireOnlyForeignOrNothing asserts that on every live node key is
// either absent or held by the foreign owner: none of our tokens is left.
func requireOnlyForeignOrNothing(t testing.TB, nodes []*redistest.Server, key string, live ...int) {
	t.Helper()
	for _, i := range live {
		if v, ok := get(t, nodes[i], key); ok {
			require.Equal(t, foreignToken, v, "node %d (%s): key %q left behind", i, nodes[i].Addr(), key)
		}
	}
}

// asQuorumError returns err as a *QuorumError, failing the test if it is not one.
func asQuorumError(t testing.TB, err error) *redlock.QuorumError {
	t.Helper()
	require.Error(t, err)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe, "want a *redlock.QuorumError, got %T: %v", err, err)
	return qe
}

// statusName names a NodeStatus in failure messages.
func statusName(s redlock.NodeStatus) string {
	switch s {
	case redlock.NodePending:
		return "pending"
	case redlock.NodeOK:
		return "ok"
	case redlock.NodeRefused:
		return "refused"
	case redlock.NodeFailed:
		return "failed"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// statuses renders a QuorumError's node statuses for failure messages.
func statuses(qe *redlock.QuorumError) string {
	var b strings.Builder
	for i, n := range qe.Nodes {
		fmt.Fprintf(&b, "[%d %s %s]", i, n.Addr, statusName(n.Status))
	}
	return b.String()
}

// requireNodeFailed asserts that node i failed in the round, that its error
// and the QuorumError's text name its address, and that the node's error
// contains every string in want.
func requireNodeFailed(t testing.TB, qe *redlock.QuorumError, i int, addr string, want ...string) {
	t.Helper()
	require.Less(t, i, len(qe.Nodes))
	n := qe.Nodes[i]
	require.Equal(t, addr, n.Addr)
	require.Equal(t, redlock.NodeFailed, n.Status, "node %d: %s", i, statuses(qe))
	require.Error(t, n.Err)
	var ne *pool.NodeError
	require.ErrorAs(t, n.Err, &ne)
	require.Equal(t, addr, ne.Addr)
	require.Contains(t, n.Err.Error(), addr)
	for _, w := range want {
		require.Contains(t, n.Err.Error(), w)
	}
	require.Contains(t, qe.Error(), addr)
}

// fakeServer is a TCP listener on 127.0.0.1 that is not Redis.
type fakeServer struct {
	l      net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// startFakeServer serves every connection with handle until the test ends.
func startFakeServer(t testing.TB, handle func(net.Conn)) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeServer{l: l}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			if f.closed {
				f.mu.Unlock()
				_ = c.Close()
				return
			}
			f.conns = append(f.conns, c)
			f.wg.Add(1)
			f.mu.Unlock()
			go func() {
				defer f.wg.Done()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		f.mu.Lock()
		f.closed = true
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeServer) Addr() string { return f.l.Addr().String() }

// accepted returns how many connections the server has taken.
func (f *fakeServer) accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// blackHole reads and discards everything and never answers.
func blackHole(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// garbage answers whatever it reads with something that is not RESP.
func garbage(c net.Conn) {
	defer c.Close()
	// It answers every read with garbage and leaves closing the
	// connection to the client, so that every command gets the same
	// garbage (a server that closed at once would make a later write fail
	// with a reset instead).
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
		if _, err := c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")); err != nil {
			return
		}
	}
}

// awaitToken waits until key holds token (or, for a lock that waited,
// another value of its call: ofLock) on every listed node: a
// successful acquisition returns once a quorum answered, and the SETs to
// the other nodes land a little later. Tests that then unlock and expect
// every node to be clean wait for them first, so that a straggling SET does
// not land after the release (see TestUnlock_releasesANodeWhoseSETLandsAfterTheUnlock).
func awaitToken(t testing.TB, nodes []*redistest.Server, key, token string, which ...int) {
	t.Helper()
	if len(which) == 0 {
		which = idx(len(nodes), func(int) bool { return true })
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, i := range which {
		for {
			v, ok := get(t, nodes[i], key)
			if ok && ofLock(token, v) {
				break
			}
			require.True(t, time.Now().Before(deadline), "node %d never got our token for %q", i, key)
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// proxy forwards TCP connections to a node, except that the requests on
// its first connection are held back for a while (delay > 0) or dropped
// for good (delay < 0); later connections are forwarded at once. It makes
// a command arrive after commands sent later on other connections, or
// never.
type proxy struct {
	*fakeServer
	accepted atomic.Int32
}

func startProxy(t testing.TB, target string, delay time.Duration) *proxy {
	t.Helper()
	p := &proxy{}
	p.fakeServer = startFakeServer(t, func(c net.Conn) {
		first := p.accepted.Add(1) == 1
		if first && delay < 0 {
			blackHole(c)
			return
		}
		up, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			return
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if first {
				time.Sleep(delay)
			}
			_, _ = io.Copy(up, c)
			_ = up.Close()
		}()
		_, _ = io.Copy(c, up)
		_ = c.Close()
		_ = up.Close()
		wg.Wait()
	})
	return p
}

// failNodesInTurn breaks one node after another until the returned stop
// is called: every 30ms the next node is killed and restarted (with
// whatever data it persisted) or paused and resumed, 30ms later. stop
// returns the first error of a kill, restart, pause or resume.
func failNodesInTurn(e *env) (stop func() error) {
	done := make(chan struct{})
	faults := make(chan error, 1)
	go func() {
		defer close(faults)
		for i := 0; i < 100_000; i++ { // bounded; stop ends it first
			select {
			case <-done:
				return
			case <-time.After(30 * time.Millisecond):
			}
			n := e.nodes[i%len(e.nodes)]
			var err error
			if i%2 == 0 {
				err = errors.Join(n.Kill(), func() error { time.Sleep(30 * time.Millisecond); return n.Restart() }())
			} else {
				err = errors.Join(n.Pause(), func() error { time.Sleep(30 * time.Millisecond); return n.Resume() }())
			}
			if err != nil {
				faults <- err
				return
			}
		}
	}()
	return func() error {
		close(done)
		return <-faults
	}
}

// freezer is a TCP proxy on 127.0.0.1 in front of one node. Its freeze
// makes the connections open at that moment drop everything they carry,
// both ways, without closing them: a network that stopped delivering.
// Connections made afterwards pass.
type freezer struct {
	*fakeServer
	mu     sync.Mutex
	live   map[net.Conn]*atomic.Bool // by client side: whether it is frozen
	target string
}

// startFreezer proxies to target until the test ends.
func startFreezer(t testing.TB, target string) *freezer {
	t.Helper()
	f := &freezer{live: map[net.Conn]*atomic.Bool{}, target: target}
	f.fakeServer = startFakeServer(t, f.serve)
	return f
}

func (f *freezer) serve(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", f.target, quickly)
	if err != nil {
		return
	}
	defer up.Close()
	frozen := new(atomic.Bool)
	f.mu.Lock()
	f.live[c] = frozen
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.live, c)
		f.mu.Unlock()
	}()
	// Either direction ending closes both, which ends the other.
	done := make(chan struct{})
	go func() {
		defer close(done)
		forward(up, c, frozen)
		_, _ = c.Close(), up.Close()
	}()
	forward(c, up, frozen)
	_, _ = c.Close(), up.Close()
	<-done
}

// forward copies from src to dst until src fails, and drops what it reads
// while frozen.
func forward(dst, src net.Conn, frozen *atomic.Bool) {
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if frozen.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// freeze silences every connection open now.
func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, frozen := range f.live {
		frozen.Store(true)
	}
}

// ofLock reports whether v, a node's value, is the lock's token or, for a
// lock that waited ("<call id>/<uuid>/<round>" or "/h<round>"), another
// value of the same call: a node may have handed the key to the call
// after another of its rounds, or granted one of its rounds that failed
// (the lock's release gives them all up).
func ofLock(token, v string) bool {
	if v == token {
		return true
	}
	i := strings.LastIndexByte(token, '/')
	if i < 0 || strings.Count(token, "/") != 2 {
		return false
	}
	return strings.HasPrefix(v, token[:i+1])
}

// progressWithin bounds how long each worker of a hammer may take, once
// the faults ended, to get the lock once more. It is far above what a
// healthy acquisition takes on a loaded machine (a lock left on a node
// that was killed expires after the hammers' 5s TTL): reaching it means
// the workers are stuck, not slow.
const progressWithin = 30 * time.Second

// hammer runs turn in workers goroutines, each at most 5000 times, until
// d has passed, and fails the test with the first error a turn returned
// before then (an error after d ended is the end of the run). turn is
// given the run's context and the worker's number, and made by
// newTurn(w) once per worker before the run starts.
//
// Then it asks for progress: endFaults (when not nil) stops the faults
// the run was under and returns once no node is failing any more, and
// every worker must then take one more turn, all at once, each within
// progressWithin. A lock that stays stuck after the faults (a key no one
// can take again, a waiter never woken) fails the test there.
func hammer(t *testing.T, workers int, d time.Duration, endFaults func() error, newTurn func(w int) func(ctx context.Context) error) {
	t.Helper()
	faultsOn := endFaults != nil
	defer func() {
		if faultsOn { // the test failed first: the faults end all the same
			_ = endFaults()
		}
	}()
	turns := make([]func(context.Context) error, workers)
	for w := range turns {
		turns[w] = newTurn(w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for _, turn := range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5000 { // bounded; the context ends it first
				if err := turn(ctx); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
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
	if faultsOn {
		faultsOn = false
		require.NoError(t, endFaults(), "the faults")
	}
	requireProgress(t, turns)
}

// requireProgress runs every turn once, all at once, and fails the test
// unless each one succeeded within progressWithin.
func requireProgress(t *testing.T, turns []func(context.Context) error) {
	t.Helper()
	start := time.Now()
	errs := make([]error, len(turns))
	var wg sync.WaitGroup
	for w, turn := range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), progressWithin)
			defer cancel()
			errs[w] = turn(ctx)
		}()
	}
	wg.Wait()
	for w, err := range errs {
		require.NoError(t, err, "worker %d did not get the lock again within %v after the run and its faults ended", w, progressWithin)
	}
	t.Logf("after the run and its faults every worker got the lock again, all within %v", time.Since(start).Round(time.Millisecond))
}

// unlockOrLost releases l; with lost, an Unlock that found fewer than a
// quorum (a node killed while it held the lock) is no error.
func unlockOrLost(ctx context.Context, l *redlock.Lock, lost bool) error {
	if err := l.Unlock(context.WithoutCancel(ctx)); err != nil && !(lost && errors.Is(err, redlock.ErrLockLost)) {
		return err
	}
	return nil
}

// killTwoMidRun kills nodes 0 and 3 of e after d. The function it returns
// waits until they are dead and returns the error of the kill: the end of
// the faults, for hammer.
func killTwoMidRun(e *env, d time.Duration) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		time.Sleep(d)
		done <- errors.Join(e.nodes[0].Kill(), e.nodes[3].Kill())
	}()
	return func() error { return <-done }
}
