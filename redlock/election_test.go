package redlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// Every bad argument fails before any node is asked.
func TestElection_badInputAsksNoNode(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	e := c.Election("e")
	var nilCtx context.Context // staticcheck: a nil context on purpose
	fn := func(context.Context, uint64) error { return nil }
	for name, call := range map[string]func() error{
		"empty name":      func() error { _, err := c.Election("").Campaign(ctx, "v", ttl); return err },
		"empty value":     func() error { _, err := e.Campaign(ctx, "", ttl); return err },
		"oversized value": func() error { _, err := e.Campaign(ctx, strings.Repeat("v", MaxLeaderValue+1), ttl); return err },
		"nil ctx":         func() error { _, err := e.Campaign(nilCtx, "v", ttl); return err },
		"bad ttl":         func() error { _, err := e.Campaign(ctx, "v", time.Microsecond); return err },
		"bad option":      func() error { _, err := e.Campaign(ctx, "v", ttl, WithMinValidity(2*ttl)); return err },
		"leader, no name": func() error { _, err := c.Election("").Leader(ctx); return err },
		"leader, nil ctx": func() error { _, err := e.Leader(nilCtx); return err },
		"run, nil fn":     func() error { return e.Run(ctx, "v", ttl, nil) },
		"run, no value":   func() error { return e.Run(ctx, "", ttl, fn) },
	} {
		require.Error(t, call(), name)
	}
	_, open := <-c.Election("").Observe(ctx)
	require.False(t, open, "an empty name's observer is closed at once")
	_, open = <-e.Observe(nilCtx)
	require.False(t, open, "a nil context's observer is closed at once")
	for _, n := range nodes {
		require.Empty(t, n.callLog(), "%s was asked", n.addr)
	}
}

// A campaign that wins leads with a fenced lock; the record names it on
// every node, and Leader names it. After the resignation no one leads,
// and the next leader's term is greater.
func TestElection_campaignWritesTheRecordAndLeaderNamesIt(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx := context.Background()
	e := c.Election("e")
	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "no one campaigned")

	l, err := e.Campaign(ctx, "me", ttl)
	require.NoError(t, err)
	require.Equal(t, wire.ElectionKey("e"), l.Key())
	require.Positive(t, l.Fence(), "the term is the lock's fence")
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{Value: "me", Term: l.Fence(), ClientID: c.ID()}, got)
	for _, n := range nodes {
		require.Eventually(t, func() bool { return recordOf(n, "e")["token"] == l.Token() },
			5*time.Second, time.Millisecond, "the record on %s", n.addr)
	}

	require.NoError(t, l.Unlock(ctx))
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "the leader resigned")
	l2, err := e.Campaign(ctx, "me again", ttl)
	require.NoError(t, err)
	require.Greater(t, l2.Fence(), l.Fence())
	require.NoError(t, l2.Unlock(ctx))
}

// lockedOn reports whether n holds a token in the election key of name.
// A reservation is no lock: a release that reached n after a later
// round queued there keeps the key for that round's waiter, and the
// test nodes' clock stands still, so it stays.
func lockedOn(n *testNode, name string) bool {
	v, held := n.get(wire.ElectionKey(name))
	return held && !strings.HasPrefix(v, wire.ReservedPrefix)
}

// recordOf reads the leader record of the election name on n.
func recordOf(n *testNode, name string) map[string]string {
	m, _ := redis.StringMap(n.server("HGETALL", wire.LeaderKey(name)), nil)
	return m
}

// Leader returns what a quorum agrees on: the same holder with its own
// record. A record on fewer nodes, or a record of an earlier holder, is
// no leader.
func TestElection_leaderNeedsAQuorumOfCurrentRecords(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx := context.Background()
	e := c.Election("e")
	key, rec := wire.ElectionKey("e"), wire.LeaderKey("e")
	plant := func(n *testNode, holder, recordToken string) {
		n.set(key, holder)
		n.server("HSET", rec, "token", recordToken, "value", "v", "term", "9", "client", "c")
	}
	for _, n := range nodes[:2] {
		plant(n, "t1", "t1")
	}
	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "two of five")

	plant(nodes[2], "t2", "t1") // holds another token than its record names
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "a stale record does not count")

	plant(nodes[3], "t1", "t1")
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{Value: "v", Term: 9, ClientID: "c"}, got)

	nodes[0].failWith(errors.New("down"))
	nodes[1].failWith(errors.New("down"))
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "two of the three agreeing nodes do not answer")
	require.ErrorContains(t, err, "down", "the nodes' errors are named")
}

