package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/pool"
)

// fakeNode is an in-memory node that understands the acquisition,
// release, extend and fence scripts. Expiry is not modelled: tests that need it use real
// Redis. A node can be made to fail every call, or to hold every call
// until the test opens its gate.
type fakeNode struct {
	addr string

	mu     sync.Mutex
	data   map[string]string
	gate   chan struct{}
	gateOp string // when set, only this operation waits at the gate
	fail   error
	failOp string // when set, fail applies only to this operation
	parked int    // calls that have waited at a gate
	calls  []string
	tokens []string // the token of every SET
	// fenceAhead makes every write-back find the counter already at its
	// fence, as if another write-back had just landed.
	fenceAhead bool
}

func newFakeNode(addr string) *fakeNode {
	return &fakeNode{addr: addr, data: map[string]string{}}
}

var _ pool.Pool = (*fakeNode)(nil)

func (f *fakeNode) Addr() string { return f.addr }
func (f *fakeNode) Close() error { return nil }

// hold makes later calls (of the given operations, or all) wait until
// release is called.
func (f *fakeNode) hold(op ...string) (release func()) {
	g := make(chan struct{})
	f.mu.Lock()
	f.gate = g
	if len(op) > 0 {
		f.gateOp = op[0]
	}
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }
}

func (f *fakeNode) enter(op string) error {
	f.mu.Lock()
	gate := f.gate
	if f.gateOp != "" && f.gateOp != op {
		gate = nil
	}
	if gate != nil {
		f.parked++
	}
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op)
	if f.fail != nil && (f.failOp == "" || f.failOp == op) {
		return &pool.NodeError{Addr: f.addr, Op: op, Err: f.fail}
	}
	return nil
}

func (f *fakeNode) Do(_ context.Context, cmd string, args ...any) (any, error) {
	if err := f.enter(cmd); err != nil {
		return nil, err
	}
	if cmd != "SET" {
		return nil, fmt.Errorf("fake: unexpected command %s", cmd)
	}
	key, token := args[0].(string), args[1].(string)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens = append(f.tokens, token)
	if _, ok := f.data[key]; ok {
		return nil, nil
	}
	f.data[key] = token
	return "OK", nil
}

// Eval runs the scripts. The acquisition script counts as "SET" (calls,
// gates and failures); its queue and reservation keys are not modelled,
// and a held key reports no TTL (-1), so waits use the retry strategy.
func (f *fakeNode) Eval(_ context.Context, s *redis.Script, keysAndArgs ...any) (any, error) {
	op := map[*redis.Script]string{acquireScript: "SET", releaseScript: "release", releaseFreeScript: "release", extendScript: "extend",
		fenceStoreScript: "fence-store"}[s]
	if err := f.enter(op); err != nil {
		return nil, err
	}
	switch op {
	case "SET":
		// KEYS: key, waiters, deadlines[, fence key, epoch key]; ARGV:
		// token, ttl, waiter id, priority, waited, refresh, slack,
		// window, round, hand-off token[, epoch].
		nkeys := keysAndArgs[0].(int)
		key := keysAndArgs[1].(string)
		argv := keysAndArgs[1+nkeys:]
		token := argv[0].(string)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tokens = append(f.tokens, token)
		if _, ok := f.data[key]; ok {
			return []any{int64(codeHeld), int64(-1)}, nil
		}
		f.data[key] = token
		if nkeys == 3 {
			return int64(codeAcquired), nil
		}
		fkey, ekey, epoch := keysAndArgs[4].(string), keysAndArgs[5].(string), argv[10].(string)
		if _, ok := f.data[ekey]; !ok {
			f.data[ekey] = epoch
		}
		counter, ok := f.data[fkey]
		if !ok {
			counter = "0"
		}
		return []any{int64(codeAcquired), []byte(counter), []byte(f.data[ekey])}, nil
	case "fence-store":
		fkey, fence := keysAndArgs[0].(string), keysAndArgs[1].(uint64)
		f.mu.Lock()
		defer f.mu.Unlock()
		cur, _ := strconv.ParseUint(f.data[fkey], 10, 64)
		if f.fenceAhead {
			cur = max(cur, fence)
			f.data[fkey] = strconv.FormatUint(cur, 10)
		}
		if fence > cur {
			f.data[fkey] = strconv.FormatUint(fence, 10)
			return int64(1), nil
		}
		return []any{int64(0), []byte(strconv.FormatUint(cur, 10))}, nil
	}
	// release and extend: KEYS[1] the key; ARGV[1] the token.
	nkeys := 1
	if s == releaseScript {
		nkeys = 3
	}
	key, token := keysAndArgs[0].(string), keysAndArgs[nkeys].(string)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.data[key] != token {
		return int64(0), nil
	}
	if op == "release" {
		delete(f.data, key)
	}
	return int64(1), nil
}

func (f *fakeNode) get(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.data[key]
	return v, ok
}

func (f *fakeNode) set(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data[key] = value
}

// parkedCount returns how many calls have waited at a gate.
func (f *fakeNode) parkedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked
}

func (f *fakeNode) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == op {
			n++
		}
	}
	return n
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newFakeClient returns a client over n fake nodes on a fake clock. The
// node timeout is one fake minute, so that only the test decides when it
// passes. The client is closed, after every gate is opened, at cleanup.
func newFakeClient(t *testing.T, n int, opts ...Option) (*Client, []*fakeNode, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	nodes := make([]*fakeNode, n)
	pools := make([]pool.Pool, n)
	for i := range nodes {
		nodes[i] = newFakeNode(fmt.Sprintf("node%d:6379", i+1))
		pools[i] = nodes[i]
	}
	// Restart safety is off unless a test turns it on: its check would
	// wait at the gates of held nodes.
	opts = append([]Option{WithClock(clk), WithNodeTimeout(time.Minute), WithRestartSafety(0)}, opts...)
	c, err := New(pools, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, n := range nodes {
			n.mu.Lock()
			if n.gate != nil {
				select {
				case <-n.gate:
				default:
					close(n.gate)
				}
			}
			n.mu.Unlock()
		}
		require.NoError(t, c.Close())
	})
	return c, nodes, clk
}

func quorumError(t *testing.T, err error) *QuorumError {
	t.Helper()
	var qe *QuorumError
	require.True(t, errors.As(err, &qe), "error %v is not a *QuorumError", err)
	return qe
}

type poolT = pool.Pool

func toPools(ps []poolT) []pool.Pool { return ps }

// waitHeld waits until every node holds key with token: the SETs that
// arrived after the round was decided have landed.
func waitHeld(t *testing.T, nodes []*fakeNode, key, token string) {
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
