package tests

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// fastRetry keeps contended fenced acquisitions moving.
var fastRetry = redlock.WithRetry(200*time.Microsecond, 2*time.Millisecond)

// hammerFences runs clients x workers goroutines that take key total times
// in all, each recording its fence while it holds the lock, and returns
// the fences in the order their locks were held. It stops at the deadline.
func hammerFences(t *testing.T, clients []*redlock.Client, workers, total int, key string, ttl time.Duration) []uint64 {
	t.Helper()
	// Generous: under -race beside other packages, with a node failing
	// every 30ms, 400 fenced acquisitions take from 7s to over 20s.
	ctx := ctxT(t, time.Minute)
	var (
		mu    sync.Mutex
		order []uint64
		left  atomic.Int64
		wg    sync.WaitGroup
	)
	left.Store(int64(total))
	for _, c := range clients {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					l, err := c.Lock(ctx, key, ttl, redlock.WithFencing(), fastRetry)
					if err != nil {
						t.Errorf("lock: %v", err)
						return
					}
					mu.Lock()
					order = append(order, l.Fence())
					mu.Unlock()
					// An unlock that finds the lock lost (a node died under
					// it) is fine here: only the fences are under test.
					_ = l.Unlock(ctx)
				}
			}()
		}
	}
	wg.Wait()
	return order
}

// requireStrictlyIncreasing checks that fences, in holding order, are
// unique and strictly increasing.
func requireStrictlyIncreasing(t *testing.T, fences []uint64) {
	t.Helper()
	seen := make(map[uint64]bool, len(fences))
	for i, f := range fences {
		require.False(t, seen[f], "fence %d handed out twice", f)
		seen[f] = true
		if i > 0 {
			require.Greater(t, f, fences[i-1], "lock %d got fence %d after fence %d", i, f, fences[i-1])
		}
	}
}

func fenceClients(e *env, n int, opts ...redlock.Option) []*redlock.Client {
	cs := make([]*redlock.Client, n)
	for i := range cs {
		// Each client has its own pools, as separate processes would.
		cs[i] = newClient(e.t, newPools(e.t, e.addrs), opts...)
	}
	return cs
}

// Serial, as the next test: its clients keep both cores busy, which
// would starve the nodes of the tests running beside it.
func TestFence_manyClientsGetUniqueIncreasingFences(t *testing.T) {
	e := newEnv(t, 5)
	key := newKey(t)
	start := time.Now()
	fences := hammerFences(t, fenceClients(e, 3), 4, 1500, key, longTTL)
	t.Logf("%d fenced acquisitions in %v", len(fences), time.Since(start))
	require.Len(t, fences, 1500)
	requireStrictlyIncreasing(t, fences)
	for i := range e.nodes {
		requireValue(t, e.nodes, i, keyslot.Helper(key, "fence"), fmt.Sprint(fences[len(fences)-1]))
	}
}