// Leader writes a holder's record back where the key holds its token and
// the record is missing or another's, once a quorum holds the key for it
// and one of them has the record; never on a node whose key holds
// another token, and never for a holder of fewer than a quorum.
func TestElection_leaderRepairsTheRecordOfAQuorumsHolder(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx := context.Background()
	e := c.Election("e")
	key, rec := wire.ElectionKey("e"), wire.LeaderKey("e")
	nodes[0].set(key, "t1")
	nodes[0].server("HSET", rec, "token", "t1", "value", "v", "term", "9", "client", "c")
	nodes[1].set(key, "t1")
	nodes[4].set(key, "t2")
	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "the key on two of five")
	require.Empty(t, recordOf(nodes[1], "e"), "no record for a holder of fewer than a quorum")

	nodes[2].set(key, "t1")
	nodes[2].server("HSET", rec, "token", "t0", "value", "old", "term", "8", "client", "c0")
	nodes[3].set(key, "t1")
	nodes[3].failWith(errors.New("down"))
	got, err := e.Leader(ctx)
	require.NoError(t, err, "the key on three answering nodes, the record on one")
	want := Leader{Value: "v", Term: 9, ClientID: "c"}
	require.Equal(t, want, got)
	wantRec := map[string]string{"token": "t1", "value": "v", "term": "9", "client": "c"}
	require.Equal(t, wantRec, recordOf(nodes[1], "e"), "a missing record is written back")
	require.Equal(t, wantRec, recordOf(nodes[2], "e"), "another holder's record is replaced")
	require.Empty(t, recordOf(nodes[3], "e"), "a node that did not answer is not written")
	require.Empty(t, recordOf(nodes[4], "e"), "a node whose key holds another token is not written")
}

// A won lock whose record cannot reach a quorum is released, and the
// campaign goes on until its context ends: here during its second
// record, which nodes 1 to 3 refuse as they did the first.
func TestElection_campaignReleasesALockWhoseRecordFailed(t *testing.T) {
	nodes := newTestNodes(t, 5)
	for _, n := range nodes[:3] {
		n.failWith(errors.New("record refused"), callLeaderPut)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pools := poolsOf(nodes)
	pools[0] = &onRecord{testNode: nodes[0], nth: 2, do: cancel}
	c, clk := newClientWith(t, pools, nodes, WithRetry(time.Millisecond, time.Millisecond))
	go func() { // the pause between campaigns passes
		for i := 0; i < 10000 && ctx.Err() == nil; i++ {
			clk.Advance(time.Millisecond)
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := c.Election("e").Campaign(ctx, "v", ttl)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorContains(t, err, "the leader record was not written on a quorum")
	require.Equal(t, 2, nodes[0].count(callLeaderPut), "it campaigned again after the first")
	for _, n := range nodes {
		require.Eventually(t, func() bool { return !lockedOn(n, "e") },
			5*time.Second, time.Millisecond, "the lock is released on %s", n.addr)
	}
}

// onRecord is a node that calls do when the nth leader record reaches
// it, before the node answers.
type onRecord struct {
	*testNode
	nth  int
	seen atomic.Int32
	do   func()
}

func (n *onRecord) Eval(ctx context.Context, script *pool.Script, keysAndArgs ...any) (any, error) {
	if script == wire.LeaderWrite && int(n.seen.Add(1)) == n.nth {
		n.do()
	}
	return n.testNode.Eval(ctx, script, keysAndArgs...)
}

// etcd's trap: a campaign whose lock ran out while its record was being
// written does not return as the leader; it campaigns again, and leads
// with a new term.
func TestElection_campaignDoesNotLeadOnALockThatRanOut(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	opens := make([]func(), len(nodes))
	for i, n := range nodes {
		opens[i] = n.hold(callLeaderPut)
	}
	type result struct {
		l   *Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Election("e").Campaign(context.Background(), "v", ttl)
		done <- result{l, err}
	}()
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.parkedCount() > 0 }, 5*time.Second, time.Millisecond)
	}
	first := nodes[0].tokenLog()
	clk.Advance(ttl) // the lock's validity is over
	for _, open := range opens {
		open()
	}
	var r result
	for i := 0; ; i++ {
		require.Less(t, i, 10000, "the campaign did not end")
		select {
		case r = <-done:
		case <-time.After(time.Millisecond):
			clk.Advance(time.Millisecond) // the pause between campaigns
			continue
		}
		break
	}
	require.NoError(t, r.err)
	// The second acquisition went to every node; the campaign returned on
	// a quorum's grants, which need not include node 0's yet.
	require.Eventually(t, func() bool { return len(nodes[0].tokenLog()) > len(first) }, 5*time.Second, time.Millisecond,
		"a second acquisition")
	require.True(t, r.l.live(), "the lock returned is live")
	require.Greater(t, r.l.Fence(), uint64(1), "a new term")
	require.NoError(t, r.l.Unlock(context.Background()))
}

