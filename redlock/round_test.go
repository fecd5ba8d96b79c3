package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/pool"
)

const ttl = 10 * time.Second

// drift for ttl with the default factor: 1% of 10s plus 2ms.
const wantDrift = 100*time.Millisecond + 2*time.Millisecond

func TestTryLock_validityIsTTLMinusElapsedMinusDrift(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	var open []func()
	for _, n := range nodes {
		open = append(open, n.hold())
	}
	done := tryLockAsync(c, "k")
	require.True(t, clk.WaitTimers(1, nil)) // the round's node-timeout timer: the round has started
	clk.Advance(300 * time.Millisecond)     // the nodes take 300ms to answer
	for _, o := range open {
		o()
	}
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, epoch.Add(ttl-wantDrift), r.l.Until())
	require.Equal(t, ttl-300*time.Millisecond-wantDrift, r.l.Validity())
	clk.Advance(time.Hour)
	require.Zero(t, r.l.Validity(), "validity is never negative")
}

func TestTryLock_failsAndReleasesWhenTooLittleValidityIsLeft(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	var open []func()
	for _, n := range nodes {
		open = append(open, n.hold())
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "k", ttl, WithMinValidity(time.Second))
		done <- err
	}()
	require.True(t, clk.WaitTimers(1, nil))
	clk.Advance(ttl - wantDrift - time.Second) // exactly the minimum left: not above it
	for _, o := range open {
		o()
	}
	err := <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	require.Equal(t, time.Second, qe.Validity)
	require.Contains(t, err.Error(), "validity 1s left is too little")
	require.NoError(t, c.Close()) // nodes heard after the decision are released in the background
	for _, n := range nodes {
		_, held := n.get("k")
		require.False(t, held, "%s keeps our key", n.addr)
	}
}

func TestTryLock_quorumOfFreeNodesAcquires(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	nodes[0].set("k", "foreign")
	nodes[1].set("k", "foreign")
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.NoError(t, c.Close()) // wait for the nodes that replied after the decision
	for _, n := range nodes[2:] {
		v, _ := n.get("k")
		require.Equal(t, l.Token(), v)
	}
	for _, n := range nodes[:2] {
		v, _ := n.get("k")
		require.Equal(t, "foreign", v, "a foreign key was touched")
	}
}

func TestTryLock_quorumOfForeignOwnersFailsAndReleasesOurNodes(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.set("k", "foreign")
	}
	_, err := c.TryLock(context.Background(), "k", ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	require.True(t, qe.Busy())
	require.NoError(t, c.Close())
	for i, n := range nodes {
		v, held := n.get("k")
		if i < 3 {
			require.Equal(t, "foreign", v)
			require.Zero(t, n.count("release"), "%s: no release is needed where SET NX was refused", n.addr)
		} else {
			require.False(t, held, "%s keeps our key", n.addr)
		}
	}
}

func TestTryLock_decidesSuccessWithoutWaitingForSlowNodes(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	nodes[3].hold()
	nodes[4].hold()
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err, "three fast nodes are a quorum; the held ones must not be waited for")
	require.Equal(t, "k", l.Key())
}

// A refused TryLock waits for the nodes that have not answered its round
// for the rest of the node timeout: a grant they make in that time is
// undone before it returns (TestTryLock_refusedReturnsOnceALateGrantIsUndone).
// Those still silent then are released once they answer.
func TestTryLock_waitsForTheStragglersAtMostANodeTimeout(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.set("k", "foreign")
	}
	open3, open4 := nodes[3].hold(), nodes[4].hold()
	done := tryLockAsync(c, "k")
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"TryLock returned before its stragglers answered or timed out")
	clk.Advance(c.cfg.nodeTimeout)
	err := (<-done).err
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	require.Equal(t, NodePending, qe.Nodes[3].Status)
	require.Equal(t, NodePending, qe.Nodes[4].Status)
	require.Contains(t, err.Error(), "node4:6379 no reply within the node timeout")

	// The stragglers' SETs land after the decision; they must be released.
	open3()
	open4()
	require.NoError(t, c.Close())
	for _, n := range nodes[3:] {
		_, held := n.get("k")
		require.False(t, held, "%s keeps a late key", n.addr)
		require.Equal(t, 1, n.count("release"))
	}
}

