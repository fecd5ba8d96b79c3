package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// A release by a holder that waited gives the key to the next waiter on
// every node: the waiter holds the lock without asking again, and its
// validity counts from its last round, which began before the release.
func TestLock_aHandOffNeedsNoRound(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"pipelined", "redigo"} {
		t.Run(kind, func(t *testing.T) {
			// b goes on with a round of its own when the nodes' hand-off
			// announcements do not all come within its grace period (5ms),
			// which a loaded machine can delay: such a run is made again,
			// up to three in all, and one of them must need no round.
			for attempt := 1; ; attempt++ {
				rounds := handOffRounds(t, kind)
				if rounds == 2 {
					return
				}
				require.Less(t, attempt, 3, "b sent a round after the releases in every run (%d rounds in the last)", rounds)
				t.Logf("run %d: b sent %d rounds (the hand-off announcements came late): running again", attempt, rounds)
			}
		})
	}
}

// handOffRounds runs TestLock_aHandOffNeedsNoRound's scenario once with
// pools of kind, and returns how many rounds b sent in all.
func handOffRounds(t *testing.T, kind string) int64 {
	e := newEnv(t, 5)
	key := newKey(t)
	// x holds the key, and one of its Lock calls (a) waits for it: x's
	// release gives the key to a, a's to b.
	x := newClient(t, newPools(t, e.addrs))
	held := takeEverywhere(t, e, x, key, hourTTL)
	a := lockAsync(ctxT(t, time.Minute), x, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)

	pools, rounds := counted(poolsOfKind(t, kind, e.addrs))
	// A node timeout far above the test's length: b renews its queue
	// entries only every 5 node timeouts, so every round b sends is one
	// the test asked for. No drift allowance but the 2ms floor.
	b := newClient(t, pools, noRefresh, redlock.WithDriftFactor(0))
	gotB := lockAsync(ctxT(t, time.Minute), b, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 2)
	// b asked with SET NX, then with the script, which queued it.
	require.Eventually(t, func() bool { return rounds.Load() == 2 }, 10*time.Second, time.Millisecond)
	queuedAt := time.Now() // after b's last round began
	time.Sleep(50 * time.Millisecond)

	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	ra := <-a
	require.NoError(t, ra.err)
	select {
	case r := <-gotB:
		t.Fatalf("b returned while a held the key: %v", r.err)
	default:
	}
	require.NoError(t, ra.l.Unlock(ctxT(t, quickly)))
	rb := <-gotB
	require.NoError(t, rb.err, "only a hand-off can end b's wait within the test")
	n := rounds.Load()
	awaitToken(t, e.nodes, key, rb.l.Token())
	if n == 2 {
		require.False(t, rb.l.Until().After(queuedAt.Add(longTTL-2*time.Millisecond)),
			"b's validity counts from its last round, not from the hand-off: until %v, queued at %v",
			rb.l.Until(), queuedAt)
	}
	require.Positive(t, rb.l.Validity())
	require.NoError(t, rb.l.Unlock(ctxT(t, quickly)))
	// Unlock returns once a quorum released: the others may still be on
	// their way.
	awaitAbsent(t, e.nodes, key)
	return n
}

// unsubscribedPool hides pool.Subscriber: a Client on it hears no
// announcements.
type unsubscribedPool struct{ p pool.Pool }

func (p unsubscribedPool) Addr() string { return p.p.Addr() }
func (p unsubscribedPool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	return p.p.Do(ctx, cmd, args...)
}
func (p unsubscribedPool) Eval(ctx context.Context, s *pool.Script, args ...any) (any, error) {
	return p.p.Eval(ctx, s, args...)
}

