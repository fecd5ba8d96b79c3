package tests

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// rwTurns runs readers and writers, each on a Client of its own, taking
// one read-write lock again as soon as they have released it (holds of
// 1-4ms), for d, with hammer (which then asks every one for one more
// turn); it returns each side's acquisitions. The holds' randomness
// prints its seed.
func rwTurns(t *testing.T, e *env, readers, writers int, d time.Duration) (reads, writes int64) {
	t.Helper()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	name := newKey(t)
	var nReads, nWrites atomic.Int64
	hammer(t, readers+writers, d, nil, func(w int) func(ctx context.Context) error {
		rw := e.client().RWLock(name)
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		take, n := rw.Lock, &nWrites
		if w < readers {
			take, n = rw.RLock, &nReads
		}
		return func(ctx context.Context) error {
			l, err := take(ctx, longTTL)
			if err != nil {
				return err
			}
			n.Add(1)
			time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
			return l.Unlock(context.WithoutCancel(ctx))
		}
	})
	return nReads.Load(), nWrites.Load()
}

// Two writers and six readers taking the lock back to back: writers do
// not shut the readers out (phase-fair: when a writer releases, the
// readers that waited go in before the next writer), and writers go on
// getting in.
func TestRWLock_readersAreNotStarvedByAStreamOfWriters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	reads, writes := rwTurns(t, e, 6, 2, 3*time.Second)
	perReader, perWriter := float64(reads)/6, float64(writes)/2
	t.Logf("%d reads (%.1f a reader), %d writes (%.1f a writer)", reads, perReader, writes, perWriter)
	require.Positive(t, writes)
	require.GreaterOrEqual(t, perReader, perWriter/2, "a reader gets at least half a writer's turns")
}

// Six writers and two readers: neither side is shut out.
func TestRWLock_neitherSideStarvesWhenWritersAreMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	reads, writes := rwTurns(t, e, 2, 6, 3*time.Second)
	perReader, perWriter := float64(reads)/2, float64(writes)/6
	t.Logf("%d reads (%.1f a reader), %d writes (%.1f a writer)", reads, perReader, writes, perWriter)
	require.GreaterOrEqual(t, perReader, perWriter/2, "a reader gets at least half a writer's turns")
	require.GreaterOrEqual(t, writes, reads/8, "writers go in between the readers' turns")
}

// Three writers that wait behind a reader, while one of five nodes is
// paused, all get in once the reader releases, in the order they began
// to wait: every node orders them alike, so they do not split the nodes
// between them.
func TestRWLock_waitingWritersGoInTheOrderTheyBeganToWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	r, err := e.client().RWLock(name).TryRLock(ctx, longTTL)
	require.NoError(t, err)
	var released atomic.Int64 // when the reader released, unix ns
	require.NoError(t, e.nodes[4].Pause())
	t.Cleanup(func() { _ = e.nodes[4].Resume() })

	order := make(chan int, 3)
	var lastIn atomic.Int64 // when the last writer got in, ns since released
	var wg sync.WaitGroup
	for w := range 3 {
		rw := e.client().RWLock(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := rw.Lock(ctx, longTTL)
			if !assertNoError(t, err) {
				return
			}
			order <- w
			lastIn.Store(time.Now().UnixNano() - released.Load())
			time.Sleep(5 * time.Millisecond)
			assertNoError(t, l.Unlock(ctx))
		}()
		// Each begins to wait (and is refused by the reader) before the next.
		require.Eventually(t, func() bool { return writersWaiting(t, e, name) >= w+1 }, 10*time.Second, 5*time.Millisecond)
	}
	released.Store(time.Now().UnixNano())
	require.NoError(t, r.Unlock(ctx))
	wg.Wait()
	close(order)
	// The figure docs/kinds.md quotes (each writer holds 5ms).
	t.Logf("the last writer was in %v after the reader's release", time.Duration(lastIn.Load()))
	// No writer waits for the paused node: a round that asked before the
	// release it heard had landed on a quorum stayed undecided until the
	// node timeout (1s here; 17-31ms when none does).
	require.Less(t, time.Duration(lastIn.Load()), testNodeTimeout/2, "a writer's round waited for the paused node")

	var got []int
	for w := range order {
		got = append(got, w)
	}
	require.Equal(t, []int{0, 1, 2}, got)
}

// writersWaiting is how many writers wait for the lock name on the
// first node.
func writersWaiting(t *testing.T, e *env, name string) int {
	n, _ := redis.Int(dialNode(t, e.nodes[0]).Do("ZCARD", wire.RWKeys(name)[2]))
	return n
}

// assertNoError reports err on t from any goroutine, and whether there
// was none.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("%v", err)
		return false
	}
	return true
}

// Writers of a Client whose clock is an hour behind, taking the lock in
// turn, do not go ahead of a writer that began to wait before their
// calls: the nodes place them by their own clocks, as the semaphore's
// queue does, and the correct writer is in within three of the slow
// Client's holds from when its first round was refused.
func TestRWLock_aWriterWithASlowClockDoesNotStarveAnother(t *testing.T) {
	name := newKey(t)
	served := servedBehindASlowClock(t, newEnv(t, 5), func(c *redlock.Client) takeFunc {
		return c.RWLock(name).Lock
	})
	require.LessOrEqual(t, served, int64(3), "the slow Client's writers went ahead of the waiter")
}