func TestTryLock_nodeTimeoutEndsTheRound(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	nodes[0].set("k", "foreign")
	var open []func()
	for _, n := range nodes[2:] {
		open = append(open, n.hold())
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "k", ttl)
		done <- err
	}()
	require.True(t, clk.WaitTimers(1, nil))
	select {
	case err := <-done:
		t.Fatalf("round decided before the node timeout: %v", err)
	default:
	}
	clk.Advance(time.Minute)
	err := <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	// Nodes 1 and 2 may or may not have been heard before the timer fired;
	// the held ones cannot have been.
	for _, n := range qe.Nodes[2:] {
		require.Equal(t, NodePending, n.Status)
	}
	require.False(t, qe.Busy())
	for _, o := range open {
		o()
	}
	require.NoError(t, c.Close())
	for _, n := range nodes[1:] {
		_, held := n.get("k")
		require.False(t, held, "%s keeps our key", n.addr)
	}
}

func TestTryLock_reportsEachNodesFailureWithoutTheToken(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.failWith(errors.New("connection refused"))
	}
	nodes[3].set("k", "foreign")
	_, err := c.TryLock(context.Background(), "k", ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	require.False(t, qe.Busy(), "failed nodes are not a busy lock")
	require.Equal(t, 3, qe.Count(NodeFailed))
	msg := err.Error()
	for _, n := range nodes[:3] {
		require.Contains(t, msg, n.addr+" failed: redlock/pool: node "+n.addr+": SET: connection refused")
	}
	require.NoError(t, c.Close())
	// Failed nodes are released too: a SET that failed may have landed.
	for _, n := range nodes[:3] {
		require.Equal(t, 1, n.count("release"))
	}
	require.Equal(t, "foreign", func() string { v, _ := nodes[3].get("k"); return v }())
}

func TestQuorumError_neverContainsTheToken(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	for _, n := range nodes[:3] {
		n.set("k", "foreign")
	}
	err = l.Extend(context.Background(), ttl)
	require.ErrorIs(t, err, ErrLockLost)
	require.NotContains(t, err.Error(), l.Token())
}

func TestTryLock_cancelledContextEndsTheRoundAndReleases(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	var open []func()
	for _, n := range nodes {
		open = append(open, n.hold())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(ctx, "k", ttl)
		done <- err
	}()
	require.True(t, clk.WaitTimers(1, nil))
	cancel()
	// A call its caller gave up returns at once; what it left is released
	// in the background.
	err := <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	for _, o := range open {
		o()
	}
	require.NoError(t, c.Close())
	for _, n := range nodes {
		_, held := n.get("k")
		require.False(t, held, "%s keeps our key after cancellation", n.addr)
	}
}

func TestTryLock_doneContextSendsNothing(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.TryLock(ctx, "k", ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	for _, n := range nodes {
		require.Zero(t, n.count("SET"))
	}
}

// signalRetry waits a fixed delay and tells the test each time Lock asks.
type signalRetry chan int

func (s signalRetry) delay(failures int) time.Duration {
	s <- failures
	return 100 * time.Millisecond
}

func (s signalRetry) validate() error { return nil }

// withPacer makes a Client pace Lock's rounds by p.
func withPacer(p pacer) Option {
	return clientOption(func(c *clientConfig) { c.retry = p })
}

func TestLock_retriesUntilTheHolderLeaves(t *testing.T) {
	asked := make(signalRetry, 1)
	c, nodes, clk := newFakeClient(t, 5, withPacer(asked))
	for _, n := range nodes {
		n.set("k", "foreign")
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k", ttl)
		done <- err
	}()
	// The first attempt is a plain SET NX round, then (without
	// announcements to wait for) the script's round at once: both fail,
	// and only then is the back-off asked how long to wait.
	require.Equal(t, 1, <-asked)
	require.True(t, clk.WaitTimers(1, nil)) // and Lock waits on its retry timer
	for _, n := range nodes {
		n.del("k")
	}
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, <-done)
	require.NoError(t, c.Close()) // the round may have been decided before node 0 answered
	require.Equal(t, 3, nodes[0].count("SET"))
}

