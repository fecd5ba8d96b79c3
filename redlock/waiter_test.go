package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

func TestWaiter_countsAnnouncementsThatConcernIt(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	w := newTestWaiter(t, c, clk.Now())
	other := "c2.x"
	w.announce(0, other) // kept for another waiter: ignored
	require.Zero(t, w.announced(false))
	select {
	case <-w.wake:
		t.Fatal("woken for another waiter's hand-off")
	default:
	}

	w.announce(1, "")   // free for anyone
	w.announce(2, w.id) // kept for w
	w.announce(2, w.id) // the same node twice counts once
	require.Equal(t, 2, w.announced(false))
	require.Equal(t, 1, w.announced(true))
	<-w.wake

	// The nodes w released itself after its failed round do not count:
	// those that granted, whether restart safety counted the grant or not,
	// and those that had not answered by the decision (not awaited, timed
	// out), which the round releases if they grant late; those that
	// refused do.
	w.ignoreOwn(&round{nodes: []NodeResult{nHeld, nGranted, nHeld, nHeld, nHeld}})
	require.Equal(t, 1, w.announced(false))
	w.ignoreOwn(&round{nodes: []NodeResult{nHeld, nUnchecked, nNotAwaited, nHeld, nHeld}})
	require.Zero(t, w.announced(false))
	w.ignoreOwn(&round{nodes: []NodeResult{nHeld, nTimedOut, nRestarted, nHeld, nHeld}})
	require.Zero(t, w.announced(false))
	w.ignoreOwn(&round{nodes: []NodeResult{nGranted, nRefusedDial, nHeld, nGranted, nGranted}})
	require.Equal(t, 1, w.announced(false), "only a node that refused w counts: one never reached holds no key of w's, but no key that held w back either")
	w.ignoreOwn(&round{nodes: []NodeResult{nHeld, nHeld, nGranted, nGranted, nGranted}})
	require.Equal(t, 1, w.announced(false), "node 2 granted (w released it): node 1 refused")

	w.forget()
	require.Zero(t, w.announced(false))
	require.Zero(t, w.announced(true))
}

func TestWaiter_countsHandOffsThatFollowedItsLatestRound(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	w := newTestWaiter(t, c, clk.Now())
	n, _, _ := w.handoffs()
	require.Zero(t, n, "no round yet")
	w.rounds, w.last = 2, &round{start: clk.Now().Add(time.Second)}
	w.announce(0, w.id+" 2")
	w.announce(1, w.id+" 1")  // before round 2 ran there: round 2 may have taken it back
	w.announce(2, "c2.x 2")   // another waiter's
	w.announce(3, w.id+" x2") // garbled
	n, _, start := w.handoffs()
	require.Equal(t, 1, n)
	require.Equal(t, w.last.start, start, "counted from the start of round 2")
	w.announce(1, w.id+" 2")
	w.announce(0, w.id+" 1") // a late announcement does not undo a newer one
	w.announce(4, w.id+" 2")
	n, _, _ = w.handoffs()
	require.Equal(t, 3, n)
	require.Zero(t, w.announced(false), "a hand-off is not a release for anyone")
	require.Zero(t, w.announced(true), "nor a reservation that needs a round")

	// A new round may take back what was handed over before it.
	w.rounds, w.last = 3, &round{start: clk.Now()}
	n, _, _ = w.handoffs()
	require.Zero(t, n)
}

func TestClient_handoffCountsTheValidityFromTheLatestRound(t *testing.T) {
	c, _, clk := newFakeClient(t, 5, WithDriftFactor(0))
	const ttl = 10 * time.Second
	w := newTestWaiter(t, c, clk.Now())
	w.rounds, w.last = 1, &round{start: clk.Now()}
	round := clk.Now()
	clk.Advance(3 * time.Second)
	for i := range 2 {
		w.announce(i, w.id+" 1")
	}
	require.Nil(t, w.handoff(context.Background()), "2 nodes are not a quorum")
	w.announce(2, w.id+" 1")
	l := w.handoff(context.Background())
	require.NotNil(t, l)
	require.Equal(t, handedOffToken(w.token, 1), l.Token(), "what the hand-offs after round 1 set")
	require.Equal(t, round.Add(ttl-driftFloor), l.Until())
	require.Equal(t, w.id, l.queueID, "its release leaves the queue")
	require.Equal(t, w.token, l.handoffToken, "and gives up what hand-offs after other rounds set")

	// Less than half the TTL left: a round takes the key afresh.
	clk.Advance(2*time.Second - driftFloor - time.Millisecond) // 5s+1ms left
	require.NotNil(t, w.handoff(context.Background()))
	clk.Advance(2 * time.Millisecond)
	require.Nil(t, w.handoff(context.Background()))
}

