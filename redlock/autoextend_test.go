package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/clock"
)

// Settings of the automatic-extension tests, on the fake clock.
const (
	extNodeTimeout = time.Second
	extInterval    = time.Second
)

// newExtendingClient returns a client (newFakeClient) whose automatic extension
// attempts are reported, with their errors, on the returned channel.
func newExtendingClient(t *testing.T, opts ...Option) (*Client, []*testNode, *clock.Fake, chan error) {
	t.Helper()
	c, nodes, clk := newFakeClient(t, 5, append([]Option{WithNodeTimeout(extNodeTimeout)}, opts...)...)
	attempts := make(chan error, 100)
	c.onExtend = func(err error) { attempts <- err }
	return c, nodes, clk, attempts
}

// armed waits until the extender has armed its next timer: with the
// context's own timer, two timers wait. It reports false when done closes
// first.
func armed(t *testing.T, clk *clock.Fake, done <-chan struct{}) bool {
	t.Helper()
	return clk.WaitTimers(2, done)
}

// attempt waits for the next automatic extension attempt and returns its
// error.
func attempt(t *testing.T, attempts <-chan error) error {
	t.Helper()
	select {
	case err := <-attempts:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no extension attempt")
		return nil
	}
}

// stopped waits for the lock's extender to return.
func stopped(t *testing.T, l *Lock) {
	t.Helper()
	select {
	case <-l.ext.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the extender did not stop")
	}
}

func TestLock_autoExtend_extendsEveryIntervalPastTheTTL(t *testing.T) {
	c, _, clk, attempts := newExtendingClient(t)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	ctx := l.Context()
	for i := 1; i <= 12; i++ { // 12s: past the 10s ttl
		require.True(t, armed(t, clk, nil))
		clk.Advance(extInterval)
		require.NoError(t, attempt(t, attempts))
		want := epoch.Add(time.Duration(i)*extInterval + ttl - wantDrift)
		require.Equal(t, want, l.Until())
		dl, _ := ctx.Deadline()
		require.Equal(t, want, dl, "the context's deadline follows the extension")
	}
	require.NoError(t, ctx.Err())
	require.NoError(t, l.Unlock(context.Background()))
	require.ErrorIs(t, context.Cause(ctx), ErrReleased)
	stopped(t, l)
}

func TestLock_autoExtend_defaultIntervalIsAThirdOfTheTTL(t *testing.T) {
	c, _, clk, attempts := newExtendingClient(t)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(0))
	require.NoError(t, err)
	require.True(t, armed(t, clk, nil))
	clk.Advance(ttl/3 - time.Nanosecond)
	select {
	case err := <-attempts:
		t.Fatalf("extended before ttl/3: %v", err)
	default:
	}
	clk.Advance(time.Nanosecond)
	require.NoError(t, attempt(t, attempts))
	require.Equal(t, epoch.Add(ttl/3+ttl-wantDrift), l.Until())
	require.NoError(t, l.Unlock(context.Background()))
}

func TestLock_autoExtend_retriesAFailureThatDoesNotProveTheLoss(t *testing.T) {
	c, nodes, clk, attempts := newExtendingClient(t)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	ctx := l.Context()
	require.True(t, armed(t, clk, nil))
	failOn(nodes[:3], errors.New("connection refused"))
	clk.Advance(extInterval)
	require.ErrorIs(t, attempt(t, attempts), ErrLockLost)
	require.NoError(t, ctx.Err(), "one failed attempt ended the lock")

	require.True(t, armed(t, clk, nil), "no retry was scheduled")
	failOn(nodes[:3], nil)
	clk.Advance(extNodeTimeout / 2) // the longest retry delay
	require.NoError(t, attempt(t, attempts))
	require.NoError(t, ctx.Err())
	require.True(t, l.Until().After(epoch.Add(extInterval+ttl-wantDrift)), "the retry did not extend")
	require.NoError(t, l.Unlock(context.Background()))
	stopped(t, l)
}

