package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// offsetClock is the system clock read off by a fixed amount: a machine
// whose clock is wrong but runs at the right rate. Durations between two
// of its readings are the system clock's.
type offsetClock struct {
	clock.Clock
	off time.Duration
}

func (o offsetClock) Now() time.Time { return o.Clock.Now().Add(o.off) }

func (o offsetClock) Since(t time.Time) time.Duration { return o.Now().Sub(t) }

// A Client whose clock is an hour behind, whose two callers take a
// one-permit semaphore in turn, each again as soon as it has released it,
// does not go ahead of a waiter that began before its calls: they are
// placed by the nodes' clocks, and the correct Client's Acquire is served
// within three of the slow one's holds from when its first round was
// refused (it is queued then; a busy machine may delay that round while
// the slow Client takes the free permit). Placed by the slow clock, a call
// of the slow Client always heads the queues while the other holds, and
// takes each permit its other caller frees.
func TestSemaphore_aClientWithASlowClockDoesNotStarveAWaiter(t *testing.T) {
	name := newKey(t)
	served := servedBehindASlowClock(t, newEnv(t, 5), func(c *redlock.Client) takeFunc {
		return c.Semaphore(name, 1).Acquire
	})
	require.LessOrEqual(t, served, int64(3), "the slow Client's calls went ahead of the waiter")
}

// takeFunc takes a lock of some kind for ttl, waiting.
type takeFunc func(ctx context.Context, ttl time.Duration, opts ...redlock.LockOption) (*redlock.Lock, error)

// servedBehindASlowClock is servedOnce, measured up to three times until
// a call is served within three of the slow Client's holds: the fewest.
// Starvation fails every time (hundreds of holds); on a machine loaded
// by other tests, a round of the correct call can reach some nodes late,
// and until its place is on them the slow Client may go first there (5
// holds once, in a CI leg that ran every test package beside it).
func servedBehindASlowClock(t *testing.T, e *env, take func(c *redlock.Client) takeFunc) int64 {
	t.Helper()
	fewest := int64(-1)
	for range 3 {
		served := servedOnce(t, e, take)
		if fewest < 0 || served < fewest {
			fewest = served
		}
		if fewest <= 3 {
			break
		}
	}
	return fewest
}

// servedOnce runs two callers of a Client whose clock is an hour behind,
// each taking (with take of that Client) again as soon as it has
// released, and returns after how many of their holds a call of a correct
// Client was served, counted from when its first round was refused (it
// waits from then on; a busy machine may delay that round while the slow
// Client takes the free lock).
func servedOnce(t *testing.T, e *env, take func(c *redlock.Client) takeFunc) int64 {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	slow := take(e.client(redlock.WithClock(offsetClock{clock.Real(), -time.Hour})))
	var holds atomic.Int64
	queuedAt := atomic.Int64{} // holds when the correct call's first round was refused; -1 before
	queuedAt.Store(-1)
	fair := take(e.client(redlock.WithObserver(onRefusal(func() { queuedAt.CompareAndSwap(-1, holds.Load()) }))))

	const most = 300 // each slow caller's acquisitions, at most
	var stop atomic.Bool
	var wg sync.WaitGroup
	loop := func() {
		defer wg.Done()
		for range most {
			if stop.Load() {
				return
			}
			l, err := slow(ctx, 10*time.Second)
			if !assert.NoError(t, err, "the slow Client's call") {
				return
			}
			holds.Add(1)
			time.Sleep(2 * time.Millisecond)
			if !assert.NoError(t, l.Unlock(ctx)) {
				return
			}
		}
	}
	wg.Add(2)
	go loop()
	go loop()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	require.Eventually(t, func() bool { return holds.Load() >= 4 }, 10*time.Second, time.Millisecond, "the slow Client takes the lock")

	l, err := fair(ctx, 10*time.Second)
	served := max(holds.Load()-queuedAt.Load(), 0) // none when its first round took the lock
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	t.Logf("served after %d of the slow Client's holds", served)
	return served
}

// The semaphore's acquisition, on one real node: a waiting call is
// queued at the priority its Client sent, unless its Client's clock is
// more than a second off the node's; then the node's clock less the time
// waited places it, as the mutex queue does. A call already queued keeps
// its place on its later rounds, and the calls before it count against
// it by their places, not by the priorities their Clients sent.
func TestScripts_aSemaphoreDoesNotTrustAClientClockASecondOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	conn := dialNode(t, e.nodes[0])
	acquire := script(wire.SemAcquire, -1)
	name := newKey(t)
	keys := wire.SemKeys(name, 1, false)
	_, err := conn.Do("SET", wire.PermitKey(name, 0), foreignToken, "PX", 60_000)
	require.NoError(t, err)
	ask := func(id string, since time.Time, waited time.Duration) float64 {
		t.Helper()
		w := wire.Wait{ID: id, Priority: since.UnixMicro(), Waited: waited.Microseconds(), LifeMs: 10_000}
		v, err := acquire.Do(conn, wire.SemAcquireArgs(keys, 1, id+"/t", 10_000, -1, w, "")...)
		require.NoError(t, err)
		p, ok := wire.ParsePermit(v)
		require.True(t, ok, "%v", v)
		require.EqualValues(t, wire.CodeHeld, p.Code, "refused and queued")
		score, err := redis.Float64(conn.Do("ZSCORE", wire.PermitWaitersKey(name), id))
		require.NoError(t, err)
		return score
	}
	// An honest clock: its wait began 300ms ago, and it says so.
	since := time.Now().Add(-300 * time.Millisecond)
	honest := ask("c1.1", since, 300*time.Millisecond)
	require.Equal(t, float64(since.UnixMicro()), honest, "the priority sent")

	// A clock an hour behind, with a wait of 20ms: placed 20ms before now
	// on the node's clock, not an hour before everyone else.
	now := float64(time.Now().UnixMicro())
	slowSince := time.Now().Add(-time.Hour)
	behind := ask("c2.1", slowSince, 20*time.Millisecond)
	require.InDelta(t, now-20_000, behind, 500_000, "placed by the node's clock")
	require.Greater(t, behind, honest, "behind the waiter that began first")

	// Its next round keeps that place, whatever its clock says.
	require.Equal(t, behind, ask("c2.1", slowSince.Add(time.Second), time.Second), "the place it had")

	// Freed, the permit goes to the honest waiter: the slow one's round
	// counts it as ahead and is refused again.
	_, err = conn.Do("DEL", wire.PermitKey(name, 0))
	require.NoError(t, err)
	ask("c2.1", slowSince, 40*time.Millisecond)
	w := wire.Wait{ID: "c1.1", Priority: since.UnixMicro(), Waited: 400_000, LifeMs: 10_000}
	v, err := acquire.Do(conn, wire.SemAcquireArgs(keys, 1, "c1.1/t", 10_000, -1, w, "")...)
	require.NoError(t, err)
	p, ok := wire.ParsePermit(v)
	require.True(t, ok, "%v", v)
	require.EqualValues(t, wire.CodeAcquired, p.Code, "the honest waiter takes the permit")
}

// onRefusal is an Observer that calls f on each refused acquisition
// round.
type onRefusal func()

func (f onRefusal) Round(info *redlock.RoundInfo) {
	if info.Op == redlock.OpAcquire && !info.Won {
		f()
	}
}

func (onRefusal) Event(redlock.Event) {}
