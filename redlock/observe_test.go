package redlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
)

// recorder is an Observer that keeps copies of what it is told.
type recorder struct {
	mu     sync.Mutex
	rounds []RoundInfo
	events []Event
}

func (r *recorder) Round(info *RoundInfo) {
	cp := *info
	cp.Nodes = append([]NodeResult(nil), info.Nodes...)
	r.mu.Lock()
	r.rounds = append(r.rounds, cp)
	r.mu.Unlock()
}

func (r *recorder) Event(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []EventKind
	for _, e := range r.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func (r *recorder) ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ops []Op
	for _, info := range r.rounds {
		ops = append(ops, info.Op)
	}
	return ops
}

func TestObserver_seesAnAcquisitionItsExtensionAndItsRelease(t *testing.T) {
	rec := &recorder{}
	c, _, clk := newFakeClient(t, 3, WithObserver(rec))
	ctx := context.Background()
	const ttl = 10 * time.Second

	l, err := c.TryLock(ctx, "k", ttl)
	require.NoError(t, err)
	clk.Advance(time.Second)
	require.NoError(t, l.Extend(ctx, ttl))
	clk.Advance(2 * time.Second)
	require.NoError(t, l.Unlock(ctx))

	require.Equal(t, []Op{OpAcquire, OpExtend, OpUnlock}, rec.ops())
	acq := rec.rounds[0]
	require.Equal(t, "k", acq.Key)
	require.True(t, acq.Won)
	require.Equal(t, c.drift(ttl), acq.Drift)
	require.Equal(t, ttl-c.drift(ttl), acq.Validity, "the fake clock stands still during the round")
	require.Len(t, acq.Nodes, 3)
	ok := 0
	for _, n := range acq.Nodes {
		require.Contains(t, []NodeStatus{NodeOK, NodePending}, n.Status, "decided at the quorum")
		if n.Status == NodeOK {
			ok++
		}
	}
	require.GreaterOrEqual(t, ok, 2)
	require.True(t, rec.rounds[1].Won)
	require.Zero(t, rec.rounds[2].Drift, "a release subtracts no drift")

	require.Equal(t, []EventKind{EventAcquired, EventReleased}, rec.kinds())
	require.Zero(t, rec.events[0].Wait, "TryLock does not wait")
	require.Equal(t, 3*time.Second, rec.events[1].Duration, "held from the acquisition round's start")
}

func TestObserver_seesABusyKeyAsNotAcquired(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newFakeClient(t, 3, WithObserver(rec))
	ctx := context.Background()
	_, err := c.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "k", time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)

	require.Equal(t, []EventKind{EventAcquired, EventNotAcquired}, rec.kinds())
	var qe *QuorumError
	require.ErrorAs(t, rec.events[1].Err, &qe)
	require.True(t, qe.Busy())
	require.False(t, rec.rounds[1].Won)
	require.Zero(t, rec.rounds[1].Validity)
}

// A lock whose key is gone is reported lost once: by the extension that
// finds out, not again by the Unlock that follows.
func TestObserver_seesALockLostOnceWhenAnExtensionFindsTheKeyGone(t *testing.T) {
	rec := &recorder{}
	var logs syncBuffer
	c, nodes, _ := newFakeClient(t, 3, WithObserver(rec), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	for _, n := range nodes {
		n.del("k")
	}
	require.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockLost)
	require.Error(t, l.Unlock(ctx))

	require.Equal(t, []EventKind{EventAcquired, EventLost, EventExtendFailed}, rec.kinds())
	require.ErrorIs(t, rec.events[1].Err, ErrLockLost)
	require.ErrorIs(t, rec.events[2].Err, ErrLockLost)
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, `msg="redlock: lock lost"`), out)
	require.Contains(t, out, "key=k")
	require.NotContains(t, out, l.Token(), "the token is never logged")
}

