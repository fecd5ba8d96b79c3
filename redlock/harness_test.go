package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// testNode is one node of the unit tests: an in-process Redis server
// (miniredis, which runs the library's own Lua scripts) behind a thin
// pool.Pool. Every command and script runs on the server; the wrapper only
// does what a real node cannot be made to do on cue: hold calls at a gate
// until the test opens it, fail calls with a given error instead of
// sending them, count the calls by kind and record the tokens of the
// acquisitions. It has no script logic of its own. The server's clock
// stands still at epoch: keys never expire by themselves, a test that
// wants one gone deletes it (del, flush).
type testNode struct {
	addr  string // the name the Client knows the node by, e.g. "node1:6379"
	conns *redis.Pool

	mu     sync.Mutex
	gate   chan struct{}
	gateOp string   // when set, only calls of this kind wait at the gate
	opens  []func() // every gate's opener, for the cleanup
	fail   error
	failOp string // when set, fail applies only to calls of this kind
	parked int    // calls that have waited at a gate
	calls  []string
	tokens []string // the token of every acquisition that reached the server
	// fenceAhead makes every write-back find the counter already at its
	// fence: the same write-back runs on the server just before it, as if
	// another holder's had just landed.
	fenceAhead bool
}

var _ pool.Pool = (*testNode)(nil)

// newTestNode starts a server for the test, known to Clients as addr.
func newTestNode(t testing.TB, addr string) *testNode {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(epoch)
	return wrapServer(t, addr, m.Addr())
}

// wrapServer returns a testNode, known to Clients as addr, for the server
// at serverAddr.
func wrapServer(t testing.TB, addr, serverAddr string) *testNode {
	conns := &redis.Pool{
		MaxIdle: 64,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", serverAddr)
		},
	}
	t.Cleanup(func() { _ = conns.Close() })
	return &testNode{addr: addr, conns: conns}
}

// newRedisNodes is newTestNodes on redis-server processes, when
// redis-server is installed: they run scripts some ten times faster than
// miniredis, which compiles each script into a new Lua state on every
// call. Without redis-server it falls back to newTestNodes. Their clocks
// run: keys expire.
func newRedisNodes(t testing.TB, n int) []*testNode {
	t.Helper()
	if _, err := redistest.Path(); err != nil && os.Getenv("REDLOCK_REQUIRE_REDIS") != "1" {
		t.Logf("in-process servers instead of redis-server (slower): %v", err)
		return newTestNodes(t, n)
	}
	cluster := redistest.StartT(t, n)
	nodes := make([]*testNode, n)
	for i, addr := range cluster.Addrs() {
		nodes[i] = wrapServer(t, fmt.Sprintf("node%d:6379", i+1), addr)
	}
	return nodes
}

// Call kinds, as counted, gated and failed: a plain SET and the
// acquisition script are both "SET".
const (
	callSet        = "SET"
	callRelease    = "release"
	callExtend     = "extend"
	callFenceStore = "fence-store"
	callCheck      = "node" // restart safety's check
	callMulti      = "multi-acquire"
	callLeaderPut  = "leader-write"
	callLeaderGet  = "leader-read"
	callSemAcquire = "sem-acquire"
	callSemRelease = "sem-release" // a permit's release, or a waiting call's leaving the queue
	callRWWrite    = "rw-write"
	callRWRelease  = "rw-release" // a hold's release, or a waiting call's leaving its place
)

func callKind(script *pool.Script, cmd string) string {
	if base, ok := wire.Unsharded(script); ok {
		// A grant asked with its shard's identity (shards.go): a plain
		// SET, or the script it wraps.
		script, cmd = base, "SET"
	}
	switch script {
	case nil:
		return strings.ToUpper(cmd)
	case wire.Acquire:
		return callSet
	case wire.Release, wire.ReleaseFree:
		return callRelease
	case wire.Extend:
		return callExtend
	case wire.FenceStore:
		return callFenceStore
	case wire.NodeCheck:
		return callCheck
	case wire.MultiAcquire:
		return callMulti
	case wire.LeaderWrite:
		return callLeaderPut
	case wire.LeaderRead:
		return callLeaderGet
	case wire.SemAcquire:
		return callSemAcquire
	case wire.SemRelease:
		return callSemRelease
	case wire.RWWrite:
		return callRWWrite
	case wire.RWRelease:
		return callRWRelease
	}
	return "script"
}

