package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// A new Client checks its nodes before its first acquisition; a second
// call that comes while that check waits for stalled nodes waits for it
// no longer than its own context allows. The check was a sync.Once: the
// second call waited for the first's check whatever its deadline (found
// by the simulator, where the callers blocked on the Once's mutex stopped
// virtual time: internal/sim's regression seed 2).
func TestRestartSafety_aCallWaitsForTheFirstCheckNoLongerThanItsContext(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(redlock.WithRestartSafety(time.Minute), redlock.WithNodeTimeout(time.Second))
	for _, i := range []int{0, 1, 2} {
		require.NoError(t, e.nodes[i].Pause())
	}
	t.Cleanup(func() {
		for _, i := range []int{0, 1, 2} {
			_ = e.nodes[i].Resume()
		}
	})
	first := make(chan error, 1)
	go func() {
		l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Second)
		if err == nil {
			_ = l.Unlock(context.Background())
		}
		first <- err
	}()
	time.Sleep(50 * time.Millisecond) // the first call is checking the nodes

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryLock(ctx, newKey(t), time.Second)
	took := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Less(t, took, 700*time.Millisecond, "the second call waited for the first call's check past its own deadline")
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call did not return")
	}
}
