package tests

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
)

// Readers and writers on Clients of their own: never a writer together
// with anyone, readers do overlap, and writers get in while readers keep
// coming.
func TestRWLock_writersExcludeReadersShareAndWritersAreNotStarved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	a, err := e.client().RWLock(name).TryRLock(ctxT(t, quickly), longTTL)
	require.NoError(t, err)
	b, err := e.client().RWLock(name).TryRLock(ctxT(t, quickly), longTTL)
	require.NoError(t, err, "a second Client's reader shares the lock")
	require.NoError(t, a.Unlock(ctxT(t, quickly)))
	require.NoError(t, b.Unlock(ctxT(t, quickly)))

	st := hammerRW(t, e, 6, 2, 3*time.Second, nil)
	require.Positive(t, st.writes.Load(), "writers got in while readers kept coming")
}

// The same while one node after another is killed and restarted with its
// data, or paused.
func TestRWLock_exclusionHoldsWhileNodesFail(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	hammerRW(t, e, 4, 2, 3*time.Second, failNodesInTurn(e), redlock.WithDurableNodes())
}

// rwStats is what hammerRW saw during its run (the turns after it, which
// show progress, are not counted in reads and writes).
type rwStats struct {
	readers, writers, mostReaders atomic.Int32
	reads, writes                 atomic.Int64
}

// hammerRW runs readers and writers (each on a Client of its own) on one
// read-write lock for d, under the faults that endFaults ends (nil: none),
// and fails the test if a writer was ever inside with anyone, if a call
// failed for any other reason than the end of d (or, under faults, an
// Unlock that found fewer than a quorum), or if, once the faults ended,
// a reader or a writer did not get in again (hammer).
func hammerRW(t *testing.T, e *env, readers, writers int, d time.Duration, endFaults func() error, opts ...redlock.Option) *rwStats {
	t.Helper()
	name := newKey(t)
	st := &rwStats{}
	lost := endFaults != nil
	hammer(t, readers+writers, d, endFaults, func(w int) func(context.Context) error {
		rw := newClient(t, newPools(t, e.addrs), opts...).RWLock(name)
		return func(ctx context.Context) error { return rwTurn(ctx, rw, w < readers, st, lost) }
	})
	// What the run did: each worker got in once more after it.
	st.reads.Add(-int64(readers))
	st.writes.Add(-int64(writers))
	t.Logf("%d reads (at most %d at once), %d writes", st.reads.Load(), st.mostReaders.Load(), st.writes.Load())
	return st
}

// errBothInside reports a writer inside with someone else.
var errBothInside = errors.New("a writer was inside with someone else")

// rwTurn takes the lock once, as a reader or the writer, notes who is
// inside, and releases it.
func rwTurn(ctx context.Context, rw *redlock.RWLock, reader bool, st *rwStats, lost bool) error {
	take, in, count := rw.Lock, &st.writers, &st.writes
	if reader {
		take, in, count = rw.RLock, &st.readers, &st.reads
	}
	l, err := take(ctx, 5*time.Second)
	if err != nil {
		return err
	}
	n := in.Add(1)
	if reader {
		for m := st.mostReaders.Load(); n > m && !st.mostReaders.CompareAndSwap(m, n); m = st.mostReaders.Load() {
		}
	}
	if st.writers.Load() > 0 && (!reader && (n > 1 || st.readers.Load() > 0) || reader) {
		in.Add(-1)
		return errBothInside
	}
	time.Sleep(time.Millisecond)
	if st.writers.Load() > 0 && (!reader && (st.writers.Load() > 1 || st.readers.Load() > 0) || reader) {
		in.Add(-1)
		return errBothInside
	}
	in.Add(-1)
	count.Add(1)
	return unlockOrLost(ctx, l, lost)
}

// A name is one kind of lock, on real nodes too: while a reader holds
// the read-write lock, a mutex call on its name fails with an error that
// says why, and once the reader is gone the name is free.
func TestRWLock_aMutexCallOnAHeldNameIsAClearError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	c := e.client()
	ctx := ctxT(t, 10*time.Second)
	r, err := c.RWLock(name).TryRLock(ctx, longTTL)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, name, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorContains(t, err, "held as a read-write lock")
	_, err = c.TryLock(ctx, name, time.Second, redlock.WithFencing())
	require.ErrorContains(t, err, "held as a read-write lock")
	require.NoError(t, r.Unlock(ctx))
	m, err := c.TryLock(ctx, name, time.Second)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(ctx))
}

// The same while two of five nodes are killed mid-run.
func TestRWLock_exclusionHoldsWhileTwoOfFiveNodesDie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	hammerRW(t, e, 4, 2, 3*time.Second, killTwoMidRun(e, time.Second))
}
