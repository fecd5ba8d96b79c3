package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// The notifier's tests run on nodes that can subscribe (psNode): real
// SUBSCRIBE, PING and PUBLISH on in-process servers, with the Client's
// upkeep (pings, redials, the linger) on a fake clock. They wait for
// events, never for a while.

func TestNotify_armedOnlyOnceAQuorumConfirmed(t *testing.T) {
	c, nodes, clk := newPubSubClient(t, 3) // quorum 2
	release1, release2 := nodes[1].holdAcks(), nodes[2].holdAcks()
	w := joinedWaiter(t, c, "k", clk.Now())
	defer w.unlisten()

	nodes[0].waitAcked(t, c.id, "k")
	require.Equal(t, []uint8{bothAcked, 0, 0}, confirmedOn(c, "k"))
	require.False(t, c.notify.armed("k"), "confirmed on 1 node of 3")
	require.True(t, c.notify.subscribed("k"))
	requireNotClosed(t, w.kw.ready, "ready on 1 node of 3")

	release1()
	nodes[1].waitAcked(t, c.id, "k")
	require.Equal(t, []uint8{bothAcked, bothAcked, 0}, confirmedOn(c, "k"))
	require.True(t, c.notify.armed("k"), "confirmed on a quorum")
	require.True(t, c.notify.waitArmed(context.Background(), w.kw))

	release2()
	nodes[2].waitAcked(t, c.id, "k")
	require.Equal(t, []uint8{bothAcked, bothAcked, bothAcked}, confirmedOn(c, "k"))
}

func TestNotify_aNodeWhoseConnectionEndsIsUncountedThenResubscribed(t *testing.T) {
	c, nodes, clk := newPubSubClient(t, 3)
	w := joinedWaiter(t, c, "k", clk.Now())
	defer w.unlisten()
	for _, n := range nodes {
		n.waitAcked(t, c.id, "k")
	}
	require.True(t, c.notify.armed("k"))

	nodes[0].breakConn()
	nodes[1].breakConn()
	nodes[0].waitEnded(t)
	nodes[1].waitEnded(t)
	// The connections worked for less than a ping interval: each node
	// waits for the redial back-off, once its connection is dropped. The
	// pinger's timer, and the two back-offs.
	waitTimers(t, clk, 3)
	require.Equal(t, []uint8{0, 0, bothAcked}, confirmedOn(c, "k"))
	require.False(t, c.notify.armed("k"), "confirmed on 1 node of 3 now")
	require.Equal(t, 1, nodes[0].dials())

	clk.Advance(redialMin)
	for _, n := range nodes[:2] {
		n.waitFor(t, "a second connection", func() bool { return n.dialledLocked(2) })
		n.waitAcked(t, c.id, "k")
		n.waitFor(t, "one SUBSCRIBE of both channels", func() bool {
			return n.sentLocked("SUBSCRIBE") == 1
		})
	}
	require.Equal(t, []uint8{bothAcked, bothAcked, bothAcked}, confirmedOn(c, "k"))
	require.True(t, c.notify.armed("k"))
}

func TestNotify_announcementsBeforeTheQuorumConfirmedReachTheWaiter(t *testing.T) {
	nodes := newPubSubNodes(t, 3)
	c, clk := newClientOnPubSub(t, nodes)
	holder, _ := newClientOn(t, plainNodes(nodes))
	l, err := holder.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	l.after.await() // held on every node, not just on the quorum that decided

	release1, release2 := nodes[1].holdAcks(), nodes[2].holdAcks()
	w := joinedWaiter(t, c, "k", clk.Now())
	defer w.unlisten()
	nodes[0].waitAcked(t, c.id, "k")
	for _, n := range nodes[1:] {
		// Subscribed there: the first acknowledgement arrived, and waits
		// with what follows it.
		n.waitFor(t, "the acknowledgements held", func() bool {
			return n.arrivedLocked(pool.PubSubSubscribed) > 0
		})
	}
	require.NoError(t, l.Unlock(context.Background()))

	// Node 0 confirmed and announces the release; the others' answers
	// wait behind their acknowledgements.
	nodes[0].waitFor(t, "the release announced", func() bool {
		return nodes[0].handledLocked(pool.PubSubMessage, wire.ReleaseChannel("k")) == 1
	})
	require.False(t, c.notify.armed("k"))
	require.Equal(t, 1, w.announced(false))
	requireWoken(t, w)

	release1()
	release2()
	for _, n := range nodes[1:] {
		n.waitFor(t, "the release announced", func() bool {
			return n.handledLocked(pool.PubSubMessage, wire.ReleaseChannel("k")) == 1
		})
	}
	require.True(t, c.notify.armed("k"))
	require.Equal(t, 3, w.announced(false))
}