func (n *testNode) Addr() string { return n.addr }

// Close does nothing: the test's cleanup stops the server.
func (n *testNode) Close() error { return nil }

func (n *testNode) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	return n.call(ctx, nil, cmd, args)
}

func (n *testNode) Eval(ctx context.Context, script *pool.Script, keysAndArgs ...any) (any, error) {
	return n.call(ctx, script, "", keysAndArgs)
}

func (n *testNode) call(ctx context.Context, script *pool.Script, cmd string, args []any) (any, error) {
	kind := callKind(script, cmd)
	n.mu.Lock()
	gate := n.gate
	if n.gateOp != "" && n.gateOp != kind {
		gate = nil
	}
	if gate != nil {
		n.parked++
	}
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	n.mu.Lock()
	fail := n.fail
	if n.failOp != "" && n.failOp != kind {
		fail = nil
	}
	ahead := n.fenceAhead && kind == callFenceStore
	n.mu.Unlock()
	if fail != nil {
		n.record(kind, "")
		if ne, ok := fail.(*pool.NodeError); ok {
			return nil, ne // as given: a command the pool never sent says so (Op "dial")
		}
		return nil, &pool.NodeError{Addr: n.addr, Op: opName(script, cmd), Err: fail}
	}
	if ahead {
		if _, err := n.run(ctx, script, cmd, args); err != nil {
			return nil, err
		}
	}
	reply, err := n.run(ctx, script, cmd, args)
	token := ""
	if kind == callSet {
		base := script
		if b, ok := wire.Unsharded(script); ok {
			base = b
		}
		token = acquisitionToken(base, args)
	}
	n.record(kind, token)
	return reply, err
}

// acquisitionToken returns the token a plain SET or the acquisition
// script sets.
func acquisitionToken(script *pool.Script, args []any) string {
	if script == nil {
		return args[1].(string) // SET key token NX PX ttl
	}
	nkeys := args[0].(int) // numkeys, KEYS..., ARGV[1] is the token (acquire.lua)
	return args[nkeys+1].(string)
}

// run sends the call to the server. A call whose context has ended is
// not sent, as with a pool; one under way runs to its end (the server
// never stalls: the gates are in front of it).
func (n *testNode) run(ctx context.Context, script *pool.Script, cmd string, args []any) (any, error) {
	op := opName(script, cmd)
	if err := ctx.Err(); err != nil {
		return nil, &pool.NodeError{Addr: n.addr, Op: op, Err: err}
	}
	conn := n.conns.Get()
	defer conn.Close()
	var reply any
	var err error
	if script != nil {
		keys, rest, serr := script.Split(args)
		if serr != nil {
			return nil, &pool.NodeError{Addr: n.addr, Op: op, Err: serr}
		}
		all := []any{script.Source(), len(keys)}
		for _, k := range keys {
			all = append(all, k)
		}
		reply, err = conn.Do("EVAL", append(all, rest...)...)
	} else {
		reply, err = conn.Do(cmd, args...)
	}
	if re, ok := err.(redis.Error); ok {
		err = pool.ReplyError(re) // as the pools of package pool report it
	}
	if err != nil {
		return nil, &pool.NodeError{Addr: n.addr, Op: op, Err: err}
	}
	return reply, nil
}

// opName is the command a pool names in its errors.
func opName(script *pool.Script, cmd string) string {
	if script != nil {
		return "EVALSHA"
	}
	return strings.ToUpper(cmd)
}