// Nodes are killed and restarted with their data (append-only file,
// fsync on every write) and paused, one at a time, while the clients
// hammer the key.
func TestFence_staysMonotonicWhileNodesRestartWithTheirData(t *testing.T) {
	e := newEnv(t, 5, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	key := newKey(t)
	// The nodes keep every write: declared durable, a node that restarted
	// counts at once.
	logged, resets := resetLog()
	clients := fenceClients(e, 3, redlock.WithDurableNodes(), logged)
	awaitMarked(t, e, clients)
	stopFaults := failNodesInTurn(e)
	// A short TTL: a lock left on a killed node expires soon.
	start := time.Now()
	fences := hammerFences(t, clients, 4, 400, key, 250*time.Millisecond)
	require.NoError(t, stopFaults())
	t.Logf("%d fenced acquisitions in %v with a node down or paused most of the time", len(fences), time.Since(start))
	require.Len(t, fences, 400)
	requireStrictlyIncreasing(t, fences)
	require.Empty(t, resets(), "nodes restarted with their data keep their epoch")
}

// The [10,0,0,0,0] example. Node 1's counter is 10, the others have none.
// A lock granted by {1,2,3} gets 11 and stores it on that quorum (nodes 4
// and 5 are down and come back empty). A later lock granted by {3,4,5}
// must get more than 11: it does because node 3 holds 11. A naive max over
// the granting nodes without the store round would give 11, then 1.
func TestFence_writeBackRoundCarriesTheFenceToTheNextQuorum(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	key, fkey := newKey(t), ""
	fkey = keyslot.Helper(key, "fence")
	// Restart safety off: this is node amnesia on purpose (two nodes come
	// back empty and are counted at once), to show what the write-back
	// carries to the next quorum.
	c := e.client(redlock.WithRestartSafety(0))
	ctx := ctxT(t, 10*time.Second)
	_, err := e.nodes[0].Do("SET", fkey, "10")
	require.NoError(t, err)
	for _, i := range []int{3, 4} {
		require.NoError(t, e.nodes[i].Kill())
	}
	l, err := c.TryLock(ctx, key, longTTL, redlock.WithFencing())
	require.NoError(t, err)
	require.Equal(t, uint64(11), l.Fence())
	for i := range 3 {
		requireValue(t, e.nodes, i, fkey, "11")
	}
	require.NoError(t, l.Unlock(ctx))

	for _, i := range []int{3, 4} {
		require.NoError(t, e.nodes[i].Restart()) // empty: no counter
		requireAbsent(t, e.nodes, i, fkey)
	}
	holdForeign(t, e.nodes, key, 0, 1)
	require.Eventually(t, func() bool {
		l, err = c.TryLock(ctx, key, longTTL, redlock.WithFencing())
		return err == nil // the pools reconnect to the restarted nodes
	}, quickly, 10*time.Millisecond, "last error: %v", err)
	require.Equal(t, uint64(12), l.Fence(), "a lock on {3,4,5} after the one fenced 11")
	require.NoError(t, l.Unlock(ctx))
}

// A node restarted empty has a new epoch: the client counts it, and the
// fences stay monotonic because the other nodes still hold the counter.
func TestFence_nodeRestartedEmptyIsDetected(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	key := newKey(t)
	logged, resets := resetLog()
	c := e.client(logged)
	ctx := ctxT(t, 10*time.Second)
	var last uint64
	acquire := func() {
		t.Helper()
		var l *redlock.Lock
		var err error
		require.Eventually(t, func() bool {
			l, err = c.TryLock(ctx, key, longTTL, redlock.WithFencing())
			return err == nil
		}, quickly, 10*time.Millisecond, "last error: %v", err)
		require.Greater(t, l.Fence(), last)
		last = l.Fence()
		require.NoError(t, l.Unlock(ctx))
	}
	acquire()
	// Make sure the client has seen every node's epoch: all five granted.
	for range 20 {
		acquire()
	}
	require.Empty(t, resets())
	require.NoError(t, e.nodes[2].Kill())
	require.NoError(t, e.nodes[2].Restart())
	for deadline := time.Now().Add(5 * time.Second); len(resets()) == 0 && time.Now().Before(deadline); {
		acquire() // node 3 may answer after some decisions
	}
	require.Equal(t, map[string]bool{e.addrs[2]: true}, resets())
}

// fencedStore refuses a write whose fence is lower than the highest it
// has accepted (the store of redlock's Example_fencedStore).
type fencedStore struct {
	mu    sync.Mutex
	fence uint64
	value string
}

var errStale = errors.New("stale fence")

func (s *fencedStore) write(fence uint64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence {
		return errStale
	}
	s.fence, s.value = fence, v
	return nil
}

func TestFence_stalledHoldersWriteIsRefusedAfterANewerHolderWrote(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	a, b := e.client(), e.client()
	ctx := ctxT(t, 10*time.Second)
	var store fencedStore

	la, err := a.TryLock(ctx, key, 300*time.Millisecond, redlock.WithFencing())
	require.NoError(t, err)
	// A stalls past its validity; B takes the lock once it has expired.
	lb, err := b.Lock(ctx, key, longTTL, redlock.WithFencing())
	require.NoError(t, err)
	require.Greater(t, lb.Fence(), la.Fence())
	require.Zero(t, la.Validity(), "A's lock ran out while it stalled")
	require.NoError(t, store.write(lb.Fence(), "B"))
	require.ErrorIs(t, store.write(la.Fence(), "A, late"), errStale)
	require.Equal(t, "B", store.value)
	require.NoError(t, lb.Unlock(ctx))
}

// The write-back script on a real node: it takes a fence above the
// counter, and refuses one that is not above it, naming the counter. The
// counter lives for the TTL given; the slot's floor keeps the largest
// fence, and once the counter is gone a fence must be above the floor.
func TestScripts_theFenceWriteBackTakesOnlyAFenceAboveTheCounter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	key := newKey(t)
	fkey, floor := wire.FenceKey(key), wire.FloorKey(keyslot.Slot(key))
	store := script(wire.FenceStore, 2)
	conn := dialNode(t, e.nodes[0])
	for _, tc := range []struct {
		fence int
		want  any
	}{
		{5, int64(1)},
		{5, []any{int64(0), []byte("5")}},
		{3, []any{int64(0), []byte("5")}},
		{6, int64(1)},
	} {
		got, err := store.Do(conn, fkey, floor, tc.fence, 60_000)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "fence %d", tc.fence)
	}
	v, _ := get(t, e.nodes[0], fkey)
	require.Equal(t, "6", v)
	require.InDelta(t, 60_000, int(pttl(t, e.nodes[0], fkey)/time.Millisecond), 5_000, "the counter's TTL")
	v, _ = get(t, e.nodes[0], floor)
	require.Equal(t, "6", v, "the floor")
	require.Equal(t, time.Duration(-1), pttl(t, e.nodes[0], floor), "the floor has no TTL")

	// The counter expired: a fence not above the floor is refused.
	_, err := e.nodes[0].Do("DEL", fkey)
	require.NoError(t, err)
	got, err := store.Do(conn, fkey, floor, 6, 60_000)
	require.NoError(t, err)
	require.Equal(t, []any{int64(0), []byte("6")}, got)
	got, err = store.Do(conn, fkey, floor, 7, 60_000)
	require.NoError(t, err)
	require.Equal(t, int64(1), got)
	// A key of the slot with a counter of its own is not held back by a
	// floor that others raised: its counter decides.
	_, err = e.nodes[0].Do("SET", floor, 100)
	require.NoError(t, err)
	got, err = store.Do(conn, fkey, floor, 8, 60_000)
	require.NoError(t, err)
	require.Equal(t, int64(1), got)
	v, _ = get(t, e.nodes[0], floor)
	require.Equal(t, "100", v, "the floor does not go down")
}