func TestNotify_aHandOffReachesTheWaiterItNamesOnly(t *testing.T) {
	nodes := newPubSubNodes(t, 3)
	ofB := twins(t, nodes) // b's connections, to the same servers
	a, clkA := newClientOnPubSub(t, nodes)
	b, clkB := newClientOnPubSub(t, ofB)
	ctx := context.Background()
	// b holds the key; as it waits for it too, its release hands it on.
	l, err := b.TryLock(ctx, "k", ttl)
	require.NoError(t, err)
	l.after.await() // held on every node, not just on the quorum that decided

	first := newKeyWaiter(t, a, "k", clkA.Now().Add(-time.Second)) // heads the queue
	second := newKeyWaiter(t, a, "k", clkA.Now())
	other := newKeyWaiter(t, b, "k", clkB.Now()) // another Client's
	var got *Lock
	defer func() { first.end(ctx, got) }()
	defer second.end(ctx, nil)
	defer other.end(ctx, nil)
	queueAll(t, first, second, other)
	for i, n := range nodes {
		n.waitAcked(t, a.id, "k")
		ofB[i].waitAcked(t, b.id, "k")
	}

	require.NoError(t, l.Unlock(ctx)) // hands the key to first, on a's channel
	for i, n := range nodes {
		waitHandOff(t, n, ofB[i], a.id, b.id)
		v, _ := n.get("k")
		require.Equal(t, handedOffToken(first.token, 1), v, "node %d: what a hand-off after first's round 1 sets", i)
	}
	require.Equal(t, []int{1, 1, 1}, granted(first))
	require.Equal(t, []int{0, 0, 0}, granted(second))
	require.Equal(t, []int{0, 0, 0}, granted(other))
	require.Zero(t, second.announced(false)+other.announced(false))
	requireNotWoken(t, second)
	requireNotWoken(t, other)

	got = first.handoff(ctx)
	require.NotNil(t, got, "a quorum handed the key to first")
	require.Equal(t, handedOffToken(first.token, 1), got.Token())
	require.NoError(t, got.Unlock(ctx))
}

func TestNotify_closeEndsAWaitingLockCallAndEveryConnection(t *testing.T) {
	before := goleak.IgnoreCurrent()
	refused := make(chan struct{}, 4)
	c, nodes, clk := newPubSubClient(t, 3, WithObserver(roundObserver(func(info *RoundInfo) {
		if info.Op == OpAcquire && !info.Won {
			refused <- struct{}{}
		}
	})))
	holder, _ := newClientOn(t, plainNodes(nodes))
	l, err := holder.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	l.after.await() // held on every node, not just on the quorum that decided
	defer func() { require.NoError(t, l.Unlock(context.Background())) }()

	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k", ttl)
		done <- err
	}()
	// The plain round, then the script round once subscribed: then the
	// call sleeps, on the pinger's timer and its own.
	receive(t, refused, "a refused round")
	receive(t, refused, "a refused round")
	waitTimers(t, clk, 2)
	for _, n := range nodes {
		n.waitAcked(t, c.id, "k") // every connection is up
	}

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	require.NoError(t, receive(t, closed, "Close"))
	err = receive(t, done, "the Lock call")
	require.ErrorIs(t, err, pool.ErrClosed)
	require.ErrorIs(t, err, ErrNotAcquired)
	for _, n := range nodes {
		n.waitEnded(t)
		require.True(t, n.closedByClient(0))
		require.Zero(t, n.zcard(wire.WaitersKey("k")), "left the queue")
	}
	goleak.VerifyNone(t, append(ignoreServers(), before)...)
}

