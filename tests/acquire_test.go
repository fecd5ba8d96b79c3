package tests

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// Every one of the 32 ways a foreign owner can hold the key on 5 nodes.
func TestTryLock_acquiresIffThreeOfFiveNodesAreFree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	n := len(e.nodes)
	for mask := range 1 << n {
		held := idx(n, func(i int) bool { return mask&(1<<i) != 0 })
		free := idx(n, func(i int) bool { return mask&(1<<i) == 0 })
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			key := newKey(t)
			holdForeign(t, e.nodes, key, held...)
			c := newClient(t, e.pools)

			l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)

			if len(free) >= 3 {
				require.NoError(t, err)
				require.NotNil(t, l)
				require.Equal(t, key, l.Key())
				require.NotEmpty(t, l.Token())
				require.NotEqual(t, foreignToken, l.Token())
				require.Greater(t, l.Validity(), longTTL/2)
				// A success may be decided before every free node replied;
				// Close waits for the rest.
				require.NoError(t, c.Close())
				for _, i := range free {
					requireValue(t, e.nodes, i, key, l.Token())
					require.Greater(t, pttl(t, e.nodes[i], key), longTTL/2)
				}
				for _, i := range held {
					requireForeignIntact(t, e.nodes, i, key)
				}

				// The lock is ours: another client's Unlock through Restore
				// frees exactly our nodes.
				c2 := newClient(t, e.pools)
				require.NoError(t, c2.Restore(key, l.Token()).Unlock(ctxT(t, 10*time.Second)))
				require.NoError(t, c2.Close())
				for _, i := range free {
					requireAbsent(t, e.nodes, i, key)
				}
				for _, i := range held {
					requireForeignIntact(t, e.nodes, i, key)
				}
				return
			}

			require.Nil(t, l)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			require.NotErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			qe := asQuorumError(t, err)
			require.Equal(t, redlock.Op("acquire"), qe.Op)
			require.Equal(t, key, qe.Key)
			require.Equal(t, 3, qe.Quorum)
			require.Nil(t, qe.Cause)
			require.True(t, qe.Busy(), "busy with %d held: %s", len(held), statuses(qe))
			require.Len(t, qe.Nodes, n)
			// The round ends as soon as 3 nodes refused, so with more than 3
			// held nodes some may not have replied yet; none may be OK, no
			// free node may be refused, and nothing failed.
			require.GreaterOrEqual(t, qe.Count(redlock.NodeRefused), 3, statuses(qe))
			for i, r := range qe.Nodes {
				require.Equal(t, e.addrs[i], r.Addr)
				if mask&(1<<i) != 0 {
					want := []redlock.NodeStatus{redlock.NodeRefused}
					if len(held) > 3 {
						want = append(want, redlock.NodePending)
					}
					require.Contains(t, want, r.Status, "held node %d: %s", i, statuses(qe))
				} else {
					require.Contains(t, []redlock.NodeStatus{redlock.NodeOK, redlock.NodePending}, r.Status,
						"free node %d: %s", i, statuses(qe))
				}
				if r.Status != redlock.NodeFailed {
					require.NoError(t, r.Err, "node %d", i)
				}
			}
			require.Contains(t, err.Error(), "held by another owner")

			// Once the background releases are done, none of the free nodes
			// keeps our token and the foreign keys are untouched.
			require.NoError(t, c.Close())
			for _, i := range free {
				requireAbsent(t, e.nodes, i, key)
			}
			for _, i := range held {
				requireForeignIntact(t, e.nodes, i, key)
			}
		})
	}
}

func TestLock_waitsForTheHoldersTTLToRunOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)

	const holderTTL = 500 * time.Millisecond
	start := time.Now()
	for _, s := range e.nodes {
		_, err := s.Do("SET", key, foreignToken, "PX", holderTTL.Milliseconds())
		require.NoError(t, err)
	}
	// The holder is still there: one round is refused.
	_, err := c.TryLock(ctxT(t, 5*time.Second), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.True(t, asQuorumError(t, err).Busy())

	l, err := c.Lock(ctxT(t, 5*time.Second), key, longTTL)
	require.NoError(t, err)
	// SET NX cannot succeed before the holder's keys expired: the wait is at
	// least the holder's TTL (less Redis's 1ms expiry granularity).
	require.GreaterOrEqual(t, time.Since(start), holderTTL-5*time.Millisecond)

	require.NoError(t, c.Close())
	// The holder's keys were set one node at a time: the last ones may
	// outlive the round that succeeded by a little. Let them run out.
	for _, s := range e.nodes {
		if v, ok := get(t, s, key); ok && v == foreignToken {
			time.Sleep(max(pttl(t, s, key), 0) + 5*time.Millisecond)
		}
	}
	ours := 0
	for i, s := range e.nodes {
		// A node whose holder key expired a little later than the others
		// may have refused the round that succeeded; its key has expired
		// since.
		v, ok := get(t, s, key)
		if !ok {
			continue
		}
		require.True(t, ofLock(l.Token(), v),
			"node %d: the holder's key was overwritten or outlived its TTL: %q", i, v)
		ours++
	}
	require.GreaterOrEqual(t, ours, 3)
}