func TestLock_usesANewTokenEachRound(t *testing.T) {
	asked := make(signalRetry, 1)
	c, nodes, clk := newFakeClient(t, 5, withPacer(asked))
	for _, n := range nodes {
		n.set("k", "foreign")
	}
	done := make(chan *Lock, 1)
	go func() {
		l, _ := c.Lock(context.Background(), "k", ttl)
		done <- l
	}()
	<-asked // after the plain round and the script's round
	require.True(t, clk.WaitTimers(1, nil))
	for _, n := range nodes {
		n.del("k")
	}
	clk.Advance(100 * time.Millisecond)
	l := <-done
	require.NotNil(t, l)
	require.NoError(t, c.Close())
	// Each call to a node runs in a goroutine of its own: a round's call
	// can reach it after the next round's.
	tokens := nodes[0].tokenLog()
	require.Len(t, tokens, 3)
	require.NotEqual(t, tokens[0], tokens[1])
	require.NotEqual(t, tokens[1], tokens[2])
	require.NotEqual(t, tokens[0], tokens[2])
	require.Contains(t, tokens, l.Token())
}

func TestUnlock_waitsForAnAcquisitionStillInFlightOnThatNode(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	open3, open4 := nodes[3].hold("SET"), nodes[4].hold("SET")
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- l.Unlock(context.Background()) }()
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"Unlock returned before every node answered or timed out")
	// The late SETs land only now; the releases for their nodes must come
	// after them, not before, and Unlock returns once they are answered.
	open3()
	open4()
	require.NoError(t, <-done)
	for _, n := range nodes {
		_, held := n.get("k")
		require.False(t, held, "%s keeps our key after Unlock", n.addr)
	}
}

// Done when returned: a node that grants a refused TryLock's round after
// the round was decided, within the node timeout, has given the token up
// by the time TryLock returns; so has a node that granted before.
func TestTryLock_refusedReturnsOnceALateGrantIsUndone(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.set("k", "foreign")
	}
	open := nodes[4].hold("SET")
	done := tryLockAsync(c, "k")
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"TryLock returned before node 4 answered or timed out")
	open()
	require.ErrorIs(t, (<-done).err, ErrNotAcquired)
	for _, n := range nodes[3:] {
		_, held := n.get("k")
		require.False(t, held, "%s still holds the refused call's token once TryLock returned", n.addr)
		require.Equal(t, 1, n.count("release"), n.addr)
	}
}

func TestUnlock_sendsTheReleaseEvenWithAnEndedContext(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrLockLost)
	require.NoError(t, c.Close())
	for _, n := range nodes {
		_, held := n.get("k")
		require.False(t, held, "%s keeps our key", n.addr)
	}
}

func TestLock_contextEndingWhileWaitingMatchesBothErrors(t *testing.T) {
	asked := make(signalRetry, 1)
	c, nodes, clk := newFakeClient(t, 5, withPacer(asked))
	for _, n := range nodes {
		n.set("k", "foreign")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // real time: ended by cancel below
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "k", ttl)
		done <- err
	}()
	<-asked // after the plain round and the script's round
	require.True(t, clk.WaitTimers(1, nil))
	cancel()
	err := <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, quorumError(t, err).Busy())
}

func TestExtend_movesUntilAndNeverRecreatesALostKey(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	waitHeld(t, nodes, "k", l.Token())
	clk.Advance(5 * time.Second)
	require.NoError(t, l.Extend(context.Background(), 20*time.Second))
	require.Equal(t, epoch.Add(5*time.Second+20*time.Second-202*time.Millisecond), l.Until())

	for _, n := range nodes[:3] {
		n.del("k") // expired
	}
	err = l.Extend(context.Background(), ttl)
	require.ErrorIs(t, err, ErrLockLost)
	require.Equal(t, 3, quorumError(t, err).Count(NodeRefused))
	require.Zero(t, l.Validity(), "a quorum said the key is gone")
	for _, n := range nodes[:3] {
		_, held := n.get("k")
		require.False(t, held, "extend re-created the key on %s", n.addr)
	}
}

