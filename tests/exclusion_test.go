package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Workers on Clients of their own take one key in turn, through queues,
// hand-offs, splits and refusals, and note when they are inside: never two
// at once. The holds are short, so that hand-offs follow each other fast.
// Half the Clients use redigo pools, whose several connections per node can
// run one waiter's rounds out of order.
func TestLock_handOffsKeepMutualExclusion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	took := hammerExclusion(t, e, 6, 2*time.Second, nil)
	t.Logf("%d acquisitions", took)
}

// The same while one node after another is killed and restarted with its
// data (AOF, fsync always, as the algorithm requires) or paused.
func TestLock_handOffsKeepMutualExclusionWhileNodesFail(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	// An Unlock that cannot reach a node holding the lock (killed) may
	// find fewer than a quorum to release: ErrLockLost, expected here.
	// The nodes keep every write: declared durable, a node that restarted
	// counts at once.
	took := hammerExclusion(t, e, 6, 3*time.Second, failNodesInTurn(e), redlock.WithDurableNodes())
	t.Logf("%d acquisitions with a node down or paused most of the time", took)
}

// hammerExclusion runs workers on one key for d, under the faults that
// endFaults ends (nil: none), and fails the test if two of them were ever
// inside at once, if Lock or Unlock failed for any other reason than the
// end of d (or, under faults, an Unlock that found fewer than a quorum to
// release), or if a worker did not get the key again once the faults
// ended (hammer). It returns the number of acquisitions in the run.
func hammerExclusion(t *testing.T, e *env, workers int, d time.Duration, endFaults func() error, opts ...redlock.Option) int64 {
	t.Helper()
	key := newKey(t)
	lost := endFaults != nil
	var inside, most atomic.Int32
	var took atomic.Int64
	hammer(t, workers, d, endFaults, func(w int) func(context.Context) error {
		var pools []pool.Pool
		if w%2 == 0 {
			pools = newPools(t, e.addrs)
		} else {
			pools = redigoPools(t, e.addrs)
		}
		c := newClient(t, pools, opts...)
		return func(ctx context.Context) error {
			l, err := c.Lock(ctx, key, 5*time.Second)
			if err != nil {
				return err
			}
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(200 * time.Microsecond)
			inside.Add(-1)
			took.Add(1)
			return unlockOrLost(ctx, l, lost)
		}
	})
	require.Equal(t, int32(1), most.Load(), "two holders at once")
	run := took.Load() - int64(workers) // each worker took it once more after the run
	require.Greater(t, run, int64(workers), "the key went round")
	return run
}