func TestObserver_seesALockWhoseValidityRanOutAsLost(t *testing.T) {
	rec := &recorder{}
	c, _, clk := newFakeClient(t, 3, WithObserver(rec))
	l, err := c.TryLock(context.Background(), "k", 10*time.Second)
	require.NoError(t, err)
	lctx := l.Context()
	clk.Advance(10 * time.Second)
	<-lctx.Done()
	require.Eventually(t, func() bool { return len(rec.kinds()) == 2 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []EventKind{EventAcquired, EventLost}, rec.kinds())
	require.ErrorIs(t, rec.events[1].Err, ErrExpired)
	require.Equal(t, 10*time.Second, rec.events[1].Duration)
}

// A context made after the validity ran out is born ended: that too is a
// loss, reported once.
func TestObserver_seesAContextBornExpiredAsALoss(t *testing.T) {
	rec := &recorder{}
	c, _, clk := newFakeClient(t, 3, WithObserver(rec))
	l, err := c.TryLock(context.Background(), "k", 10*time.Second)
	require.NoError(t, err)
	clk.Advance(time.Minute)
	require.ErrorIs(t, context.Cause(l.Context()), ErrExpired)
	_ = l.Context()
	require.Equal(t, []EventKind{EventAcquired, EventLost}, rec.kinds())
}

func TestObserver_observersAreCalledInOrderAndNilIsIgnored(t *testing.T) {
	var order []string
	var mu sync.Mutex
	named := func(name string) Observer {
		return funcObserver(func(Event) { mu.Lock(); order = append(order, name); mu.Unlock() })
	}
	c, _, _ := newFakeClient(t, 3, WithObserver(named("a")), WithObserver(nil), WithObserver(named("b")))
	_, err := c.TryLock(context.Background(), "k", time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, order)
}

type funcObserver func(Event)

func (funcObserver) Round(*RoundInfo) {}
func (f funcObserver) Event(e Event)  { f(e) }

// Without an Observer the rounds measure nothing: no clock is read for
// them.
func TestObserver_noneMeansNoLatencies(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	_, err := c.TryLock(context.Background(), "k", time.Minute)
	require.NoError(t, err)
	_, err = c.TryLock(context.Background(), "k", time.Minute)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	for _, n := range qe.Nodes {
		require.Zero(t, n.Latency)
	}
}

func TestWithLogger_warnsOfAFailedNodeWithoutItsToken(t *testing.T) {
	var logs syncBuffer
	c, nodes, _ := newFakeClient(t, 3, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	nodes[1].failWith(errors.New("read tcp 127.0.0.1:40000->a:2: connection reset by peer"))
	// Node 2 answers after node 1 failed, so that the round is decided
	// with the failure read (a failure read after the decision is not
	// logged).
	open := nodes[2].hold()
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.TryLock(context.Background(), "k", time.Minute)
		assert.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool { return nodes[1].count(callSet) == 1 && nodes[2].parkedCount() == 1 },
		5*time.Second, time.Millisecond)
	open()
	l := <-got
	require.NotNil(t, l)
	out := logs.String()
	require.Contains(t, out, "node failed")
	require.Contains(t, out, "connection reset by peer")
	require.NotContains(t, out, l.Token())
}

// eventNames are the EventKinds' names in these tests.
var eventNames = map[EventKind]string{EventAcquired: "acquired", EventNotAcquired: "not acquired",
	EventReleased: "released", EventLost: "lost", EventExtendFailed: "extend failed"}

// lockKinds returns the (event, lock kind) pairs the recorder was told
// since the last call, in order.
func (r *recorder) lockKinds() [][2]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks [][2]string
	for _, e := range r.events {
		ks = append(ks, [2]string{eventNames[e.Kind], e.Lock.String()})
	}
	r.events = nil
	return ks
}