// A waiter that gives up passes on what was handed to it: here a key
// given to it while it could not hear of it (its Client has no pub/sub).
func TestLock_aWaiterThatGivesUpPassesOnTheKeyHandedToIt(t *testing.T) {
	// Serial: the hand-off must reach the waiter before its refresh
	// round, 5s later (main_test.go).
	e := newEnv(t, 5)
	key := newKey(t)
	holder := e.client()
	held := takeEverywhere(t, e, holder, key, hourTTL)

	deaf := make([]pool.Pool, len(e.addrs))
	for i, p := range newPools(t, e.addrs) {
		deaf[i] = unsubscribedPool{p}
	}
	w := newClient(t, deaf)
	wctx, giveUp := context.WithCancel(ctxT(t, time.Minute))
	defer giveUp()
	// w's TTL outlasts the test: only its own release can free the key.
	gotW := lockAsync(wctx, w, key, hourTTL, neverRetry)
	require.Eventually(t, func() bool {
		for _, s := range e.nodes {
			if queued(t, s, key) != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "w queued on every node")
	y := newClient(t, newPools(t, e.addrs))
	gotY := lockAsync(ctxT(t, time.Minute), y, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 2)

	// The holder did not wait: its release leaves the key free, and y's
	// round gives it to the head of the queue, w, which does not hear it.
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	for i, s := range e.nodes {
		require.Eventually(t, func() bool {
			v, ok := get(t, s, key)
			return ok && v != held.Token() && !strings.HasPrefix(v, "redlock:reserved:")
		}, 10*time.Second, time.Millisecond, "node %d: the key was given to w", i)
	}
	select {
	case r := <-gotY:
		t.Fatalf("y got the key handed to w: %v", r.err)
	case r := <-gotW:
		t.Fatalf("w returned without hearing of the hand-off: %v", r.err)
	default:
	}

	giveUp()
	require.ErrorIs(t, (<-gotW).err, context.Canceled)
	r := <-gotY
	require.NoError(t, r.err, "w's release passed the key on to y")
	awaitToken(t, e.nodes, key, r.l.Token())
	require.NoError(t, r.l.Unlock(ctxT(t, quickly)))
}

// Close lets a waiting Lock leave the queues before it returns: nothing
// is left for a release to hand the key to.
func TestLock_closingTheClientTakesItsWaitersOutOfTheQueue(t *testing.T) {
	// Serial: every node must have answered the waiter's release by the
	// time Close returns. Beside parallel tests, on a loaded machine, node
	// 0 still queued the waiter once (main_test.go).
	e := newEnv(t, 5)
	key := newKey(t)
	holder := e.client()
	held := takeEverywhere(t, e, holder, key, hourTTL)
	c := newClient(t, newPools(t, e.addrs)) // closed here first; a second Close does nothing
	got := lockAsync(ctxT(t, time.Minute), c, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)

	require.NoError(t, c.Close())
	for i, s := range e.nodes {
		require.Zero(t, queued(t, s, key), "node %d: the closed Client's waiter is still queued", i)
	}
	require.ErrorIs(t, (<-got).err, pool.ErrClosed)
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
}

// script returns one of the protocol's scripts (internal/wire) as a
// redigo script, for tests that run it on a node by hand; keys is its key
// count, -1 when it goes with each call.
func script(s *pool.Script, keys int) *redis.Script {
	return redis.NewScript(keys, s.Source())
}

// testQueue is the queue arguments of the script tests: window 50ms,
// slack 150ms, refresh 1s.
var testQueue = wire.NewQueue(50, 150, 1000)

// acquireArgs are acquire.lua's keys and arguments for waiter id's round
// with token, hand-off token handoff, TTL 10s, and a wait that began now.
func acquireArgs(key, token, id string, round int, handoff string) []any {
	return testQueue.AcquireArgs(key, token, 10_000,
		wire.Waiter{ID: id, Since: time.Now().UnixMicro(), Round: round, Handoff: handoff}, "")
}

// releaseArgs are release.lua's keys and arguments for giving up owned
// and alt, the queue id id leaving the queue.
func releaseArgs(key, owned, id, alt string) []any {
	return testQueue.ReleaseArgs(key, owned, id, alt)
}

// The scripts, on one real node: a hand-off sets the token of the head's
// round that ran there last and names that round; a later round of the
// waiter takes the key under its own token, one that is not later and
// arrives late does not, with or without the waiter's entry.
func TestScripts_aLateRoundDoesNotTakeBackAHandOff(t *testing.T) {
	e := newEnv(t, 1)
	s := e.nodes[0]
	acquire, release := script(wire.Acquire, -1), script(wire.Release, 2)
	conn := dialNode(t, s)
	key := newKey(t)
	eval := func(sc *redis.Script, args ...any) any {
		t.Helper()
		v, err := sc.Do(conn, args...)
		require.NoError(t, err)
		return v
	}
	tok := func(round int) string { return "h/" + strconv.Itoa(round) }        // w's rounds' tokens: its hand-off token "h", a slash, the round
	handedOff := func(round int) string { return "h/h" + strconv.Itoa(round) } // what a hand-off after that round sets

	// The holder takes the key; w queues with rounds 1 and 2, and is told
	// the TTL.
	require.Equal(t, int64(1), eval(acquire, acquireArgs(key, "held", "", 0, "")...))
	for round := 1; round <= 2; round++ {
		v := eval(acquire, acquireArgs(key, tok(round), "cw.1", round, "h")...).([]any)
		require.Equal(t, int64(0), v[0])
	}
	sub := subscribe(t, s, "redlock:handoff:cw:"+key)
	require.Equal(t, int64(1), eval(release, releaseArgs(key, "held", "", "")...))
	require.Equal(t, "cw.1 2", sub(), "naming w and its round 2")
	// The release that round 2 owes, had it failed (its own token, for a
	// node that may have granted it), does not give the hand-off away: w
	// may count it.
	require.Equal(t, int64(0), eval(release, releaseArgs(key, tok(2), "", "")...), "round 2's own release")
	v, _ := get(t, s, key)
	require.Equal(t, handedOff(2), v, "the release named w's round 2, the latest that ran here")
	require.InDelta(t, 10*time.Second, pttl(t, s, key), float64(time.Second), "with w's TTL")
	require.False(t, inQueue(t, s, key, "cw.1"), "w, handed the key, left the queue")

	// Rounds 1 and 2, late: refused, writing nothing, also once w's entry
	// has run out; the key stays w's.
	for _, entry := range []bool{true, false} {
		if !entry {
			_, err := conn.Do("DEL", wire.EntryKey(key, "cw.1"))
			require.NoError(t, err)
		}
		for round := 1; round <= 2; round++ {
			require.Equal(t, int64(0), eval(acquire, acquireArgs(key, tok(round), "cw.1", round, "h")...).([]any)[0])
			v, _ = get(t, s, key)
			require.Equal(t, handedOff(2), v)
			require.False(t, inQueue(t, s, key, "cw.1"), "a late round does not queue w again")
		}
	}
	_, ok := get(t, s, wire.EntryKey(key, "cw.1"))
	require.False(t, ok, "nor writes its entry")

	// Round 3 takes it under its token; round 3 again is late.
	require.Equal(t, int64(1), eval(acquire, acquireArgs(key, tok(3), "cw.1", 3, "h")...))
	v, _ = get(t, s, key)
	require.Equal(t, tok(3), v)
	require.Equal(t, int64(0), eval(acquire, acquireArgs(key, tok(3), "cw.1", 3, "h")...).([]any)[0])

	// A lock won by round 3 gives up what a hand-off after another round
	// set too, and nothing of another waiter's.
	_, err := conn.Do("SET", key, handedOff(2))
	require.NoError(t, err)
	require.Equal(t, int64(0), eval(release, releaseArgs(key, tok(3), "cw.1", "")...))
	for _, other := range []string{"hh/2", "h", "x/h/2"} {
		_, err = conn.Do("SET", key, other)
		require.NoError(t, err)
		require.Equal(t, int64(0), eval(release, releaseArgs(key, tok(3), "cw.1", "h")...), "%q is not w's", other)
		require.Equal(t, int64(0), eval(acquire, acquireArgs(key, tok(9), "cw.1", 9, "h")...).([]any)[0], "%q is not w's", other)
		v, _ = get(t, s, key)
		require.Equal(t, other, v)
	}
	_, err = conn.Do("SET", key, handedOff(2))
	require.NoError(t, err)
	require.Equal(t, int64(1), eval(release, releaseArgs(key, tok(3), "cw.1", "h")...))
	_, ok = get(t, s, key)
	require.False(t, ok, "no one left queued: the key is free")

	// A value that starts like w's but names no round is not taken.
	_, err = conn.Do("SET", key, "h/x")
	require.NoError(t, err)
	require.Equal(t, int64(0), eval(acquire, acquireArgs(key, tok(4), "cw.1", 4, "h")...).([]any)[0])
	v, _ = get(t, s, key)
	require.Equal(t, "h/x", v)
}

// dialNode returns a connection to s, closed when the test ends.
func dialNode(t *testing.T, s *redistest.Server) redis.Conn {
	t.Helper()
	conn, err := redis.Dial("tcp", s.Addr(), redis.DialReadTimeout(testReadTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// subscribe subscribes to ch on s and returns a function that returns the
// next message's text.
func subscribe(t *testing.T, s *redistest.Server, ch string) func() string {
	t.Helper()
	return listen(t, s, func(psc redis.PubSubConn) error { return psc.Subscribe(ch) },
		func(m redis.Message) string { return string(m.Data) })
}

// psubscribe subscribes to the channels that match pattern on s and
// returns a function that returns the next message's channel.
func psubscribe(t *testing.T, s *redistest.Server, pattern string) func() string {
	t.Helper()
	return listen(t, s, func(psc redis.PubSubConn) error { return psc.PSubscribe(pattern) },
		func(m redis.Message) string { return m.Channel })
}

// listen subscribes on a connection of its own to s with sub, waits for
// the confirmation, and returns a function that returns what pick reads
// from the next message.
func listen(t *testing.T, s *redistest.Server, sub func(redis.PubSubConn) error, pick func(redis.Message) string) func() string {
	t.Helper()
	psc := redis.PubSubConn{Conn: dialNode(t, s)}
	require.NoError(t, sub(psc))
	for subscribed := false; !subscribed; {
		switch m := psc.Receive().(type) {
		case redis.Subscription:
			subscribed = true
		case error:
			require.NoError(t, m)
		}
	}
	return func() string {
		t.Helper()
		switch m := psc.ReceiveWithTimeout(quickly).(type) {
		case redis.Message:
			return pick(m)
		case error:
			require.NoError(t, m)
		}
		return ""
	}
}

// A lock that Lock got after waiting can be released through a handle
// restored from its token alone: the token names the Lock call, whose
// queue entries go with the release. Left behind, an entry would make the
// next round give the key to a call that has ended.
func TestLock_aRestoredHandleTakesTheWaitedLockOutOfTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	holder := e.client()
	held := takeEverywhere(t, e, holder, key, hourTTL)
	got := lockAsync(ctxT(t, time.Minute), newClient(t, newPools(t, e.addrs)), key, hourTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	r := <-got
	require.NoError(t, r.err)
	id, _, ok := strings.Cut(r.l.Token(), "/")
	require.True(t, ok, "a waited lock's token names its Lock call")
	require.Equal(t, len(e.nodes), queuedOn(t, e.nodes, key, id), "queued everywhere by its refused round, kept there by its winning round")

	// Another process (here another Client) releases it by key and token.
	// Unlock returns once a quorum released: those nodes dropped the entry
	// (it would otherwise last until the queue expires, a second or more).
	other := newClient(t, newPools(t, e.addrs))
	require.NoError(t, other.Restore(key, r.l.Token()).Unlock(ctxT(t, quickly)))
	require.LessOrEqual(t, queuedOn(t, e.nodes, key, id), len(e.nodes)-3, "the releasing quorum took the call out of its queues")
	for i, s := range e.nodes {
		require.Eventually(t, func() bool {
			_, held := get(t, s, key)
			return !inQueue(t, s, key, id) && !held
		}, 10*time.Second, time.Millisecond, "node %d: the call is still queued or the key held", i)
	}
}

// A waiter's round that finds the key free while the waiter heads the
// queue takes the key; the waiter stays queued only while its entry is
// live, and the queue never outlives its entries: a queue left without a
// TTL would stay on the node for good once nobody uses the key.
func TestScripts_theHeadsRoundOnAFreeKeyLeavesNoQueueWithoutATTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	s := e.nodes[0]
	acquire := script(wire.Acquire, -1)
	conn := dialNode(t, s)
	for _, live := range []bool{false, true} {
		key := newKey(t)
		_, err := conn.Do("ZADD", wire.WaitersKey(key), 1, "cw.1")
		require.NoError(t, err)
		if live {
			_, err = conn.Do("SET", wire.EntryKey(key, "cw.1"), "1 10000 h", "PX", 5000)
			require.NoError(t, err)
		}
		v, err := acquire.Do(conn, acquireArgs(key, "w-round-2", "cw.1", 2, "h")...)
		require.NoError(t, err)
		require.Equal(t, int64(1), v, "entry live: %v", live)
		got, _ := get(t, s, key)
		require.Equal(t, "w-round-2", got)
		require.Equal(t, live, inQueue(t, s, key, "cw.1"), "queued while its entry is live (entry live: %v)", live)
		q := pttl(t, s, wire.WaitersKey(key))
		require.NotEqual(t, time.Duration(-1), q, "the queue has no TTL (entry live: %v)", live)
		if live {
			require.Positive(t, q)
			require.LessOrEqual(t, pttl(t, s, wire.EntryKey(key, "cw.1")), 150*time.Millisecond, "kept for the slack")
		}
	}
}

// The scripts, on one real node: a waiter is queued at the priority its
// Client sent, unless its Client's clock is more than a second off the
// node's; then the node's clock less the time waited places it.
func TestScripts_aClientClockASecondOffIsNotTrustedForTheQueuesOrder(t *testing.T) {
	e := newEnv(t, 1)
	s := e.nodes[0]
	acquire := script(wire.Acquire, -1)
	conn := dialNode(t, s)
	key := newKey(t)
	_, err := conn.Do("SET", key, foreignToken, "PX", 60_000)
	require.NoError(t, err)
	queue := func(id string, since time.Time, waited time.Duration) float64 {
		t.Helper()
		w := wire.Waiter{ID: id, Since: since.UnixMicro(), Waited: waited.Microseconds(), Round: 1, Handoff: id + "/h"}
		v, err := acquire.Do(conn, testQueue.AcquireArgs(key, id+"/h/1", 10_000, w, "")...)
		require.NoError(t, err)
		require.Equal(t, int64(0), v.([]any)[0], "refused and queued")
		score, err := redis.Float64(conn.Do("ZSCORE", wire.WaitersKey(key), id))
		require.NoError(t, err)
		return score
	}
	// An honest clock: its wait began 300ms ago, and it says so.
	since := time.Now().Add(-300 * time.Millisecond)
	honest := queue("c1.1", since, 300*time.Millisecond)
	require.Equal(t, float64(since.UnixMicro()), honest, "the priority sent")

	// A clock 10s behind, with a wait of 20ms: placed 20ms before now on
	// the node's clock, not 10s before everyone else.
	now := float64(time.Now().UnixMicro())
	behind := queue("c2.1", time.Now().Add(-10*time.Second), 20*time.Millisecond)
	require.InDelta(t, now-20_000, behind, 500_000, "placed by the node's clock")
	require.Greater(t, behind, honest, "behind the waiter that began first")
}

// A lock won by a round of a waiting call: Extend counts the nodes that
// hold its token, or a hand-off that followed that same round (which no
// late round of the call can replace). It does not count a hand-off after
// an earlier round, which a late round of the call may still replace and
// the release that round owes then give away, nor a token of another of
// the call's rounds (that round failed, and its release may land after
// the extension), nor another call's token. Unlock gives up every value
// of the call's.
func TestLock_aLockThatWaitedExtendsOnlyWhatStaysAndReleasesEverythingOfItsCall(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	call := "c0ffee.1q2w3e/0f8fad5b-d9cb-469f-a165-70867728950e" // a waiting call's hand-off token
	token := call + "/3"                                         // its lock, won by round 3
	set := func(i int, v string) {
		_, err := e.nodes[i].Do("SET", key, v, "PX", 60_000)
		require.NoError(t, err, "node %d", i)
	}
	// Nodes 0-2 handed the key over after round 3; 3 and 4 granted it.
	for i := range e.nodes {
		set(i, token)
		if i < 3 {
			set(i, call+"/h3")
		}
	}
	require.NoError(t, c.Restore(key, token).Extend(ctxT(t, quickly), longTTL), "every node holds the lock")
	for i := range 3 {
		// Extend returned on a quorum's replies; the others follow.
		require.Eventually(t, func() bool { return pttl(t, e.nodes[i], key) <= longTTL }, quickly, time.Millisecond,
			"node %d was extended: its 60s became the new TTL", i)
	}

	for _, tc := range []struct {
		name   string
		values [3]string
	}{
		{"hand-offs after an earlier round", [3]string{call + "/h2", call + "/h2", call + "/h1"}},
		{"the tokens of other rounds", [3]string{call + "/2", call + "/2", call + "/h2"}},
		{"other calls' values", [3]string{"c0ffee.1q2w3e/00000000-0000-0000-0000-000000000000/h3", call + "x/h3", foreignToken}},
	} {
		for i, v := range tc.values {
			set(i, v)
		}
		err := c.Restore(key, token).Extend(ctxT(t, quickly), longTTL) // a handle that has not seen the lock lost
		require.ErrorIs(t, err, redlock.ErrLockLost, "%s: 2 of 5", tc.name)
		for i := range 3 {
			require.InDelta(t, 60*time.Second, pttl(t, e.nodes[i], key), float64(quickly), "%s: node %d is not extended", tc.name, i)
		}
	}

	set(0, call+"/h1")
	set(1, call+"/2")
	set(2, foreignToken)
	require.NoError(t, c.Restore(key, token).Unlock(ctxT(t, quickly)))
	for _, i := range []int{0, 1, 3, 4} {
		// Unlock returned on a quorum's replies; the others follow.
		require.Eventually(t, func() bool { _, ok := get(t, e.nodes[i], key); return !ok }, quickly, time.Millisecond,
			"node %d: released", i)
	}
	requireForeignIntact(t, e.nodes, 2, key)
}