// Run calls fn once per won term, with that term, resigns when fn
// returns, campaigns again, and returns ctx's error at the end; fn's own
// failure while it leads ends Run with that failure.
func TestElection_runLeadsTermAfterTermUntilItsContextEnds(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	e := c.Election("e")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var terms []uint64
	err := e.Run(ctx, "v", ttl, func(fctx context.Context, term uint64) error {
		terms = append(terms, term)
		got, err := e.Leader(fctx)
		require.NoError(t, err)
		require.Equal(t, term, got.Term)
		if len(terms) == 3 {
			cancel()
			<-fctx.Done() // the leadership's context ends with ctx
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, terms, 3)
	require.Less(t, terms[0], terms[1])
	require.Less(t, terms[1], terms[2])
	for _, n := range nodes {
		require.Eventually(t, func() bool { return !lockedOn(n, "e") },
			5*time.Second, time.Millisecond, "resigned on %s", n.addr)
	}

	boom := errors.New("boom")
	var calls atomic.Int32
	err = e.Run(context.Background(), "v", ttl, func(context.Context, uint64) error {
		calls.Add(1)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, int32(1), calls.Load())
	_, err = e.Leader(context.Background())
	require.ErrorIs(t, err, ErrNoLeader, "resigned after the failure")
}

// Observe hears new leaders by their announcements: the Client's clock
// stands still, so its periodic ask never comes, and every leader after
// the first ask is delivered because a node announced its record.
func TestElection_observeDeliversEachNewLeaderOnItsAnnouncement(t *testing.T) {
	c, nodes, _ := newPubSubClient(t, 3)
	e := c.Election("e")
	ctx, cancel := context.WithCancel(context.Background())
	ch := e.Observe(ctx)
	for _, n := range nodes {
		n.waitAcked(t, c.ID(), wire.LeaderKey("e"))
	}
	for range 3 {
		l, err := e.Campaign(ctx, "v", ttl)
		require.NoError(t, err)
		select {
		case got := <-ch:
			require.Equal(t, Leader{Value: "v", Term: l.Fence(), ClientID: c.ID()}, got)
		case <-time.After(5 * time.Second):
			t.Fatalf("term %d was not delivered", l.Fence())
		}
		require.NoError(t, l.Unlock(ctx))
	}
	cancel()
	select {
	case _, open := <-ch:
		require.False(t, open, "nothing after the last leader; closed once ctx ended")
	case <-time.After(5 * time.Second):
		t.Fatal("the channel is still open after ctx ended")
	}
}

// WithMinValidity holds for the leadership Campaign returns: a campaign
// whose lock is down to the minimum once its record is written (still
// live) resigns and campaigns again, and the lock it returns has more
// than the minimum left. The automatic extension is set to run late, so
// that it does not renew the first lock meanwhile.
func TestElection_campaignKeepsItsMinimumValidityAfterTheRecord(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	opens := make([]func(), len(nodes))
	for i, n := range nodes {
		opens[i] = n.hold(callLeaderPut)
	}
	type result struct {
		l   *Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Election("e").Campaign(context.Background(), "v", ttl,
			WithMinValidity(ttl/2), WithAutoExtend(ttl*9/10))
		done <- result{l, err}
	}()
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.parkedCount() > 0 }, 5*time.Second, time.Millisecond)
	}
	first := nodes[0].tokenLog()
	clk.Advance(ttl * 6 / 10) // live, with less than ttl/2 left
	for _, open := range opens {
		open()
	}
	var r result
	for i := 0; ; i++ {
		require.Less(t, i, 10000, "the campaign did not end")
		select {
		case r = <-done:
		case <-time.After(time.Millisecond):
			clk.Advance(time.Millisecond) // the pause between campaigns
			continue
		}
		break
	}
	require.NoError(t, r.err)
	require.Greater(t, r.l.Validity(), ttl/2, "the leadership returned has more than the minimum left")
	require.Greater(t, r.l.Fence(), uint64(1), "a new term")
	require.Eventually(t, func() bool { return len(nodes[0].tokenLog()) > len(first) }, 5*time.Second, time.Millisecond,
		"a second acquisition")
	require.NoError(t, r.l.Unlock(context.Background()))
}

// plantLeader makes every node hold the election key of name for token,
// with its record: a leader of that term, as a quorum would name it.
func plantLeader(nodes []*testNode, name, token string, term uint64, cid string) {
	for _, n := range nodes {
		n.set(wire.ElectionKey(name), token)
		n.server("HSET", wire.LeaderKey(name), "token", token, "value", "v-"+token, "term", term, "client", cid)
	}
}