func TestLock_autoExtend_failuresForANodeTimeoutEndItWithErrLockLost(t *testing.T) {
	c, nodes, clk, attempts := newExtendingClient(t)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	ctx := l.Context()
	until := l.Until()
	require.True(t, armed(t, clk, nil))
	failOn(nodes[:3], errors.New("connection refused"))
	clk.Advance(extInterval)
	first := clk.Now()
	for n := 1; ; n++ {
		require.Less(t, n, 10, "still retrying after %v", clk.Since(first))
		require.ErrorIs(t, attempt(t, attempts), ErrLockLost)
		if !armed(t, clk, ctx.Done()) {
			break // ended instead of scheduling a retry
		}
		clk.Advance(extNodeTimeout / 2)
	}
	require.ErrorIs(t, context.Cause(ctx), ErrLockLost)
	// The test moves the clock in steps of half a node timeout, so the end
	// is seen up to one step late.
	require.GreaterOrEqual(t, clk.Since(first), extNodeTimeout, "gave up before retrying for a node timeout")
	require.LessOrEqual(t, clk.Since(first), extNodeTimeout+extNodeTimeout/2, "went on retrying after a node timeout")
	require.Equal(t, until, l.Until())
	require.Positive(t, l.Validity(), "the test meant to end the lock before its validity")
	stopped(t, l)
	// The fake clock fires each timer at its own deadline within one
	// Advance, so the attempt that ended the lock can run in the same
	// Advance as the one before it, unseen by the loop above. It must be
	// the attempt whose error ended the lock, and nothing may follow it.
	if len(attempts) > 0 {
		require.Equal(t, context.Cause(ctx), <-attempts)
	}
	require.Empty(t, attempts)
}

func TestLock_autoExtend_stopsAtOnceWhenAnExtensionProvesTheLoss(t *testing.T) {
	c, nodes, clk, attempts := newExtendingClient(t)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	waitHeld(t, nodes, "k", l.Token())
	ctx := l.Context()
	require.True(t, armed(t, clk, nil))
	loseOn(nodes[:3], "k") // expired there

	clk.Advance(extInterval)
	require.ErrorIs(t, attempt(t, attempts), ErrLockLost)
	require.ErrorIs(t, ended(t, ctx), ErrLockLost)
	stopped(t, l)
	require.Empty(t, attempts, "a proven loss is not retried")
	for _, n := range nodes[:3] {
		_, held := n.get("k")
		require.False(t, held, "extension re-created the key on %s", n.addr)
	}
}

func TestLock_autoExtend_givesUpAtTheValidityEndWithErrExpired(t *testing.T) {
	// The node timeout (the retry budget) outlasts the validity left after
	// the first attempt, so the validity ends first.
	// The retry comes after the validity end, and must not extend then.
	c, nodes, clk, attempts := newExtendingClient(t, WithNodeTimeout(2*time.Second))
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(9500*time.Millisecond))
	require.NoError(t, err)
	ctx := l.Context()
	until := l.Until()
	require.True(t, armed(t, clk, nil))
	failOn(nodes[:3], errors.New("connection refused"))
	clk.Advance(9500 * time.Millisecond)
	require.ErrorIs(t, attempt(t, attempts), ErrLockLost)
	require.True(t, armed(t, clk, nil)) // the retry, 0.5-1s later
	failOn(nodes[:3], nil)
	clk.Advance(time.Second)
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
	stopped(t, l)
	require.Equal(t, until, l.Until(), "extended after the validity end")
	require.Empty(t, attempts)
}

