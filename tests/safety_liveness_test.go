package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Liveness under faults: what the safety suite's clients still get done.

// downWays are the ways the liveness tests take a node down: killed (its
// proxy resets every connection), paused (SIGSTOP: connections are
// accepted, nothing is answered), and black-holed by its proxy.
var downWays = []struct {
	name       string
	down, heal func(sc *safetyCluster, i int) error
}{
	{"killed", func(sc *safetyCluster, i int) error { return sc.nodes[i].Kill() },
		func(sc *safetyCluster, i int) error { return sc.nodes[i].Restart() }},
	{"paused", func(sc *safetyCluster, i int) error { return sc.nodes[i].Pause() },
		func(sc *safetyCluster, i int) error { return sc.nodes[i].Resume() }},
	{"black-holed", func(sc *safetyCluster, i int) error {
		sc.proxies[i].Set(faults.Fault{Mode: faults.BlackHole})
		return nil
	},
		func(sc *safetyCluster, i int) error { sc.proxies[i].Heal(); return nil }},
}

// livenessTTL is the TTL of the liveness tests, and the longest TTL their
// clients declare (WithRestartSafety): with restart safety, a node that started
// without data less than that long ago does not count toward a quorum,
// so the tests wait that long after starting or restarting nodes.
const livenessTTL = time.Second

// safetyClient returns a Client over the cluster's proxies.
func safetyClient(t *testing.T, sc *safetyCluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithRestartSafety(livenessTTL)}, opts...)
	return newClient(t, newPools(t, sc.addrs, pool.WithIOTimeout(testReadTimeout)), opts...)
}

