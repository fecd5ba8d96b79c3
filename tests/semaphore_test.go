package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// naiveAdmit is the per-node counting semaphore that is unsafe on a
// quorum: each node admits at most KEYS[1]'s limit of holders, and a
// holder needs a majority of nodes. Kept here to show that it over-admits.
var naiveAdmit = redis.NewScript(1, `
if redis.call("SCARD", KEYS[1]) < tonumber(ARGV[2]) then
	redis.call("SADD", KEYS[1], ARGV[1])
	return 1
end
return 0`)

// arrivals is the order in which three clients' requests reach five nodes
// with no fault at all: nodes 1-2 see A, C, B; node 3 A, B, C; node 4 B,
// C, A; node 5 B, A, C.
var arrivals = [5][3]string{{"A", "C", "B"}, {"A", "C", "B"}, {"A", "B", "C"}, {"B", "C", "A"}, {"B", "A", "C"}}

// A two-permit semaphore that counts holders per node admits three
// holders on a quorum each; the slot semaphore, asked in the same order,
// admits two.
func TestSemaphore_countingPerNodeOverAdmitsAndSlotsDoNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	conns := make([]redis.Conn, 5)
	for i, s := range e.nodes {
		conns[i] = dialNode(t, s)
	}

	granted := map[string]int{}
	for i, order := range arrivals {
		for _, who := range order {
			n, err := redis.Int(naiveAdmit.Do(conns[i], name+":naive", who, 2))
			require.NoError(t, err)
			granted[who] += n
		}
	}
	holders := 0
	for _, n := range granted {
		if n >= 3 {
			holders++
		}
	}
	require.Equal(t, 3, holders, "the per-node count admits three holders of two permits: %v", granted)

	sem := redis.NewScript(-1, wire.SemAcquire.Source())
	keys := wire.SemKeys(name, 2, false)
	slots := map[string]map[int]int{"A": {}, "B": {}, "C": {}} // client -> slot -> nodes
	for i, order := range arrivals {
		for _, who := range order {
			reply, err := sem.Do(conns[i], wire.SemAcquireArgs(keys, 2, who, 60_000, -1, wire.Wait{}, "")...)
			require.NoError(t, err)
			if p, ok := wire.ParsePermit(reply); ok && p.Code == wire.CodeAcquired {
				slots[who][p.Slot]++
			}
		}
	}
	holders = 0
	for _, bySlot := range slots {
		for _, n := range bySlot {
			if n >= 3 {
				holders++
			}
		}
	}
	require.Equal(t, 2, holders, "the slot semaphore admits at most its permits: %v", slots)
}

// Workers on Clients of their own share a semaphore of two permits: never
// more than two inside at once, and both permits are used.
func TestSemaphore_neverMoreHoldersThanPermits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	most := hammerSemaphore(t, e, 6, 2, 2*time.Second, nil)
	require.Equal(t, int32(2), most, "both permits were held at once")
}

// The same while one node after another is killed and restarted with its
// data, or paused.
func TestSemaphore_neverMoreHoldersThanPermitsWhileNodesFail(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	hammerSemaphore(t, e, 6, 2, 3*time.Second, failNodesInTurn(e), redlock.WithDurableNodes())
}

// hammerSemaphore runs workers on a semaphore of permits for d, under the
// faults that endFaults ends (nil: none), and fails the test if more than
// permits were ever inside at once, if Acquire or Unlock failed for any
// other reason than the end of d (or, under faults, an Unlock that found
// fewer than a quorum), or if, once the faults ended, a worker did not
// get a permit again (hammer). It returns the most inside at once.
func hammerSemaphore(t *testing.T, e *env, workers, permits int, d time.Duration, endFaults func() error, opts ...redlock.Option) int32 {
	t.Helper()
	name := newKey(t)
	lost := endFaults != nil
	var inside, most atomic.Int32
	var took atomic.Int64
	hammer(t, workers, d, endFaults, func(int) func(context.Context) error {
		s := newClient(t, newPools(t, e.addrs), opts...).Semaphore(name, permits)
		return func(ctx context.Context) error {
			l, err := s.Acquire(ctx, 5*time.Second)
			if err != nil {
				return err
			}
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(500 * time.Microsecond)
			inside.Add(-1)
			took.Add(1)
			return unlockOrLost(ctx, l, lost)
		}
	})
	require.LessOrEqual(t, most.Load(), int32(permits), "more holders than permits")
	// Each worker took a permit once more after the run.
	run := took.Load() - int64(workers)
	if !lost { // with nodes failing in turn, a busy machine may go slowly
		require.Greater(t, run, int64(workers), "the permits went round")
	}
	require.Positive(t, run, "permits were taken")
	t.Logf("%d acquisitions, at most %d inside at once", run, most.Load())
	return most.Load()
}

