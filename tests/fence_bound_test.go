package tests

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/redlock"
)

// Fence state is bounded by the hash slots, not by the names: 40,000
// fenced locks on distinct names, each released and expired, leave at
// most an epoch and a fence floor per hash slot (and the restart marker)
// on each node. Each key's counter used to stay for good: 54,469 keys per
// node after the same run (40,000 counters, 14,469 epochs). Fences still
// increase per name: a name locked again after its counter expired gets
// a larger fence than its first, from its slot's floor.
func TestFence_stateIsBoundedByTheSlotsNotByTheNames(t *testing.T) {
	const names, workers = 40_000, 32
	e := newEnv(t, 5)
	c := e.client()
	ttl := 300 * time.Millisecond
	first := make([]uint64, names)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= names {
					return
				}
				// A round on a machine busy enough to outlast the 300ms TTL
				// leaves no validity: the name is asked again.
				var l *redlock.Lock
				var err error
				for try := 0; try < 5 && (try == 0 || errors.Is(err, redlock.ErrNotAcquired)); try++ {
					l, err = c.TryLock(ctxT(t, 10*time.Second), fmt.Sprintf("lock:order:%d", n), ttl, redlock.WithFencing())
				}
				if err != nil {
					errs <- fmt.Errorf("name %d: %w", n, err)
					return
				}
				first[n] = l.Fence()
				if err := l.Unlock(ctxT(t, 10*time.Second)); err != nil {
					errs <- fmt.Errorf("name %d: unlock: %w", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)

	// The counters expire a second after their write-back (FenceTTL of a
	// 300ms lock).
	limit := 2*16384 + 1
	for i, s := range e.nodes {
		require.Eventually(t, func() bool {
			n, err := redis.Int(s.Do("DBSIZE"))
			require.NoError(t, err)
			return n <= limit
		}, 20*time.Second, 100*time.Millisecond, "node %d keeps a key per name", i)
		n, err := redis.Int(s.Do("DBSIZE"))
		require.NoError(t, err)
		t.Logf("node %d: %d keys", i, n)
	}

	// Fences increase per name across the expiry of its counter.
	for n := 0; n < names; n += 997 {
		name := fmt.Sprintf("lock:order:%d", n)
		l, err := c.TryLock(ctxT(t, 10*time.Second), name, ttl, redlock.WithFencing())
		require.NoError(t, err)
		require.Greater(t, l.Fence(), first[n], "%s (slot %d)", name, keyslot.Slot(name))
		require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	}
}