func TestUnlock_releasesOnlyOurKeyAndReportsLoss(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.NoError(t, c.Close()) // every SET has landed
	c2, err := New(c.pools, WithClock(c.cfg.clock))
	require.NoError(t, err)
	defer c2.Close()
	l = c2.Restore("k", l.Token())
	for _, n := range nodes[:3] {
		n.set("k", "foreign")
	}
	err = l.Unlock(context.Background())
	require.ErrorIs(t, err, ErrLockLost)
	require.NoError(t, c2.Close())
	for i, n := range nodes {
		v, held := n.get("k")
		if i < 3 {
			require.Equal(t, "foreign", v)
		} else {
			require.False(t, held)
		}
	}
	require.ErrorIs(t, l.Extend(context.Background(), ttl), ErrReleased)
}

func TestNew_rejectsBadConfiguration(t *testing.T) {
	var a, b pool.Pool = newTestNode(t, "a:1"), newTestNode(t, "b:1")
	for name, tc := range map[string]struct {
		pools []pool.Pool
		opts  []Option
		want  string
	}{
		"no pools":       {nil, nil, "no pools"},
		"nil pool":       {[]pool.Pool{a, nil}, nil, "pool 1 is nil"},
		"duplicate":      {[]pool.Pool{a, b, newTestNode(t, "a:1")}, nil, "pools 0 and 2 are the same node a:1"},
		"drift":          {[]pool.Pool{a}, []Option{WithDriftFactor(0.5)}, "drift factor 0.5 out of range"},
		"negative drift": {[]pool.Pool{a}, []Option{WithDriftFactor(-0.1)}, "drift factor -0.1 out of range"},
		"node timeout":   {[]pool.Pool{a}, []Option{WithNodeTimeout(0)}, "node timeout 0s must be positive"},
		"retry minimum":  {[]pool.Pool{a}, []Option{WithRetry(0, time.Second)}, "retry minimum 0s must be positive"},
		"retry range":    {[]pool.Pool{a}, []Option{WithRetry(time.Second, time.Millisecond)}, "retry maximum 1ms is below the minimum 1s"},
		"clock":          {[]pool.Pool{a}, []Option{WithClock(nil)}, "clock is nil"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.pools, tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestTryLock_rejectsBadArguments(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for name, tc := range map[string]struct {
		key  string
		ttl  time.Duration
		opts []LockOption
		want string
	}{
		"empty key":        {"", ttl, nil, "empty name"},
		"ttl under drift":  {"k", 2 * time.Millisecond, nil, "ttl 2ms leaves no validity after the clock-drift allowance"},
		"ttl under 1ms":    {"k", time.Microsecond, nil, "under the 1ms"},
		"negative minimum": {"k", ttl, []LockOption{WithMinValidity(-1)}, "minimum validity -1ns must not be negative"},
		"minimum over ttl": {"k", ttl, []LockOption{WithMinValidity(ttl)}, "minimum validity 10s is not below the ttl 10s"},
		"retry":            {"k", ttl, []LockOption{WithRetry(0, 0)}, "retry minimum 0s must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.TryLock(context.Background(), tc.key, tc.ttl, tc.opts...)
			require.ErrorContains(t, err, tc.want)
			require.NotErrorIs(t, err, ErrNotAcquired)
			_, err = c.Lock(context.Background(), tc.key, tc.ttl, tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
	for _, n := range nodes {
		require.Zero(t, n.count("SET"), "bad input reached a node")
	}
}

func TestClient_closedClientRefusesWork(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = c.TryLock(context.Background(), "k2", ttl)
	require.ErrorIs(t, err, pool.ErrClosed)
	require.ErrorIs(t, l.Extend(context.Background(), ttl), pool.ErrClosed)
	require.ErrorIs(t, l.Unlock(context.Background()), pool.ErrClosed)
	require.NoError(t, c.Close(), "Close is idempotent")
}

func TestBackoff_staysWithinItsRange(t *testing.T) {
	b := backoff{min: 10 * time.Millisecond, max: 250 * time.Millisecond}
	for failures := 1; failures <= 12; failures++ {
		ceiling := min(10*time.Millisecond<<(failures-1), 250*time.Millisecond)
		for range 50 {
			d := b.delay(failures)
			require.GreaterOrEqual(t, d, ceiling/2)
			require.LessOrEqual(t, d, ceiling)
		}
	}
}

// syncStarter is an async.Starter that replies before Start returns, as a
// pipelined node does when it is closed or its queue is full.
type syncStarter struct {
	*testNode
}

func (s syncStarter) Start(rcv async.Receiver, cmd string, args ...any) {
	rcv.Receive(s.Do(context.Background(), cmd, args...))
}

func (s syncStarter) StartEval(rcv async.Receiver, script *pool.Script, keysAndArgs ...any) {
	rcv.Receive(s.Eval(context.Background(), script, keysAndArgs...))
}

func TestClient_Close_racingAFailedRoundNeverMisusesItsWaitGroup(t *testing.T) {
	nodes := newTestNodes(t, 5)
	pools := make([]pool.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = syncStarter{n}
	}
	for attempt := range 200 {
		key := fmt.Sprintf("k%d", attempt)
		for _, n := range nodes[:3] {
			n.set(key, "foreign") // the round fails on 3 refusals, 2 replies unread
		}
		// Restart safety's check before the first acquisition would
		// give Close time to win every race: no round would be sent.
		c, err := New(pools, WithRestartSafety(0))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.TryLock(context.Background(), key, ttl)
		}()
		require.NoError(t, c.Close())
		<-done
		require.NoError(t, c.Close())
	}
}

func TestClient_nilContextIsAClearErrorNotAPanic(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	var nilCtx context.Context // a caller's mistake, as a variable would carry it
	_, err := c.TryLock(nilCtx, "k", ttl)
	require.ErrorContains(t, err, "nil context")
	_, err = c.Lock(nilCtx, "k", ttl)
	require.ErrorContains(t, err, "nil context")
	err = c.Do(nilCtx, "k", ttl, func(context.Context) error { return nil })
	require.ErrorContains(t, err, "nil context")
	for _, n := range nodes {
		require.Zero(t, n.count("SET"), "no node is asked")
	}

	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.ErrorContains(t, l.Extend(nilCtx, ttl), "nil context")
	require.ErrorContains(t, l.Unlock(nilCtx), "nil context")
	require.NoError(t, l.Unlock(context.Background()), "the failed calls left the lock as it was")
}

// setStatus fails a status reply OK to SET NX GET, naming it and the
// node, while a holder's value "OK" (a bulk string) is still a refusal.
func TestSetStatus_aStatusReplyOKIsUnexpected(t *testing.T) {
	status, err := setStatus("n1:6379", "OK", nil)
	require.Equal(t, NodeFailed, status)
	require.ErrorContains(t, err, `unexpected reply "OK" to SET NX GET`)
	require.ErrorContains(t, err, "n1:6379")
	status, err = setStatus("n1:6379", []byte("OK"), nil)
	require.Equal(t, NodeRefused, status)
	require.NoError(t, err)
}

// A release that waited for the lock's own acquisition to settle on a
// slow node gets a node timeout of its own from when it went out, and
// Unlock waits for it that long: returned at the round's node timeout,
// it would leave the token on a node that answers in time.
func TestUnlock_givesAReleaseThatWaitedForItsAcquisitionANodeTimeoutOfItsOwn(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	nt := c.cfg.nodeTimeout
	slow := nodes[3]
	openSet := slow.hold("SET")
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	// The SET must be at the node's gate before the gate changes to hold
	// the release.
	require.Eventually(t, func() bool { return slow.parkedCount() == 1 }, 5*time.Second, time.Millisecond)
	openRelease := slow.hold(callRelease)
	done := make(chan error, 1)
	go func() { done <- l.Unlock(context.Background()) }()
	// A node whose grant came after the decision waits for the whole
	// round too (pending.await): three releases go at once.
	require.Eventually(t, func() bool {
		return nodes[0].count(callRelease)+nodes[1].count(callRelease)+nodes[2].count(callRelease)+nodes[4].count(callRelease) >= 3
	}, 5*time.Second, time.Millisecond)
	clk.Advance(nt * 9 / 10)
	openSet()                                                                                              // the release goes out now, at 0.9 of the round's node timeout
	require.Eventually(t, func() bool { return slow.parkedCount() == 2 }, 5*time.Second, time.Millisecond) // the SET, then the release
	clk.Advance(nt / 5)                                                                                    // the round's node timeout has passed; the release's has not
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"Unlock returned before the node answered a release sent a fraction of a node timeout ago")
	openRelease()
	require.NoError(t, <-done)
	_, held := slow.get("k")
	require.False(t, held, "the slow node keeps the key after Unlock returned")
}