func TestNotify_aKeyStaysSubscribedForTheLingerAfterItsLastWaiter(t *testing.T) {
	c, nodes, clk := newPubSubClient(t, 3)
	w := joinedWaiter(t, c, "k", clk.Now())
	for _, n := range nodes {
		n.waitAcked(t, c.id, "k")
	}
	w.unlisten()
	advanceSettled(t, clk, linger/2)
	require.True(t, c.notify.subscribed("k"))

	// A waiter that comes back within the linger finds the key armed;
	// its leaving starts the linger anew.
	again := joinedWaiter(t, c, "k", clk.Now())
	require.True(t, c.notify.armed("k"))
	again.unlisten()
	advanceSettled(t, clk, linger/2)
	require.True(t, c.notify.subscribed("k"), "the first linger was called off")
	advanceSettled(t, clk, linger/2-time.Millisecond)
	require.True(t, c.notify.subscribed("k"))
	for _, n := range nodes {
		require.Zero(t, n.sent("UNSUBSCRIBE"))
	}

	advanceSettled(t, clk, time.Millisecond)
	require.False(t, c.notify.subscribed("k"), "a linger after the last waiter left")
	for _, n := range nodes {
		n.waitFor(t, "both channels unsubscribed", func() bool {
			return n.handledLocked(pool.PubSubUnsubscribed, wire.ReleaseChannel("k")) == 1 &&
				n.handledLocked(pool.PubSubUnsubscribed, wire.HandoffChannel(c.id, "k")) == 1
		})
		numsub, err := redis.Values(n.server("PUBSUB", "NUMSUB", wire.ReleaseChannel("k")), nil)
		require.NoError(t, err)
		require.Equal(t, int64(0), numsub[1], "no subscriber left on the server")
		require.Equal(t, 1, n.sent("SUBSCRIBE"), "subscribed once for both waiters")
	}
}

func TestNotify_thePingerClosesAConnectionThatReadNothingForPubsubDead(t *testing.T) {
	c, nodes, clk := newPubSubClient(t, 3)
	w := joinedWaiter(t, c, "k", clk.Now())
	defer w.unlisten()
	for _, n := range nodes {
		n.waitAcked(t, c.id, "k")
	}
	waitTimers(t, clk, 1) // the pinger's: it ticks from now
	nodes[0].muteConn()
	for tick := 1; time.Duration(tick)*pubsubPing < pubsubDead; tick++ {
		pingTick(t, clk, nodes, tick)
		require.False(t, nodes[0].closedByClient(0), "closed after %v", time.Duration(tick)*pubsubPing)
	}
	pingTick(t, clk, nodes, int(pubsubDead/pubsubPing))
	require.True(t, nodes[0].closedByClient(0), "read nothing for pubsubDead")
	require.False(t, nodes[1].closedByClient(0) || nodes[2].closedByClient(0), "the others answered")
	require.Equal(t, 1, nodes[1].dials())

	// It worked for a ping interval: it is dialled again at once.
	nodes[0].waitFor(t, "a second connection", func() bool { return nodes[0].dialledLocked(2) })
	nodes[0].waitAcked(t, c.id, "k")
	require.Equal(t, []uint8{bothAcked, bothAcked, bothAcked}, confirmedOn(c, "k"))
}

func TestNotify_thePingerClosesAConnectionThatLeftASubscribeUnanswered(t *testing.T) {
	c, nodes, clk := newPubSubClient(t, 3)
	nodes[0].swallowAcks(true)
	w := joinedWaiter(t, c, "k", clk.Now())
	defer w.unlisten()
	for _, n := range nodes[1:] {
		n.waitAcked(t, c.id, "k")
	}
	nodes[0].waitFor(t, "SUBSCRIBE sent", func() bool { return nodes[0].sentLocked("SUBSCRIBE") == 1 })
	waitTimers(t, clk, 1) // the pinger's: it ticks from now
	for tick := 1; time.Duration(tick)*pubsubPing < pubsubDead; tick++ {
		pingTick(t, clk, nodes, tick) // node 0 answers PING
		require.False(t, nodes[0].closedByClient(0), "closed after %v", time.Duration(tick)*pubsubPing)
	}
	pingTick(t, clk, nodes, int(pubsubDead/pubsubPing))
	require.True(t, nodes[0].closedByClient(0), "SUBSCRIBE unanswered for pubsubDead")
	require.False(t, nodes[1].closedByClient(0) || nodes[2].closedByClient(0))
	require.Equal(t, []uint8{0, bothAcked, bothAcked}, confirmedOn(c, "k"))
}

// pingTick advances clk by a ping interval and waits until the pinger
// dealt with each node's latest connection: it pinged it (the tick-th
// PING there) and the answer was handled (a muted one answers nothing),
// or it closed it.
func pingTick(t *testing.T, clk *clock.Fake, nodes []*psNode, tick int) {
	t.Helper()
	conns := make([]*psConn, len(nodes))
	for i, n := range nodes {
		conns[i] = n.conn()
	}
	clk.Advance(pubsubPing)
	for i, n := range nodes {
		c := conns[i]
		n.waitFor(t, "the pinger's turn", func() bool {
			return c.closed || (c.sentLocked("PING") >= tick && (c.mute || c.handledLocked(pool.PubSubPong, "") >= tick))
		})
	}
}