// awaitQueued waits until the queue of semaphore name holds n waiters on
// every node.
func awaitQueued(t *testing.T, e *env, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i, s := range e.nodes {
		for {
			got, err := redis.Int(s.Do("ZCARD", wire.PermitWaitersKey(name)))
			require.NoError(t, err)
			if got == n {
				break
			}
			require.True(t, time.Now().Before(deadline), "node %d queues %d waiters, want %d", i, got, n)
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// A freed permit goes to the longest waiter: while callers wait, a
// TryAcquire after a release is refused, and the waiters are served in
// the order they began to wait.
func TestSemaphore_aFreedPermitGoesToTheLongestWaiter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	s := e.client().Semaphore(name, 1)
	held, err := s.TryAcquire(ctx, 10*time.Second)
	require.NoError(t, err)
	type hold struct {
		who int
		l   *redlock.Lock
	}
	got := make(chan hold, 2)
	for who := 1; who <= 2; who++ {
		w := e.client().Semaphore(name, 1)
		go func() {
			l, err := w.Acquire(ctx, 10*time.Second)
			assert.NoError(t, err, "waiter %d", who)
			got <- hold{who, l}
		}()
		awaitQueued(t, e, name, who)
	}
	require.NoError(t, held.Unlock(ctx))
	_, err = s.TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a newcomer took the permit of a waiter")
	first := <-got
	require.Equal(t, 1, first.who, "the first waiter is served first")
	require.NotNil(t, first.l)
	require.NoError(t, first.l.Unlock(ctx))
	second := <-got
	require.Equal(t, 2, second.who)
	require.NotNil(t, second.l)
	require.NoError(t, second.l.Unlock(ctx))
	awaitQueued(t, e, name, 0)
}

// A waiter that gives up leaves the queues at once: a free permit is not
// kept for it.
func TestSemaphore_aWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	s := e.client().Semaphore(name, 1)
	held, err := s.TryAcquire(ctx, 10*time.Second)
	require.NoError(t, err)
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.client().Semaphore(name, 1).Acquire(waitCtx, 10*time.Second)
		done <- err
	}()
	awaitQueued(t, e, name, 1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	awaitQueued(t, e, name, 0)
	require.NoError(t, held.Unlock(ctx))
	l, err := s.TryAcquire(ctx, time.Second)
	require.NoError(t, err, "the permit was kept for a waiter that left")
	require.NoError(t, l.Unlock(ctx))
}

// Fenced permits: a fenced store refuses the write of a permit's earlier
// holder once the slot's next holder wrote.
func TestSemaphore_fencedPermitsIncreasePerSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 10*time.Second)
	s := e.client().Semaphore(name, 1)
	var last uint64
	for range 3 {
		l, err := s.TryAcquire(ctx, 5*time.Second, redlock.WithFencing())
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last)
		last = l.Fence()
		require.NoError(t, l.Unlock(ctx))
	}
}

// The same while two of five nodes are killed mid-run: the other three
// grant every permit.
func TestSemaphore_neverMoreHoldersThanPermitsWhileTwoOfFiveNodesDie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	hammerSemaphore(t, e, 6, 2, 3*time.Second, killTwoMidRun(e, time.Second))
}

// Acquire against a quorum of nodes that keep another number of permits
// fails at once with the error that names both numbers, as TryAcquire
// does: waiting cannot change them. Fewer such nodes than a quorum leave
// the others to grant.
func TestSemaphore_acquireFailsAtOnceWhenAQuorumKeepsAnotherSize(t *testing.T) {
	e := newEnv(t, 5)
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct {
		name  string
		nodes []int // the nodes that keep 3 permits
		fails bool
	}{
		{"quorum", []int{0, 2, 4}, true},
		{"minority", []int{1, 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := newKey(t)
			for _, i := range tc.nodes {
				_, err := e.nodes[i].Do("SET", wire.PermitsKey(name), 3)
				require.NoError(t, err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := e.client().Semaphore(name, 1).Acquire(waitCtx, 10*time.Second)
			if !tc.fails {
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
				return
			}
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "it waited for the context")
			require.ErrorContains(t, err, "has 3 permits on this node, but this Client gives it 1")
			require.ErrorContains(t, err, e.addrs[tc.nodes[0]], "the node is named")
		})
	}
}
