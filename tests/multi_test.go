package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// Multi-key and single-key holders of the same keys on real nodes: no key
// is ever held by two at once. Each worker takes a random set of one to
// three of four keys (one key with Lock, more with LockMulti), holds it
// briefly and releases it; an in-memory owner per key catches overlaps.
func TestLockMulti_excludesSingleKeyHoldersOfTheSameKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	base := newKey(t)
	keys := []string{base + ":a", base + ":b", base + ":c", base + ":d"}
	var mu sync.Mutex
	owner := map[string]int{}
	const workers, rounds = 6, 15
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		c := e.client()
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds && time.Now().Before(deadline); r++ {
				set := []string{}
				for _, i := range rng.Perm(len(keys))[:1+rng.IntN(3)] {
					set = append(set, keys[i])
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				var l *redlock.Lock
				var err error
				if len(set) == 1 {
					l, err = c.Lock(ctx, set[0], 5*time.Second)
				} else {
					l, err = c.LockMulti(ctx, set, 5*time.Second)
				}
				cancel()
				if err != nil {
					t.Errorf("worker %d round %d %v: %v", w, r, set, err)
					return
				}
				mu.Lock()
				for _, k := range set {
					if o, ok := owner[k]; ok {
						t.Errorf("worker %d took %s while worker %d held it", w, k, o)
					}
					owner[k] = w
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				mu.Lock()
				for _, k := range set {
					delete(owner, k)
				}
				mu.Unlock()
				if err := l.Unlock(ctxT(t, quickly)); err != nil {
					t.Errorf("worker %d round %d: unlock: %v", w, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Two Clients take overlapping key sets in opposite orders, over and
// over: all-or-nothing on each node and the release of failed rounds
// leave no deadlock.
func TestLockMulti_overlappingSetsInOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	x, y := newKey(t), newKey(t)
	var wg sync.WaitGroup
	for _, set := range [][]string{{x, y}, {y, x}} {
		c := e.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				l, err := c.LockMulti(ctxT(t, 10*time.Second), set, 5*time.Second)
				if err != nil {
					t.Errorf("%v round %d: %v", set, i, err)
					return
				}
				if err := l.Unlock(ctxT(t, quickly)); err != nil {
					t.Errorf("%v round %d: unlock: %v", set, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A multi-key waiter hears a single-key holder's release: it does not
// wait for the key's TTL.
func TestLockMulti_wakesOnTheReleaseOfAKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	a, b := newKey(t), newKey(t)
	holder, waiter := e.client(), e.client()
	held, err := holder.TryLock(ctxT(t, quickly), b, longTTL)
	require.NoError(t, err)
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiter.LockMulti(ctxT(t, 10*time.Second), []string{a, b}, longTTL)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Unlock(ctxT(t, quickly))
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is refused and listens
	released := time.Now()
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	at := <-got
	require.False(t, at.IsZero())
	require.Less(t, at.Sub(released), 2*time.Second, "woken by the announcement, not the 10s TTL")
}

// DoMulti extends the lock while fn runs past the TTL, and releases every
// key when fn returns.
func TestDoMulti_extendsPastTheTTLAndReleasesEveryKey(t *testing.T) {
	// Serial: its 300ms TTL must be extended in time (main_test.go).
	e := newEnv(t, 5)
	c := e.client()
	keys := []string{newKey(t), newKey(t), newKey(t)}
	err := c.DoMulti(ctxT(t, 10*time.Second), keys, 300*time.Millisecond, func(ctx context.Context) error {
		for range 8 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("the lock's context ended: %w", context.Cause(ctx))
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})
	require.NoError(t, err)
	for _, k := range keys {
		l, err := c.TryLock(ctxT(t, quickly), k, longTTL)
		require.NoError(t, err, "%s was released", k)
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
	}
}

// A failed multi-key round releases the keys it took, and the nodes
// announce that release. A waiting LockMulti must not take its own
// announcements for a holder's release: with one key held on three of
// five nodes, it woke itself after every round and asked again at once,
// about 5,000 rounds a second.
func TestLockMulti_aWaitingCallIsNotWokenByItsOwnReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	c := e.client()
	holdForeign(t, e.nodes, key+"a", 2, 3, 4)
	n := scriptCallsWhileWaiting(t, e.nodes[0], func(ctx context.Context) error {
		_, err := c.LockMulti(ctx, []string{key + "a", key + "b"}, 10*time.Second)
		return err
	})
	// Each round is a script call on node 0, and its release another.
	require.LessOrEqual(t, n, 100)
}