// Every event of a lock names the kind of lock: the acquisition (taken
// or not), the release, the failed extension and the loss, for each
// kind.
func TestObserver_eventsNameTheKindOfLock(t *testing.T) {
	rec := &recorder{}
	c, nodes, _ := newFakeClient(t, 3, WithObserver(rec))
	ctx := context.Background()
	takeTwice := func(kind LockKind, take func() (*Lock, error)) {
		t.Helper()
		l, err := take()
		require.NoError(t, err, kind)
		_, err = take()
		require.ErrorIs(t, err, ErrNotAcquired, kind)
		require.NoError(t, l.Unlock(ctx), kind)
		k := kind.String()
		require.Equal(t, [][2]string{{"acquired", k}, {"not acquired", k}, {"released", k}}, rec.lockKinds())
	}
	takeTwice(KindMutex, func() (*Lock, error) { return c.TryLock(ctx, "m", ttl) })
	takeTwice(KindMulti, func() (*Lock, error) { return c.TryLockMulti(ctx, []string{"a", "b"}, ttl) })
	takeTwice(KindSemaphore, func() (*Lock, error) { return c.Semaphore("s", 1).TryAcquire(ctx, ttl) })
	takeTwice(KindRWWrite, func() (*Lock, error) { return c.RWLock("rw").TryLock(ctx, ttl) })
	rw := c.RWLock("rw")
	w, err := rw.TryLock(ctx, ttl)
	require.NoError(t, err)
	_, err = rw.TryRLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "a writer holds it")
	require.NoError(t, w.Unlock(ctx))
	r, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err)
	for _, n := range nodes {
		n.del(wire.RWKeys("rw")[1])
	}
	require.ErrorIs(t, r.Extend(ctx, ttl), ErrLockLost)
	want := [][2]string{{"acquired", "rwlock_write"}, {"not acquired", "rwlock_read"}, {"released", "rwlock_write"},
		{"acquired", "rwlock_read"}, {"lost", "rwlock_read"}, {"extend failed", "rwlock_read"}}
	require.Equal(t, want, rec.lockKinds(), "a reader's failed extension and its loss")
}

// A campaign's events name the election: its lock once it leads, a
// campaign that gives up, and the resignation.
func TestObserver_campaignEventsNameTheElection(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newFakeClient(t, 3, WithObserver(rec))
	ctx := context.Background()
	e := c.Election("e")
	l, err := e.Campaign(ctx, "me", ttl)
	require.NoError(t, err)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.Campaign(gone, "you", ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, l.Unlock(ctx))
	require.Equal(t, "e", rec.events[0].Key, "the name the caller gave")
	want := [][2]string{{"acquired", "election"}, {"not acquired", "election"}, {"released", "election"}}
	require.Equal(t, want, rec.lockKinds())

	_, err = c.TryLock(ctx, "e:election", ttl)
	require.NoError(t, err)
	require.Equal(t, [][2]string{{"acquired", "mutex"}}, rec.lockKinds(), "a key like an election's is a mutex")
}

// Every event and round of a lock names it as its caller did, from its
// acquisition to its release, whatever keys it takes on the nodes; and
// the kind comes from the call, never from the key's text.
func TestObserver_oneKeyPerLockFromAcquisitionToRelease(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newFakeClient(t, 3, WithObserver(rec))
	ctx := context.Background()
	for name, take := range map[string]func() (*Lock, error){
		"sem":                 func() (*Lock, error) { return c.Semaphore("sem", 2).TryAcquire(ctx, ttl) },
		"rw":                  func() (*Lock, error) { return c.RWLock("rw").TryRLock(ctx, ttl) },
		"a,b":                 func() (*Lock, error) { return c.TryLockMulti(ctx, []string{"b", "a"}, ttl) },
		wire.ElectionKey("x"): func() (*Lock, error) { return c.Lock(ctx, wire.ElectionKey("x"), ttl) },
	} {
		rec.mu.Lock()
		rec.events, rec.rounds = nil, nil
		rec.mu.Unlock()
		l, err := take()
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, ttl))
		require.NoError(t, l.Unlock(ctx))
		rec.mu.Lock()
		require.Len(t, rec.events, 2, name)
		for _, e := range rec.events {
			require.Equal(t, name, e.Key, "%v", e.Kind)
		}
		require.Len(t, rec.rounds, 3, name)
		for _, r := range rec.rounds {
			require.Equal(t, name, r.Key, "%v", r.Op)
		}
		if name == wire.ElectionKey("x") {
			require.Equal(t, KindMutex, rec.events[0].Lock, "a plain Lock on a key like an election's is a mutex")
		}
		rec.mu.Unlock()
	}
}