// askedFor advances the fake clock by the observer's period until node n
// has been asked for the leader more than times times: the observer's
// goroutine began that many asks, so it is done with the ones before.
func askedFor(t *testing.T, clk interface{ Advance(time.Duration) }, n *testNode, times int) {
	t.Helper()
	for i := 0; n.count(callLeaderGet) <= times; i++ {
		require.Less(t, i, 10000, "the observer did not ask the nodes %d times", times+1)
		clk.Advance(observeEvery)
		time.Sleep(time.Millisecond)
	}
}

// nextLeader reads the next leader from ch, advancing the fake clock by
// the observer's period while none comes.
func nextLeader(t *testing.T, clk interface{ Advance(time.Duration) }, ch <-chan Leader) Leader {
	t.Helper()
	for i := 0; i < 10000; i++ {
		select {
		case l, open := <-ch:
			require.True(t, open, "the observer ended")
			return l
		case <-time.After(time.Millisecond):
			clk.Advance(observeEvery)
		}
	}
	t.Fatal("no leader was delivered")
	return Leader{}
}

// A reader that comes back late reads the newest leader the observer
// saw, not the one it saw first: the unread leader is replaced.
func TestElection_observeGivesALateReaderTheNewestLeader(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	e := c.Election("e")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plantLeader(nodes, "e", "t1", 9, "c1")
	ch := e.Observe(ctx)
	askedFor(t, clk, nodes[0], 1) // the first ask found term 9, unread
	plantLeader(nodes, "e", "t2", 10, "c2")
	// And whole asks since found term 10. A node's count says when a call
	// reached it, not which ask made it: a call of an ask that had its
	// quorum before the plant can reach a node after it (a busy machine
	// runs that goroutine late), so every node is asked three more times.
	for _, n := range nodes {
		askedFor(t, clk, n, n.count(callLeaderGet)+2)
	}
	select {
	case got := <-ch:
		require.Equal(t, Leader{Value: "v-t2", Term: 10, ClientID: "c2"}, got, "the newest leader")
	default:
		t.Fatal("no leader waits on the channel")
	}
	select {
	case got := <-ch:
		t.Fatalf("%+v was delivered after a newer leader", got)
	default:
	}
	cancel()
	_, open := <-ch
	require.False(t, open)
}

// When the terms go back (a quorum of nodes lost the election key's
// fence counter), Observe goes on delivering the leaders with the terms
// the nodes give, and reports each regression once: an
// EventTermRegressed and a Warn record.
func TestElection_observeDeliversALeaderWhoseTermWentBackAndSaysSo(t *testing.T) {
	rec := &recorder{}
	var logs syncBuffer
	c, nodes, clk := newFakeClient(t, 5, WithObserver(rec), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	e := c.Election("e")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plantLeader(nodes, "e", "t1", 9, "c1")
	ch := e.Observe(ctx)
	require.Equal(t, Leader{Value: "v-t1", Term: 9, ClientID: "c1"}, nextLeader(t, clk, ch))
	require.Empty(t, rec.kinds())

	plantLeader(nodes, "e", "t2", 3, "c2") // the counters were lost
	require.Equal(t, Leader{Value: "v-t2", Term: 3, ClientID: "c2"}, nextLeader(t, clk, ch))
	asked := nodes[0].count(callLeaderGet)
	askedFor(t, clk, nodes[0], asked+2) // the same leader, asked for again
	require.Equal(t, []EventKind{EventTermRegressed}, rec.kinds(), "reported once")
	rec.mu.Lock()
	ev := rec.events[0]
	rec.mu.Unlock()
	require.Equal(t, KindElection, ev.Lock)
	require.Equal(t, "e", ev.Key, "the election's name")
	require.ErrorContains(t, ev.Err, "term went back from 9 to 3")
	require.Equal(t, 1, strings.Count(logs.String(), "election term went back"), logs.String())
	require.Contains(t, logs.String(), "level=WARN")

	plantLeader(nodes, "e", "t3", 4, "c3") // on from there, as usual
	require.Equal(t, Leader{Value: "v-t3", Term: 4, ClientID: "c3"}, nextLeader(t, clk, ch))
	require.Len(t, rec.kinds(), 1, "a higher term is no regression")

	plantLeader(nodes, "e", "t4", 4, "c4") // the same term, another leader
	require.Equal(t, Leader{Value: "v-t4", Term: 4, ClientID: "c4"}, nextLeader(t, clk, ch))
	require.Equal(t, []EventKind{EventTermRegressed, EventTermRegressed}, rec.kinds())
	require.Equal(t, 2, strings.Count(logs.String(), "election term went back"))
}