func TestLock_autoExtend_neverExtendsPastMaxHold(t *testing.T) {
	c, _, clk, attempts := newExtendingClient(t)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval), WithMaxHold(12*time.Second))
	require.NoError(t, err)
	ctx := l.Context()
	for range 3 {
		require.True(t, armed(t, clk, nil))
		clk.Advance(extInterval)
		require.NoError(t, attempt(t, attempts))
	}
	// At 3s only 9s of the hold are left: the last extension has a 9s ttl.
	stopped(t, l)
	want := epoch.Add(3*time.Second + 9*time.Second - (90*time.Millisecond + 2*time.Millisecond))
	require.Equal(t, want, l.Until())
	dl, _ := ctx.Deadline()
	require.Equal(t, want, dl)
	clk.Set(dl)
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
	require.Empty(t, attempts)
}

func TestLock_autoExtend_unlockStopsItAndLeavesNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	require.True(t, armed(t, clk, nil))
	require.NoError(t, l.Unlock(context.Background()))
	// The Client is still open: only Unlock can have stopped the extender.
	goleak.VerifyNone(t, append(ignoreServers(), ignore)...)
	require.Zero(t, clk.Timers())
}

// stuckExtender returns a lock whose extender has made an extension and
// now waits, inside it, until the returned function is called.
func stuckExtender(t *testing.T) (*Client, *Lock, func()) {
	t.Helper()
	c, _, clk, attempts := newExtendingClient(t)
	proceed := make(chan struct{})
	c.onExtend = func(err error) {
		attempts <- err
		<-proceed
	}
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	require.True(t, armed(t, clk, nil))
	clk.Advance(extInterval)
	require.NoError(t, attempt(t, attempts))
	var once sync.Once
	unstick := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(unstick)
	return c, l, unstick
}

// returnsOnlyAfter runs call, and requires it not to have returned before
// unstick (given time to return wrongly) and to return after it.
func returnsOnlyAfter(t *testing.T, call func() error, unstick func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		t.Fatalf("returned while the extender was still running: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	unstick()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("did not return after the extender stopped")
	}
}

func TestLock_autoExtend_unlockWaitsForTheExtender(t *testing.T) {
	_, l, unstick := stuckExtender(t)
	returnsOnlyAfter(t, func() error { return l.Unlock(context.Background()) }, unstick)
	select {
	case <-l.ext.done:
	default:
		t.Fatal("Unlock returned before the extender")
	}
}

func TestClient_Close_waitsForTheExtender(t *testing.T) {
	c, l, unstick := stuckExtender(t)
	returnsOnlyAfter(t, c.Close, unstick)
	select {
	case <-l.ext.done:
	default:
		t.Fatal("Close returned before the extender")
	}
}

func TestClient_Close_stopsAutomaticExtension(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl, WithAutoExtend(extInterval))
	require.NoError(t, err)
	ctx := l.Context()
	require.True(t, armed(t, clk, nil))
	require.NoError(t, c.Close())
	stopped(t, l)
	require.NoError(t, ctx.Err(), "the lock is still valid after Close")
	clk.Set(l.Until())
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
}

func TestLockOptions_rejectCriticalSectionSettingsThatCannotWork(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, tc := range []struct {
		opts []LockOption
		want string
	}{
		{[]LockOption{WithSafetyMargin(-time.Second)}, "safety margin -1s must not be negative"},
		{[]LockOption{WithSafetyMargin(ttl - wantDrift)}, "safety margin 9.898s leaves nothing of the ttl 10s"},
		{[]LockOption{WithAutoExtend(-time.Second)}, "auto-extend interval -1s must not be negative"},
		{[]LockOption{WithAutoExtend(5 * time.Second), WithSafetyMargin(5 * time.Second)}, "auto-extend interval 5s plus safety margin 5s is not below the ttl 10s"},
		{[]LockOption{WithMaxHold(-time.Second)}, "maximum hold -1s must not be negative"},
	} {
		_, err := c.TryLock(context.Background(), "k", ttl, tc.opts...)
		require.ErrorContains(t, err, tc.want)
	}
	for _, n := range nodes {
		require.Zero(t, n.count("SET"), "a node was asked despite a bad option")
	}
}