// waitHandOff waits until a's connection to node n handled the hand-off
// that the release of key "k" announced to a (Client id aID), and b's
// connection (nb) every announcement to b (bID) before a marker published
// after the release: a hand-off to a waiter of b that is none of the
// test's. Had the release announced anything to b, b heard it first.
func waitHandOff(t *testing.T, n, nb *psNode, aID, bID string) {
	t.Helper()
	n.waitFor(t, "the hand-off to a's waiter", func() bool {
		return n.handledLocked(pool.PubSubMessage, wire.HandoffChannel(aID, "k")) == 1
	})
	n.server("PUBLISH", wire.HandoffChannel(bID, "k"), bID+".x 1")
	nb.waitFor(t, "the marker on b's connection", func() bool {
		return nb.handledLocked(pool.PubSubMessage, wire.HandoffChannel(bID, "k")) == 1
	})
	require.Zero(t, nb.handled(pool.PubSubMessage, wire.ReleaseChannel("k")), "the key was not left free")
}

// queueAll runs a round of each waiter, which the key's holder refuses:
// each listens to the key's announcements and is queued on every node.
func queueAll(t *testing.T, ws ...*waiter) {
	t.Helper()
	for _, w := range ws {
		_, qe, err := w.round(context.Background())
		require.NoError(t, err)
		require.NotNil(t, qe)
		w.sent.await() // queued also on the nodes that answered after the decision
	}
}

// newKeyWaiter returns a waiter of c for key (TTL ttl) whose Lock call
// began at since.
func newKeyWaiter(t *testing.T, c *Client, key string, since time.Time) *waiter {
	t.Helper()
	cfg, err := c.lockConfig(key, ttl, nil)
	require.NoError(t, err)
	w, err := c.newWaiter(mutex{}, key, ttl, cfg, since)
	require.NoError(t, err)
	w.refusing = ^uint64(0) // as if every node refused its round: their releases count
	return w
}

// joinedWaiter is newKeyWaiter, subscribed to key's announcements.
func joinedWaiter(t *testing.T, c *Client, key string, since time.Time) *waiter {
	t.Helper()
	w := newKeyWaiter(t, c, key, since)
	w.listen()
	require.NotNil(t, w.kw)
	return w
}

// confirmedOn returns, per node, what c's subscription of key has
// confirmed there (bothAcked: the node counts).
func confirmedOn(c *Client, key string) []uint8 {
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	kw, ok := n.keys[key]
	if !ok {
		return nil
	}
	count := 0
	for _, a := range kw.acks {
		if a == bothAcked {
			count++
		}
	}
	if count != kw.count {
		panic("keyWait.count disagrees with its acks")
	}
	return append([]uint8(nil), kw.acks...)
}

// granted returns the rounds each node handed the key to w after.
func granted(w *waiter) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.granted...)
}

func requireWoken(t *testing.T, w *waiter) {
	t.Helper()
	select {
	case <-w.wake:
	default:
		t.Fatal("the waiter was not woken")
	}
}

func requireNotWoken(t *testing.T, w *waiter) {
	t.Helper()
	select {
	case <-w.wake:
		t.Fatal("the waiter was woken")
	default:
	}
}

func requireNotClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(msg)
	default:
	}
}

// advanceSettled advances clk by d and waits until the AfterFunc
// callbacks that fell due have returned: the fake clock runs those of one
// Advance one after another, in the order of their deadlines, so a
// callback of its own due at the end runs last.
func advanceSettled(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	settled := make(chan struct{})
	clk.AfterFunc(d, func() { close(settled) })
	clk.Advance(d)
	receive(t, settled, "the callbacks due")
}

// waitTimers waits until n timers wait on clk.
func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	failsafe := make(chan struct{})
	stop := time.AfterFunc(10*time.Second, func() { close(failsafe) })
	defer stop.Stop()
	require.True(t, clk.WaitTimers(n, failsafe), "waited 10s for %d timers, %d are set", n, clk.Timers())
}

// receive returns what ch delivers; it fails the test after 10 seconds.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
		panic("unreachable")
	}
}

// roundObserver is an Observer of rounds only.
type roundObserver func(*RoundInfo)

func (f roundObserver) Round(info *RoundInfo) { f(info) }
func (roundObserver) Event(Event)             {}

// unlisten ends w's subscription, as the end of its wait does.
func (w *waiter) unlisten() {
	if w.kw != nil {
		w.c.notify.leave(w.kw, w)
		w.kw = nil
	}
}