func TestSleep(t *testing.T) {
	c, _, clk := newFakeClient(t, 5, WithNodeTimeout(40*time.Millisecond)) // grace: 5ms
	ctx := context.Background()
	startW := func(w *waiter, d time.Duration, need int, namedOnly bool) (*waiter, <-chan error) {
		done := make(chan error, 1)
		go func() {
			_, err := w.await(ctx, d, need, namedOnly, 0)
			done <- err
		}()
		require.True(t, clk.WaitTimers(1, nil))
		return w, done
	}
	start := func(d time.Duration, need int, namedOnly bool) (*waiter, <-chan error) {
		return startW(newTestWaiter(t, c, clk.Now()), d, need, namedOnly)
	}
	// afterRound is a waiter whose one round has run.
	afterRound := func() *waiter {
		w := newTestWaiter(t, c, clk.Now())
		w.rounds, w.last = 1, &round{start: clk.Now()}
		return w
	}
	requireAsleep := func(done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("woke early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	t.Run("runs out", func(t *testing.T) {
		_, done := start(time.Second, 3, false)
		requireAsleep(done)
		clk.Advance(time.Second)
		require.NoError(t, <-done)
	})
	t.Run("a reservation for it wakes it at once", func(t *testing.T) {
		w, done := start(time.Hour, 3, false)
		w.announce(0, w.id)
		require.NoError(t, <-done)
	})
	t.Run("hand-offs from a quorum wake it", func(t *testing.T) {
		w, done := startW(afterRound(), time.Hour, 3, false)
		w.announce(0, w.id+" 1")
		w.announce(1, w.id+" 1")
		requireAsleep(done)
		w.announce(2, w.id+" 1")
		require.NoError(t, <-done)
	})
	t.Run("hand-offs from fewer nodes: a round after the grace", func(t *testing.T) {
		w, done := startW(afterRound(), time.Hour, 3, false)
		w.announce(0, w.id+" 1")
		requireAsleep(done)
		clk.Advance(5 * time.Millisecond)
		require.NoError(t, <-done)
	})
	t.Run("free-for-all announcements: enough nodes", func(t *testing.T) {
		w, done := start(time.Hour, 2, false)
		w.announce(0, "")
		requireAsleep(done)
		w.announce(1, "")
		require.NoError(t, <-done)
	})
	t.Run("free-for-all announcements: grace after the first", func(t *testing.T) {
		w, done := start(time.Hour, 3, false)
		from := clk.Now()
		w.announce(0, "")
		requireAsleep(done)
		// Time goes on a millisecond at a time until it wakes: after the
		// grace (5ms), long before its hour.
		require.Eventually(t, func() bool {
			clk.Advance(time.Millisecond)
			select {
			case err := <-done:
				require.NoError(t, err)
				return true
			default:
				return false
			}
		}, 10*time.Second, time.Millisecond)
		require.GreaterOrEqual(t, clk.Now().Sub(from), 5*time.Millisecond)
		require.Less(t, clk.Now().Sub(from), 50*time.Millisecond, "the grace (5ms), not a longer wait")
	})
	t.Run("the grace never outlasts the wait", func(t *testing.T) {
		w, done := start(2*time.Millisecond, 3, false)
		w.announce(0, "")
		requireAsleep(done)
		clk.Advance(2 * time.Millisecond)
		require.NoError(t, <-done)
	})
	t.Run("after a split only a hand-off to it counts", func(t *testing.T) {
		w, done := start(time.Hour, 1, true)
		w.announce(0, "")
		w.announce(1, "")
		requireAsleep(done)
		w.announce(2, w.id)
		require.NoError(t, <-done)
	})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		w := newTestWaiter(t, c, clk.Now())
		done := make(chan error, 1)
		go func() {
			_, err := w.await(ctx, time.Hour, 3, false, 0)
			done <- err
		}()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

// newTestWaiter returns a waiter for key "k" with a TTL of 10s that takes
// hand-offs.
func newTestWaiter(t *testing.T, c *Client, since time.Time) *waiter {
	t.Helper()
	const ttl = 10 * time.Second
	cfg, err := c.lockConfig("k", ttl, nil)
	require.NoError(t, err)
	w, err := c.newWaiter(mutex{}, "k", ttl, cfg, since)
	require.NoError(t, err)
	w.refusing = ^uint64(0) // as if every node refused its round: their releases count
	return w
}

func TestWaitToken(t *testing.T) {
	const id, secret = "3k2j.1x9z", "0f8fad5b-d9cb-469f-a165-70867728950e"
	for _, tc := range []struct {
		token, id, handoff string
		ok                 bool
	}{
		{id + "/" + secret, id, "", true},
		{id + "/" + secret + "/7", id, id + "/" + secret, true},
		{id + "/" + secret + "/h7", id, id + "/" + secret, true}, // what a hand-off after round 7 sets
		{id + "/" + secret + "/h", "", "", false},
		{id + "/" + secret + "/hh7", "", "", false},
		{secret, "", "", false},                    // a round of a call that did not wait
		{"token-from-the-request", "", "", false},  // someone's own token
		{id + "/" + secret + "/07", "", "", false}, // not a round number as Lock writes it
		{id + "/" + secret + "/0", "", "", false},
		{id + "/not-a-uuid", "", "", false},
		{"UPPER.x/" + secret, "", "", false},
		{"nodot/" + secret, "", "", false},
	} {
		gotID, gotHandoff, ok := waitToken(tc.token)
		require.Equal(t, tc.ok, ok, tc.token)
		require.Equal(t, tc.id, gotID, tc.token)
		require.Equal(t, tc.handoff, gotHandoff, tc.token)
	}

	// What Extend accepts besides the token: for a round's token, the
	// hand-off after that same round only.
	require.Equal(t, id+"/"+secret+"/h7", extendAlso(id+"/"+secret+"/7", id+"/"+secret))
	require.Empty(t, extendAlso(id+"/"+secret+"/h7", id+"/"+secret), "a hand-off's value is the token")
	require.Empty(t, extendAlso(id+"/"+secret, ""), "a hand-off token alone")
	require.Empty(t, extendAlso(secret, ""), "a token of a call that did not wait")

	// The tokens a waiter makes read back as its own.
	c, _, clk := newFakeClient(t, 5)
	w := newTestWaiter(t, c, clk.Now())
	gotID, _, ok := waitToken(w.token)
	require.True(t, ok)
	require.Equal(t, w.id, gotID)
	ww := w.next()
	g, err := c.mutexGrab(mutex{}, "k", time.Second, w.cfg, &ww)
	require.NoError(t, err)
	gotID, gotHandoff, ok := waitToken(g.token)
	require.True(t, ok)
	require.Equal(t, w.id, gotID)
	require.Equal(t, w.token, gotHandoff)
	require.True(t, strings.HasSuffix(g.token, "/1"), "the round's number, counted before it is sent")
	plain, err := c.mutexGrab(mutex{}, "k", time.Second, w.cfg, nil)
	require.NoError(t, err)
	_, _, ok = waitToken(plain.token)
	require.False(t, ok, "a plain round's token is a bare random value")
}

// A release follows every round of the Lock call that has not settled on
// its node, not only the latest: with several connections a node, an
// earlier round can land after a later one.
func TestOp_waitsForEveryUnsettledRound(t *testing.T) {
	// No queueing: the waiter is not counted as work Close waits for.
	c, _, clk := newFakeClient(t, 2, WithHandoffWindow(0))
	pendingRound := func() *round {
		r := &round{c: c, req: request{script: wire.Acquire}, sent: true, nodes: make([]NodeResult, 2)}
		r.left.Store(1) // one reply to come
		return r
	}
	r1, r2 := pendingRound(), pendingRound()
	r2.nodes[1].Status = NodeRefused // node 1 answered r2 in time
	w := newTestWaiter(t, c, clk.Now())
	for _, r := range []*round{r1, r2, {start: clk.Now()}} { // the last was never sent
		w.queuedBy(r)
	}
	require.Equal(t, r2, w.sent.last)
	require.Equal(t, []*round{r1}, w.sent.earlier)

	o := request{after: w.sent}
	require.True(t, o.after.on(0))
	require.True(t, o.after.on(1), "r1 is pending on node 1")
	r1.replied()
	require.False(t, o.after.on(1))
	require.True(t, o.after.on(0), "r2 is pending on node 0")
	r2.replied()
	require.False(t, o.after.on(0))
	o.after.await() // returns: both settled

	// A new round drops the settled ones.
	r3 := pendingRound()
	w.queuedBy(r3)
	require.Equal(t, r3, w.sent.last)
	require.Empty(t, w.sent.earlier)
	(&round{}).await() // never sent: does not block
}

func TestRound_awaitReturnsWithTheLastReply(t *testing.T) {
	r := &round{sent: true, nodes: make([]NodeResult, 2)}
	r.left.Store(2)
	done := make(chan struct{})
	go func() {
		r.await()
		close(done)
	}()
	r.replied()
	select {
	case <-done:
		t.Fatal("await returned with a reply still to come")
	case <-time.After(20 * time.Millisecond):
	}
	require.False(t, r.settledAll())
	r.replied()
	<-done
	require.True(t, r.settledAll())
	r.await() // settled: returns at once
}

// A release follows a plain round (SET NX) on an async.Starter at once: the
// pool keeps the order of the commands started on one key, so waiting for
// the round's reply would only let the holder's next round overtake the
// release, and find the key still taken. A script round is waited for
// everywhere (after NOSCRIPT it is sent again, behind later commands), as
// is any round on a pool that is not a Starter.
func TestRound_aPlainRoundOnAStarterNeedNotBeWaitedFor(t *testing.T) {
	pools := []pool.Pool{starterPool{"s:1"}, starterPool{"s:2"}, newTestNode(t, "p:3")}
	c, err := New(pools, WithRestartSafety(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	unsettled := func(o request) *round {
		r := &round{c: c, req: o, sent: true, nodes: make([]NodeResult, 3)}
		r.left.Store(3)
		return r
	}
	plain := unsettled(request{cmd: "SET"})
	require.False(t, plain.unsettled(0), "a Starter keeps the order")
	require.True(t, plain.unsettled(2), "a pool that is not a Starter does not")
	script := unsettled(request{script: wire.Acquire})
	require.True(t, script.unsettled(0), "a script may be sent again behind later commands")
	// A waiting call's first round as a transaction (StartTx keeps the
	// order too).
	tx := unsettled(request{tx: &queueTx{key: "k"}})
	require.False(t, tx.unsettled(0), "a transaction is not sent again")
}

// starterPool is an async.Starter that is never sent anything.
type starterPool struct{ addr string }

func (p starterPool) Addr() string                                    { return p.addr }
func (p starterPool) Do(context.Context, string, ...any) (any, error) { return nil, nil }
func (p starterPool) Eval(context.Context, *pool.Script, ...any) (any, error) {
	return nil, nil
}
func (p starterPool) Start(async.Receiver, string, ...any)           {}
func (p starterPool) StartEval(async.Receiver, *pool.Script, ...any) {}

// announce hands w what node i announced, as the notifier does.
func (w *waiter) announce(i int, msg string) {
	if a := wire.ParseAnnouncement(msg); a.Handoff {
		w.handedOff(i, a.To, a.Round, 1)
	} else {
		w.released(i, a.To)
	}
}

// A waiter whose round could not ask node 4 is woken when node 4 confirms
// the key's subscription (its pub/sub connection is back). When the round
// that follows still cannot ask it (the Client's command connection to
// the node dials with a back-off of its own), the next rounds come by
// lagRetry, not after the holder's keys run out; once a round asks node 4,
// the sleep is the round's own again.
func TestWaiter_asksSoonAgainWhileANodeThatIsBackCannotBeAskedYet(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	w := newTestWaiter(t, c, clk.Now())
	down := []NodeResult{nGranted, nGranted, nHeld, nHeld, nRefusedDial} // out of reach: back-off
	busy := []NodeResult{nNotAwaited, nNotAwaited, nHeld, nHeld, nHeld}  // the holder's keys: 5s
	qe := func(nodes []NodeResult) *QuorumError {
		return &QuorumError{Op: OpAcquire, Quorum: 3, Nodes: nodes, Err: ErrNotAcquired}
	}
	w.pace.retry = fixedRetry(time.Hour)

	w.forget()
	d, _ := w.pause(qe(down), 1)
	require.Equal(t, time.Hour, d, "the back-off")
	require.False(t, w.backNew.Swap(false))
	w.subscribed(3) // a node the round asked: no news
	require.False(t, w.backNew.Swap(false))
	w.subscribed(4)
	require.True(t, w.backNew.Swap(false), "node 4 is back: w asks again")
	<-w.wake

	for k := range 3 {
		w.forget()
		d, _ = w.pause(qe(down), k+2)
		require.LessOrEqual(t, d, lagRetry.max, "round %d still could not ask node 4", k+2)
		require.False(t, w.backNew.Swap(false))
	}

	w.forget()
	d, _ = w.pause(qe(busy), 5)
	require.GreaterOrEqual(t, d, 5*time.Second, "node 4 was asked: the holder's keys pace the round")
	w.forget()
	d, _ = w.pause(qe(down), 6)
	require.Equal(t, time.Hour, d, "down again, not heard back yet: the back-off")
}