func (n *testNode) record(kind, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, kind)
	if token != "" {
		n.tokens = append(n.tokens, token)
	}
}

// hold makes later calls (of the given kind, or all) wait until the
// returned function is called.
func (n *testNode) hold(kind ...string) (open func()) {
	g := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(g) }) }
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gate, n.gateOp = g, ""
	if len(kind) > 0 {
		n.gateOp = kind[0]
	}
	n.opens = append(n.opens, open)
	return open
}

// openAll opens every gate the node ever had.
func (n *testNode) openAll() {
	n.mu.Lock()
	opens := n.opens
	n.mu.Unlock()
	for _, open := range opens {
		open()
	}
}

// failWith makes later calls (of the given kind, or all) fail with err
// without reaching the server (a *pool.NodeError as it is, others wrapped
// in one that names the command); nil makes them work again.
func (n *testNode) failWith(err error, kind ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail, n.failOp = err, ""
	if len(kind) > 0 {
		n.failOp = kind[0]
	}
}

func (n *testNode) setFenceAhead(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fenceAhead = on
}

// get reads a string key on the server.
func (n *testNode) get(key string) (string, bool) {
	v, err := redis.String(n.server("GET", key), nil)
	return v, err == nil
}

// set writes a string key, without TTL, on the server.
func (n *testNode) set(key, value string) { n.server("SET", key, value) }

// del deletes key on the server, as if it had expired there.
func (n *testNode) del(key string) { n.server("DEL", key) }

// flush empties the server, as a restart without its data would.
func (n *testNode) flush() { n.server("FLUSHALL") }

// zcard returns the size of a sorted set on the server.
func (n *testNode) zcard(key string) int {
	v, _ := redis.Int(n.server("ZCARD", key), nil)
	return v
}

// server runs a command of the test's own on the server, past the gate
// and the failures, uncounted. It panics when the command fails.
func (n *testNode) server(cmd string, args ...any) any {
	conn := n.conns.Get()
	defer conn.Close()
	reply, err := conn.Do(cmd, args...)
	if err != nil {
		panic(fmt.Sprintf("%s: %s: %v", n.addr, cmd, err))
	}
	return reply
}

// parkedCount returns how many calls have waited at a gate.
func (n *testNode) parkedCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parked
}

// count returns how many calls of a kind the node answered (or failed).
func (n *testNode) count(kind string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, k := range n.calls {
		if k == kind {
			c++
		}
	}
	return c
}

// callLog returns the kinds of the calls the node answered, in order.
func (n *testNode) callLog() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

// tokenLog returns the tokens of the acquisitions the node answered, in
// order.
func (n *testNode) tokenLog() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.tokens...)
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestNodes starts n nodes, "node1:6379" to "node<n>:6379".
func newTestNodes(t testing.TB, n int) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		nodes[i] = newTestNode(t, fmt.Sprintf("node%d:6379", i+1))
	}
	return nodes
}

func poolsOf(nodes []*testNode) []pool.Pool {
	pools := make([]pool.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = n
	}
	return pools
}

// newFakeClient returns a client over n test nodes (real scripts on
// in-process servers) on a fake clock. The node timeout is one fake
// minute, so that only the test decides when it passes. The client is
// closed, after every gate is opened, at cleanup.
func newFakeClient(t *testing.T, n int, opts ...Option) (*Client, []*testNode, *clock.Fake) {
	t.Helper()
	nodes := newTestNodes(t, n)
	c, clk := newClientOn(t, nodes, opts...)
	return c, nodes, clk
}

// newClientOn is newFakeClient on the given nodes.
func newClientOn(t *testing.T, nodes []*testNode, opts ...Option) (*Client, *clock.Fake) {
	t.Helper()
	return newClientWith(t, poolsOf(nodes), nodes, opts...)
}