// warmUp takes and releases a lock a few times with every node up, so
// that the Client has connected to every node and checked it for a
// restart (restart safety checks a node in the background after a new
// connection, and does not count it until then) before nodes go down.
func warmUp(t *testing.T, c *redlock.Client) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	for range 3 {
		var err error
		require.Eventually(t, func() bool {
			var l *redlock.Lock
			if l, err = c.TryLock(ctx, "lock:safety:warm-up", livenessTTL); err == nil {
				err = l.Unlock(ctx)
			}
			return err == nil
		}, 5*time.Second, 20*time.Millisecond, "last error: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until nodes that started without data are counted again.
func settle() { time.Sleep(livenessTTL + 100*time.Millisecond) }

// With two of five nodes down, uncontended TryLocks succeed: at least
// 99.9% of them, whichever way the nodes are down.
func TestSafety_twoOfFiveDownStillGrantUncontendedLocks(t *testing.T) {
	sc := newSafetyCluster(t, false, 1)
	c := safetyClient(t, sc, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := ctxT(t, time.Minute)
	settle()
	const per = 700
	total, ok := 0, 0
	var failures []error
	for w, way := range downWays {
		warmUp(t, c)
		down := []int{w % 5, (w + 2) % 5}
		for _, i := range down {
			require.NoError(t, way.down(sc, i))
		}
		start := time.Now()
		for n := range per {
			key := fmt.Sprintf("lock:safety:uncontended:%s:%d", way.name, n)
			total++
			l, err := c.TryLock(ctx, key, livenessTTL)
			if err != nil {
				failures = append(failures, err)
				continue
			}
			ok++
			_ = l.Unlock(ctx) // with two nodes down it may still find a quorum; not under test
		}
		t.Logf("%s %v: %d TryLocks in %v", way.name, down, per, time.Since(start))
		for _, i := range down {
			require.NoError(t, way.heal(sc, i))
		}
		settle()
	}
	t.Logf("%d of %d uncontended TryLocks succeeded with 2 of 5 nodes down", ok, total)
	for i, err := range failures {
		if i == 3 {
			break
		}
		t.Logf("failure: %v", err)
	}
	require.GreaterOrEqual(t, float64(ok), 0.999*float64(total), "share of successes")
}

// With three of five nodes down, no TryLock succeeds, and each fails
// within the node timeout plus a small margin, not after the TTL (10s).
func TestSafety_threeOfFiveDownGrantNothingAndFailWithinTheNodeTimeout(t *testing.T) {
	const (
		nodeTimeout = 200 * time.Millisecond
		// typical bounds the median failure, margin every failure: they
		// cover scheduling on a busy machine under -race (a failure took
		// 465ms once while a soak ran alongside). The failure must come
		// within the node timeout, not the TTL.
		typical = 50 * time.Millisecond
		margin  = 350 * time.Millisecond
		per     = 15
	)
	sc := newSafetyCluster(t, false, 2)
	c := safetyClient(t, sc, redlock.WithNodeTimeout(nodeTimeout))
	ctx := ctxT(t, time.Minute)
	settle()
	// Killed last: nodes restarted empty would stay out of quorums for
	// the 10s TTL below (a Client's own TTLs above its maximum TTL raise
	// the wait).
	for _, w := range []int{1, 2, 0} {
		way := downWays[w]
		warmUp(t, c)
		down := []int{w % 5, (w + 1) % 5, (w + 3) % 5}
		for _, i := range down {
			require.NoError(t, way.down(sc, i))
		}
		var took []time.Duration
		for n := range per {
			key := fmt.Sprintf("lock:safety:three-down:%s:%d", way.name, n)
			start := time.Now()
			l, err := c.TryLock(ctx, key, longTTL)
			d := time.Since(start)
			took = append(took, d)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "%s: a lock with 3 of 5 nodes down", way.name)
			require.Nil(t, l)
			require.False(t, asQuorumError(t, err).Busy())
			require.Less(t, d, nodeTimeout+margin, "%s: failure %d took %v", way.name, n, d)
		}
		slices.Sort(took)
		t.Logf("%s %v: %d TryLocks failed, in %v (median) to %v", way.name, down, per, took[per/2], took[per-1])
		require.Less(t, took[per/2], nodeTimeout+typical, "%s: the median failure took %v", way.name, took[per/2])
		for _, i := range down {
			require.NoError(t, way.heal(sc, i))
		}
		settle()
	}
}

// A holder that dies (its process is SIGKILLed) holds the key no longer
// than its TTL: a waiter that was already waiting has it within the TTL
// plus one round.
func TestSafety_aKilledHoldersKeyPassesToTheNextWaiterWithinItsTTL(t *testing.T) {
	const (
		ttl   = livenessTTL
		round = 300 * time.Millisecond // one round and a wake-up, under -race on a busy machine
	)
	sc := newSafetyCluster(t, false, 3)
	settle()
	key := fmt.Sprintf("lock:safety:killed-holder:%d", time.Now().UnixNano())
	sub := startWorkerProcess(t, workerSpec{
		Name: "holder", Addrs: sc.addrs, Keys: []string{key}, TTL: ttl, Wait: 10 * time.Second,
		NodeTimeout: 150 * time.Millisecond, MaxTTL: ttl, HoldOnce: true, Duration: time.Minute,
	})
	var held workerEvent
	select {
	case ev := <-sub.events:
		require.Equal(t, "holding", ev.Type, "%+v", ev)
		held = ev
	case <-time.After(20 * time.Second):
		t.Fatalf("the holder never took the key; output:\n%s", sub.output())
	}
	c := safetyClient(t, sc, redlock.WithNodeTimeout(150*time.Millisecond), redlock.WithRestartSafety(ttl))
	ctx := ctxT(t, 20*time.Second)
	got := make(chan time.Duration, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key, ttl)
		if err != nil {
			errc <- err
			return
		}
		got <- faults.Mono()
		_ = l.Unlock(context.Background())
	}()
	time.Sleep(50 * time.Millisecond) // the waiter is waiting
	sub.kill()
	select {
	case at := <-got:
		after := at - held.Start
		t.Logf("the waiter held the key %v after the killed holder took it (TTL %v)", after, ttl)
		require.GreaterOrEqual(t, at, held.End, "the waiter got the key within the dead holder's validity")
		require.Less(t, after, ttl+round)
	case err := <-errc:
		t.Fatal(err)
	}
}