// A ctx cancelled while the round waits for a node leaves no key behind,
// including on nodes that answer after the round was decided.
func TestTryLock_cancelledMidRoundLeavesNoKeyBehind(t *testing.T) {
	e := newEnv(t, 5)
	// Nodes 3 and 4 are paused and node 2 is held: a quorum needs a paused
	// node, so the round waits until ctx is cancelled. The node timeout is
	// long so that the paused nodes are resumed, and their SETs land and
	// answer OK, long before it.
	c := e.client(redlock.WithNodeTimeout(5 * time.Second))
	key := newKey(t)
	holdForeign(t, e.nodes, key, 2)
	paused := []int{3, 4}
	for _, i := range paused {
		require.NoError(t, e.nodes[i].Pause())
		t.Cleanup(func() { _ = e.nodes[i].Resume() })
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(50*time.Millisecond, cancel)
	defer stop.Stop()
	start := time.Now()
	l, err := c.TryLock(ctx, key, longTTL)
	elapsed := time.Since(start)

	require.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, elapsed, quickly, "TryLock did not return when ctx was cancelled")
	qe := asQuorumError(t, err)
	require.ErrorIs(t, qe.Cause, context.Canceled)
	require.False(t, qe.Busy(), statuses(qe))
	for _, i := range paused {
		require.Equal(t, redlock.NodePending, qe.Nodes[i].Status, statuses(qe))
	}
	require.Contains(t, err.Error(), "context canceled")

	// The paused nodes now run the SETs sent to them; the client releases
	// them in the background, and Close waits for that.
	for _, i := range paused {
		require.NoError(t, e.nodes[i].Resume())
	}
	require.NoError(t, c.Close())
	requireOnlyForeignOrNothing(t, e.nodes, key, 0, 1, 2, 3, 4)
	requireForeignIntact(t, e.nodes, 2, key)
	for _, i := range []int{0, 1, 3, 4} {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestLock_whoseDeadlinePassesWhileWaitingMatchesNotAcquiredAndDeadlineExceeded(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	holdForeign(t, e.nodes, key, 0, 1, 2, 3, 4)

	// The retry delay after the first round is far longer than the
	// deadline: Lock must stop waiting when the deadline passes.
	slow := redlock.WithRetry(8*time.Second, 8*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := c.Lock(ctx, key, longTTL, slow)
	elapsed := time.Since(start)

	require.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, context.Canceled)
	qe := asQuorumError(t, err)
	require.ErrorIs(t, qe.Cause, context.DeadlineExceeded)
	// Far below the 8s retry delay that a Lock ignoring its deadline
	// would sleep; the margin over the deadline is a round bounded by
	// the node timeout (1s) and a loaded machine's scheduling (one run of
	// three -race passes beside other work took 2.08s).
	require.Less(t, elapsed, 4*time.Second, "Lock kept waiting after its deadline")

	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireForeignIntact(t, e.nodes, i, key)
	}
}

func TestLock_manyGoroutinesOnOneKeyNeverHoldItAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	const (
		clients     = 4
		perClient   = 4
		maxAcquires = 30 // per goroutine
		budget      = 10 * time.Second
	)
	key := newKey(t)
	ctx := ctxT(t, budget)
	retry := redlock.WithRetry(2*time.Millisecond, 40*time.Millisecond)

	var (
		holder       atomic.Bool
		overlaps     atomic.Int64
		acquisitions atomic.Int64
		mu           sync.Mutex
		errs         []error
		wg           sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for range clients {
		// Each client has its own connections, as separate processes would.
		c := newClient(t, newPools(t, e.addrs), retry)
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range maxAcquires {
					l, err := c.Lock(ctx, key, longTTL)
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							fail(fmt.Errorf("Lock: %w", err))
						}
						return
					}
					if !holder.CompareAndSwap(false, true) {
						overlaps.Add(1)
					} else {
						acquisitions.Add(1)
						runtime.Gosched()
						time.Sleep(time.Millisecond)
						holder.Store(false)
					}
					if err := l.Unlock(context.Background()); err != nil {
						fail(fmt.Errorf("Unlock: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()

	require.Zero(t, overlaps.Load(), "two holders at once")
	require.Empty(t, errs)
	require.Positive(t, acquisitions.Load())
	t.Logf("%d acquisitions of %d possible", acquisitions.Load(), clients*perClient*maxAcquires)
}
