package tests

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// term is one leader's time in office, as the leader saw it: from
// Campaign's return to the end of its validity or its resignation,
// whichever came first.
type term struct {
	term       uint64
	client     string
	start, end time.Time
}

// terms collects the terms of every leader of an election.
type terms struct {
	mu  sync.Mutex
	all []term
}

func (ts *terms) add(t term) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.all = append(ts.all, t)
}

// requireOneAtATime checks that no two terms overlap and that each term
// is greater than the one before it, in the order they began.
func (ts *terms) requireOneAtATime(t *testing.T) []term {
	t.Helper()
	ts.mu.Lock()
	all := slices.Clone(ts.all)
	ts.mu.Unlock()
	slices.SortFunc(all, func(a, b term) int { return a.start.Compare(b.start) })
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1], all[i]
		require.True(t, cur.start.After(prev.end), "term %d (client %s) began %v before term %d (client %s) ended",
			cur.term, cur.client, prev.end.Sub(cur.start), prev.term, prev.client)
		require.Greater(t, cur.term, prev.term, "terms in the order they began")
	}
	return all
}

// lead is a Run function: it notes its term from now until it has held
// for hold or its context ends, whichever is first, and writes its term
// to store (a refusal is counted in stale, not failed: a leader that
// stalled past its validity is refused, as it must be).
func lead(ts *terms, client string, store *fencedStore, hold func() time.Duration, stale *atomic.Int64) func(context.Context, uint64) error {
	return func(ctx context.Context, tm uint64) error {
		start := time.Now()
		if errors.Is(store.write(tm, client), errStale) {
			stale.Add(1)
		}
		t := time.NewTimer(hold())
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		end := time.Now()
		if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
			end = dl // the validity ran out before it noticed
		}
		ts.add(term{term: tm, client: client, start: start, end: end})
		return nil
	}
}