// resetLog is a Client option that logs to a buffer, and a function that
// returns the nodes the Client logged as having lost their data.
func resetLog() (redlock.Option, func() map[string]bool) {
	var logs syncBuffer
	opt := redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	return opt, func() map[string]bool {
		reset := map[string]bool{}
		for _, line := range strings.Split(logs.String(), "\n") {
			if !strings.Contains(line, "node lost its data") {
				continue
			}
			_, rest, _ := strings.Cut(line, "node=")
			addr, _, _ := strings.Cut(rest, " ")
			reset[addr] = true
		}
		return reset
	}
}

// awaitMarked has every Client check the nodes (its first acquisition
// does) and waits until every node carries restart safety's marker: a
// node killed before it was first marked comes back with no marker, which
// even a durable node is taken to have lost its data by.
func awaitMarked(t *testing.T, e *env, clients []*redlock.Client) {
	t.Helper()
	for _, c := range clients {
		l, err := c.TryLock(ctxT(t, quickly), newKey(t), time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
	}
	for i, s := range e.nodes {
		require.Eventually(t, func() bool { return marker(t, s) != "" }, quickly, 5*time.Millisecond,
			"node %d is marked", i)
	}
}

// A fence counter above 2^53 - 1 is none the Client minted (the scripts
// compare counters as doubles, exact up to 2^53): the node that holds one
// fails, with the counter in the error, and the other nodes make the
// quorum. One node with the largest uint64 made the fence wrap to 0,
// which every node refused: 3 fenced TryLocks in 10 failed, with every
// node described as "not held by us".
func TestFence_aNodeWithACounterBeyondTheLargestFenceFailsAlone(t *testing.T) {
	t.Parallel()
	const huge = "18446744073709551615"
	e := newEnv(t, 5)
	c := e.client(redlock.WithRestartSafety(0))
	for range 10 {
		key := newKey(t)
		_, err := e.nodes[0].Do("SET", keyslot.Helper(key, "fence"), huge)
		require.NoError(t, err)
		l, err := c.TryLock(ctxT(t, 5*time.Second), key, longTTL, redlock.WithFencing())
		require.NoError(t, err, "four healthy nodes of five")
		require.EqualValues(t, 1, l.Fence())
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
	}

	// On every node: each grant fails, naming the node and its counter,
	// and a waiting Lock is paced as any failed round (an acquisition and
	// its release per round, no write-back).
	key := newKey(t)
	for _, s := range e.nodes {
		_, err := s.Do("SET", keyslot.Helper(key, "fence"), huge)
		require.NoError(t, err)
	}
	resetStats(t, e.nodes[:1])
	_, err := c.Lock(ctxT(t, 2*time.Second), key, longTTL, redlock.WithFencing())
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorContains(t, err, e.addrs[0])
	require.ErrorContains(t, err, `fence counter "`+huge+`" is above`)
	n := calls(t, e.nodes[0], "evalsha") + calls(t, e.nodes[0], "eval")
	// The back-off at its shortest (half of 10ms, doubling up to half of
	// 250ms) fits 21 rounds in 2s: 42 calls; 32 to 38 are usual, and a
	// loaded CI machine counted 51 (releases that land late, or are sent
	// again, add some). An unpaced loop makes thousands.
	require.LessOrEqual(t, n, 64, "script calls on node 0 while Lock waited 2s")
	awaitAbsent(t, e.nodes, key)
}