// newClientWith is newClientOn on pools that stand for nodes (the nodes
// themselves, or wrappers of them).
func newClientWith(t *testing.T, pools []pool.Pool, nodes []*testNode, opts ...Option) (*Client, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	// Restart safety is off unless a test turns it on: its check would
	// wait at the gates of held nodes.
	opts = append([]Option{WithClock(clk), WithNodeTimeout(time.Minute), WithRestartSafety(0)}, opts...)
	c, err := New(pools, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, n := range nodes {
			n.openAll()
		}
		require.NoError(t, c.Close())
	})
	return c, clk
}

// ignoreServers makes goleak overlook the goroutines of the test nodes'
// servers (their listeners, and one per connection), which live as long
// as the test.
func ignoreServers() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).serve"),
		goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
		goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"),
	}
}

func quorumError(t *testing.T, err error) *QuorumError {
	t.Helper()
	var qe *QuorumError
	require.True(t, errors.As(err, &qe), "error %v is not a *QuorumError", err)
	return qe
}

// waitHeld waits until every node holds key with token: the SETs that
// arrived after the round was decided have landed.
func waitHeld(t *testing.T, nodes []*testNode, key, token string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if v, _ := n.get(key); v != token {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

// tryResult is what a TryLock run in the background returned.
type tryResult struct {
	l   *Lock
	err error
}

// tryLockAsync runs TryLock of key (for the tests' ttl) in a goroutine of
// its own; the result arrives on the channel.
func tryLockAsync(c *Client, key string, opts ...LockOption) <-chan tryResult {
	done := make(chan tryResult, 1)
	go func() {
		l, err := c.TryLock(context.Background(), key, ttl, opts...)
		done <- tryResult{l, err}
	}()
	return done
}

// stepRounds makes each of rounds acquisition rounds (calls of kind)
// be decided with every reply read, and seen by the nodes as if nothing
// were in flight: a granting node takes round k only once it answered
// the release (calls of releaseKind) of round k-1, and late answers
// round k only after every other node did. It returns once the last
// round has been let through. It sets its gates at once, before the
// rounds are sent, and returns the function that steps them.
func stepRounds(t *testing.T, late *testNode, granting, others []*testNode, kind, releaseKind string, rounds int) (step func()) {
	t.Helper()
	gates := make([]func(), len(granting))
	for i, n := range granting {
		gates[i] = n.hold(kind)
	}
	lateGate := late.hold()
	// pass lets the call parked at *gate through, after re-arming the
	// node's gate for the next round's call.
	pass := func(k int, n *testNode, gate *func(), kinds ...string) {
		open := *gate
		if k < rounds {
			*gate = n.hold(kinds...)
		}
		open()
	}
	return func() {
		for k := 1; k <= rounds; k++ {
			stepRound(t, k, late, granting, others, kind, releaseKind, gates, &lateGate, pass)
		}
	}
}

// stepRound is round k of stepRounds.
func stepRound(t *testing.T, k int, late *testNode, granting, others []*testNode, kind, releaseKind string,
	gates []func(), lateGate *func(), pass func(int, *testNode, *func(), ...string)) {
	for i, n := range granting {
		require.Eventually(t, func() bool { return n.parkedCount() >= k && n.count(releaseKind) >= k-1 },
			10*time.Second, time.Millisecond, "round %d on %s", k, n.addr)
		pass(k, n, &gates[i], kind)
	}
	require.Eventually(t, func() bool {
		for _, n := range append(others, granting...) {
			if n.count(kind) < k {
				return false
			}
		}
		return late.parkedCount() >= k
	}, 10*time.Second, time.Millisecond, "round %d", k)
	pass(k, late, lateGate)
}

// advanceUntil returns what done delivers, advancing clk by step each
// time the call under test has not delivered within a millisecond: a
// call that waits on the Client's timers (a node timeout) returns once
// they fire. It fails the test after 10s of real time.
func advanceUntil[T any](t *testing.T, clk *clock.Fake, step time.Duration, done <-chan T) T {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case v := <-done:
			return v
		case <-time.After(time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the call did not return")
		clk.Advance(step)
	}
}