// seeded returns a random source and logs its seed.
func seeded(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// runElection has clients run the election name until ctx ends, each
// leader holding for a random time, and returns when all have stopped.
func runElection(t *testing.T, ctx context.Context, clients []*redlock.Client, name string, ttl time.Duration, ts *terms, store *fencedStore) int64 {
	var stale atomic.Int64
	rng := seeded(t)
	var rmu sync.Mutex
	hold := func() time.Duration {
		rmu.Lock()
		defer rmu.Unlock()
		return time.Duration(10+rng.IntN(60)) * time.Millisecond
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Election(name).Run(ctx, "value of "+c.ID(), ttl, lead(ts, c.ID(), store, hold, &stale))
			if !errors.Is(err, ctx.Err()) || ctx.Err() == nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	wg.Wait()
	return stale.Load()
}

// observer collects what an Observe call delivers.
type observer struct {
	mu   sync.Mutex
	got  []redlock.Leader
	done chan struct{} // closed with the channel
}

// observe collects what e's observer delivers until ctx ends.
func observe(ctx context.Context, e *redlock.Election) *observer {
	o := &observer{done: make(chan struct{})}
	ch := e.Observe(ctx)
	go func() {
		defer close(o.done)
		for l := range ch {
			o.mu.Lock()
			o.got = append(o.got, l)
			o.mu.Unlock()
		}
	}()
	return o
}

// seen returns what was delivered so far.
func (o *observer) seen() []redlock.Leader {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// all waits until the channel is closed and returns all it delivered.
func (o *observer) all(t *testing.T) []redlock.Leader {
	t.Helper()
	select {
	case <-o.done:
	case <-time.After(quickly):
		t.Fatal("the observer's channel is still open after its context ended")
	}
	return o.seen()
}

// observing is ctx ended 300ms sooner. The observer stops before the
// campaigners do: a term it names was won while they ran on, so that its
// function ran (a campaign that wins as ctx ends returns no term).
func observing(ctx context.Context) context.Context {
	dl, _ := ctx.Deadline()
	octx, cancel := context.WithDeadline(ctx, dl.Add(-300*time.Millisecond))
	context.AfterFunc(ctx, cancel)
	return octx
}

// requireObservedReal checks that an observer delivered strictly
// increasing terms, each one a term some leader won, naming that leader.
func requireObservedReal(t *testing.T, seen []redlock.Leader, won []term) {
	t.Helper()
	require.NotEmpty(t, seen)
	byTerm := map[uint64]string{}
	for _, w := range won {
		byTerm[w.term] = w.client
	}
	for i, l := range seen {
		if i > 0 {
			require.Greater(t, l.Term, seen[i-1].Term, "delivered in term order")
		}
		client, ok := byTerm[l.Term]
		require.True(t, ok, "term %d was delivered but never won", l.Term)
		require.Equal(t, client, l.ClientID, "term %d", l.Term)
		require.Equal(t, "value of "+client, l.Value)
	}
}

// Several Clients run one election: one leader at a time, terms strictly
// increasing, and an observer follows them.
func TestElection_oneLeaderAtATimeAndTermsIncrease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	clients := fenceClients(e, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	observed := observe(observing(ctx), e.client().Election(name))
	var ts terms
	var store fencedStore
	stale := runElection(t, ctx, clients, name, time.Second, &ts, &store)
	won := ts.requireOneAtATime(t)
	t.Logf("%d terms, %d stale writes refused", len(won), stale)
	require.Greater(t, len(won), len(clients), "leadership went round")
	requireObservedReal(t, observed.all(t), won)
}

// The leader's process dies (its Client closes without resigning): a
// campaigner leads within the ttl and a second, with a greater term; the
// dead leader's late write is refused by the fenced store; Leader and
// Observe name the new leader.
func TestElection_failoverAfterTheLeaderDies(t *testing.T) {
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	const ttl = time.Second
	dead := newClient(t, newPools(t, e.addrs))
	old, err := dead.Election(name).Campaign(ctx, "dead", ttl)
	require.NoError(t, err)
	var store fencedStore
	require.NoError(t, store.write(old.Fence(), "dead"))

	watcher := e.client().Election(name)
	obsCtx, stopObs := context.WithCancel(ctx)
	observed := observe(obsCtx, watcher)

	type won struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	wins := make(chan won, 2)
	for _, c := range fenceClients(e, 2) {
		go func() {
			l, err := c.Election(name).Campaign(ctx, "value of "+c.ID(), ttl)
			wins <- won{l, err, time.Now()}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the campaigners wait
	killed := time.Now()
	require.NoError(t, dead.Close()) // no Unlock: the lock stops being extended
	w := <-wins
	require.NoError(t, w.err)
	took := w.at.Sub(killed)
	t.Logf("failover in %v", took)
	require.Less(t, took, ttl+time.Second, "failover within the ttl and a second")
	require.Greater(t, w.l.Fence(), old.Fence())

	require.NoError(t, store.write(w.l.Fence(), "new"))
	require.ErrorIs(t, store.write(old.Fence(), "dead, late"), errStale)
	require.Equal(t, "new", store.value)

	got, err := watcher.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, w.l.Fence(), got.Term)
	require.Eventually(t, func() bool { return w.l.Validity() > 0 }, quickly, time.Millisecond)
	require.Eventually(t, func() bool {
		seen := observed.seen()
		return len(seen) > 0 && seen[len(seen)-1] == got
	}, quickly, time.Millisecond, "the observer names the new leader")
	stopObs()
	seen := observed.all(t)
	require.Equal(t, got, seen[len(seen)-1], "nothing after the new leader")
	require.Equal(t, "dead", seen[0].Value, "the observer began with the old leader")
	require.NoError(t, w.l.Unlock(ctx))
	w2 := <-wins // the other campaigner leads next
	require.NoError(t, w2.err)
	require.Greater(t, w2.l.Fence(), w.l.Fence())
	require.NoError(t, w2.l.Unlock(ctx))
}

// Two of five nodes are killed while several Clients run the election:
// still one leader at a time, terms strictly increasing, and leadership
// still goes round on the three left.
func TestElection_oneLeaderAtATimeWhileTwoOfFiveNodesDie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	clients := fenceClients(e, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	observed := observe(observing(ctx), e.client().Election(name))
	killedAt := make(chan time.Time, 1)
	go func() {
		time.Sleep(time.Second)
		err := errors.Join(e.nodes[0].Kill(), e.nodes[3].Kill())
		if err != nil {
			t.Errorf("kill: %v", err)
		}
		killedAt <- time.Now()
	}()
	var ts terms
	var store fencedStore
	stale := runElection(t, ctx, clients, name, 600*time.Millisecond, &ts, &store)
	won := ts.requireOneAtATime(t)
	killed := <-killedAt
	after := 0
	for _, w := range won {
		if w.start.After(killed) {
			after++
		}
	}
	t.Logf("%d terms, %d after the kill, %d stale writes refused", len(won), after, stale)
	require.Greater(t, after, 1, "leadership goes round on three nodes")
	requireObservedReal(t, observed.all(t), won)
}

// An observer's channel closes when its Client closes, and Close waits
// for its goroutine.
func TestElection_observerEndsWithItsClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	c := newClient(t, newPools(t, e.addrs))
	name := newKey(t)
	o := observe(context.Background(), c.Election(name))
	require.Eventually(t, func() bool {
		v, err := redis.Values(e.nodes[0].Do("PUBSUB", "NUMSUB", wire.LeaderChannel(name)))
		return err == nil && len(v) == 2 && v[1] == int64(1)
	}, quickly, time.Millisecond, "the observer subscribes the announcements")
	require.NoError(t, c.Close())
	require.Empty(t, o.all(t), "no one led")
}
