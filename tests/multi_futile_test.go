package tests

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
)

// Two multi-key waiters whose keys overlap, each blocked by a different
// foreign holder, take their keys where they are free, fail, and give them
// back; each release announces a shared key free on nodes the other did
// not take keys on, which woke the other at once: the two asked again
// round after round for as long as the holders kept their keys (found by
// the simulator: seed 8 spun at one virtual instant). A wake-up that led
// to a failed round now makes the next one wait 1ms, doubling to 64ms.
func TestLockMulti_twoWaitersOnOverlappingKeysDoNotWakeEachOtherRoundAfterRound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	kA, kB, kC := newKey(t), newKey(t), newKey(t)
	holdForeign(t, e.nodes, kA, 0, 1, 2)
	holdForeign(t, e.nodes, kB, 2, 3, 4)
	x, y := e.client(), e.client()
	resetStats(t, e.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range []struct {
		c    *redlock.Client
		keys []string
	}{{x, []string{kA, kC}}, {y, []string{kB, kC}}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := w.c.LockMulti(ctx, w.keys, 10*time.Second)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
		}()
	}
	wg.Wait()
	n := 0
	for _, s := range []*redistest.Server{e.nodes[0], e.nodes[4]} {
		n += calls(t, s, "evalsha")
	}
	t.Logf("%d script calls on nodes 1 and 5 while the two waited 2s", n)
	require.Less(t, n, 400, "the two waiters woke each other round after round")
}
