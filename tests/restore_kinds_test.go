package tests

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// restoreCase is one kind of lock for the Restore round trip: how the
// original is taken, how a third Client waits for what it holds, and how
// long the lock has left on a quorum (by the kind's Inspect).
type restoreCase struct {
	kind redlock.LockKind
	take func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error)
	// wait blocks until c holds what the lock held (and releases it).
	wait func(ctx context.Context, c *redlock.Client, name string) error
	// left is the TTL the lock has on a quorum; 0 when no one holds it.
	left func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error)
}

const restoreTTL = 20 * time.Second

var restoreCases = map[string]restoreCase{
	"mutex": {
		kind: redlock.KindMutex,
		take: func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error) {
			return c.TryLock(ctx, name, restoreTTL, redlock.WithFencing())
		},
		wait: func(ctx context.Context, c *redlock.Client, name string) error {
			return c.Do(ctx, name, restoreTTL, func(context.Context) error { return nil })
		},
		left: func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error) {
			in, err := c.Inspect(ctx, name)
			return holdersTTL(in, err, func(in *redlock.Inspection) []redlock.Hold { return in.Holders() })
		},
	},
	"multi": {
		kind: redlock.KindMulti,
		take: func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error) {
			return c.TryLockMulti(ctx, []string{name + ":b", name + ":a"}, restoreTTL, redlock.WithFencing())
		},
		wait: func(ctx context.Context, c *redlock.Client, name string) error {
			// A waiter on one of the keys, and then the other key at once.
			if err := c.Do(ctx, name+":b", restoreTTL, func(context.Context) error { return nil }); err != nil {
				return err
			}
			l, err := c.TryLock(ctx, name+":a", restoreTTL)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		},
		left: func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error) {
			var least time.Duration
			for _, k := range []string{name + ":a", name + ":b"} {
				in, err := c.Inspect(ctx, k)
				d, err := holdersTTL(in, err, func(in *redlock.Inspection) []redlock.Hold { return in.Holders() })
				if err != nil || d == 0 {
					return 0, err
				}
				if least == 0 || d < least {
					least = d
				}
			}
			return least, nil
		},
	},
	"semaphore permit": {
		kind: redlock.KindSemaphore,
		take: func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error) {
			return c.Semaphore(name, 1).TryAcquire(ctx, restoreTTL, redlock.WithFencing())
		},
		wait: func(ctx context.Context, c *redlock.Client, name string) error {
			return c.Semaphore(name, 1).Do(ctx, restoreTTL, func(context.Context) error { return nil })
		},
		left: func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error) {
			in, err := c.Semaphore(name, 1).Inspect(ctx)
			return holdersTTL(in, err, func(in *redlock.SemaphoreInspection) []redlock.Hold { return in.Holders() })
		},
	},
	"read hold": {
		kind: redlock.KindRWRead,
		take: func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error) {
			return c.RWLock(name).TryRLock(ctx, restoreTTL)
		},
		wait: func(ctx context.Context, c *redlock.Client, name string) error {
			return c.RWLock(name).Do(ctx, restoreTTL, func(context.Context) error { return nil })
		},
		left: func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error) {
			in, err := c.RWLock(name).Inspect(ctx)
			return holdersTTL(in, err, func(in *redlock.RWInspection) []redlock.Hold { return in.Holders() })
		},
	},
	"write hold": {
		kind: redlock.KindRWWrite,
		take: func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error) {
			return c.RWLock(name).TryLock(ctx, restoreTTL)
		},
		wait: func(ctx context.Context, c *redlock.Client, name string) error {
			if err := c.RWLock(name).RDo(ctx, restoreTTL, func(context.Context) error { return nil }); err != nil {
				return err
			}
			// The name's marker went with the writer: a mutex on the
			// name is refused as busy or taken, never as a read-write
			// lock's name.
			l, err := c.TryLock(ctx, name, restoreTTL)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		},
		left: func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error) {
			in, err := c.RWLock(name).Inspect(ctx)
			return holdersTTL(in, err, func(in *redlock.RWInspection) []redlock.Hold { return in.Holders() })
		},
	},
	"leadership": {
		kind: redlock.KindElection,
		take: func(ctx context.Context, c *redlock.Client, name string) (*redlock.Lock, error) {
			// Its own extensions come too late to matter here.
			return c.Election(name).Campaign(ctx, "first", restoreTTL, redlock.WithAutoExtend(restoreTTL*3/4))
		},
		wait: func(ctx context.Context, c *redlock.Client, name string) error {
			l, err := c.Election(name).Campaign(ctx, "second", restoreTTL)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		},
		left: func(ctx context.Context, c *redlock.Client, name string) (time.Duration, error) {
			in, err := c.Election(name).Inspect(ctx)
			return holdersTTL(in, err, func(in *redlock.ElectionInspection) []redlock.Hold { return in.Holders() })
		},
	},
}

// holdersTTL is the least TTL of the holds an inspection names on a
// quorum; 0 for none.
func holdersTTL[T any](in T, err error, holders func(T) []redlock.Hold) (time.Duration, error) {
	if err != nil {
		return 0, err
	}
	var least time.Duration
	for _, h := range holders(in) {
		if least == 0 || h.TTL < least {
			least = h.TTL
		}
	}
	return least, nil
}

// A lock of every kind, restored on another Client from its Handle (passed
// as JSON), extends as the original (its TTL moves on a quorum) and
// releases as the original: the Client that waits for what it holds gets
// it at once, long before the TTL would have freed it.
func TestRestoreHandle_everyKindExtendsAndReleasesAsTheOriginal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	for name, tc := range restoreCases {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			// The waiter's back-off is longer than its wait may take: it
			// gets the lock in time only when the release wakes it.
			owner, heir, waiter := e.client(), e.client(), e.client(redlock.WithRetry(10*time.Second, 10*time.Second))
			lname := newKey(t)
			l, err := tc.take(ctx, owner, lname)
			require.NoError(t, err)

			b, err := json.Marshal(l.Handle())
			require.NoError(t, err)
			var h redlock.Handle
			require.NoError(t, json.Unmarshal(b, &h))
			require.Equal(t, tc.kind, h.Kind, "%s", b)
			r, err := heir.RestoreHandle(h)
			require.NoError(t, err)
			require.Equal(t, l.Key(), r.Key())
			require.Equal(t, l.Keys(), r.Keys())
			require.Equal(t, l.Token(), r.Token())
			require.Equal(t, l.Fences(), r.Fences())
			require.Equal(t, l.Fence(), r.Fence())
			require.Zero(t, r.Validity(), "a restored lock's validity is unknown until it extends")

			require.NoError(t, r.Extend(ctx, 3*restoreTTL))
			require.Greater(t, r.Validity(), 2*restoreTTL)
			// Nodes past the quorum may answer after Extend returned:
			// every node has the new TTL soon after.
			require.Eventually(t, func() bool {
				left, err := tc.left(ctx, heir, lname)
				return err == nil && left > 2*restoreTTL
			}, 5*time.Second, 20*time.Millisecond, "the extension reached every node that holds the lock's keys")

			waited := make(chan error, 1)
			wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			defer cancel()
			go func() { waited <- tc.wait(wctx, waiter, lname) }()
			select {
			case err := <-waited:
				t.Fatalf("the waiter did not wait for the held lock: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			require.NoError(t, r.Unlock(ctx))
			// Well before the TTL and the back-off: the release freed
			// what the lock held and woke the waiter.
			require.NoError(t, <-waited)
			left, err := tc.left(ctx, heir, lname)
			require.NoError(t, err)
			require.Zero(t, left, "nothing is held once the waiter released")
			require.ErrorIs(t, l.Extend(ctx, restoreTTL), redlock.ErrLockLost, "the original handle's lock is gone")
		})
	}
}

// A restored leadership's extension writes the leader record back where
// it is missing, as the leader's own extensions do: Leader names the
// restored leader with its value and term.
func TestRestoreHandle_leadershipRepairsTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	ctx := ctxT(t, 30*time.Second)
	owner, heir := e.client(), e.client()
	name := newKey(t)
	el := owner.Election(name)
	l, err := el.Campaign(ctx, "leader-1", restoreTTL, redlock.WithAutoExtend(restoreTTL*3/4))
	require.NoError(t, err)
	r, err := heir.RestoreHandle(l.Handle())
	require.NoError(t, err)
	for _, i := range []int{0, 1, 2} {
		conn := dialNode(t, e.nodes[i])
		_, err := conn.Do("DEL", wire.LeaderKey(name))
		require.NoError(t, err)
	}
	// (Leader would repair the record itself: it is asked only after.)
	require.NoError(t, r.Extend(ctx, restoreTTL))
	require.Eventually(t, func() bool {
		for _, i := range []int{0, 1, 2} {
			n, err := redis.Int(dialNode(t, e.nodes[i]).Do("EXISTS", wire.LeaderKey(name)))
			if err != nil || n != 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "the extension wrote the record back on every node")
	who, err := heir.Election(name).Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, redlock.Leader{Value: "leader-1", Term: l.Fence(), ClientID: owner.ID()}, who)
	require.NoError(t, r.Unlock(ctx))
}

// A handle that is no lock's is refused before any node is asked, with an
// error that says what is wrong.
func TestRestoreHandle_refusesHandlesOfNoLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	c := e.client()
	for name, tc := range map[string]struct {
		h    redlock.Handle
		want string
	}{
		"no kind":              {redlock.Handle{Keys: []string{"k"}, Token: "t"}, "not a kind of lock"},
		"unknown kind":         {redlock.Handle{Kind: 99, Keys: []string{"k"}, Token: "t"}, "not a kind of lock"},
		"no token":             {redlock.Handle{Kind: redlock.KindMutex, Keys: []string{"k"}}, "without a token"},
		"mutex without key":    {redlock.Handle{Kind: redlock.KindMutex, Token: "t"}, "one key"},
		"multi with one key":   {redlock.Handle{Kind: redlock.KindMulti, Keys: []string{"a"}, Token: "t"}, "two or more"},
		"multi unsorted":       {redlock.Handle{Kind: redlock.KindMulti, Keys: []string{"b", "a"}, Token: "t"}, "sorted"},
		"permit of no slot":    {redlock.Handle{Kind: redlock.KindSemaphore, Name: "s", Permits: 2, Keys: []string{"s"}, Token: "t"}, "not one of the semaphore's 2 slots"},
		"permit, bad permits":  {redlock.Handle{Kind: redlock.KindSemaphore, Name: "s", Keys: []string{"s"}, Token: "t"}, "0 permits"},
		"read hold, no name":   {redlock.Handle{Kind: redlock.KindRWRead, Keys: []string{"k"}, Token: "t"}, "empty name"},
		"leader value no term": {redlock.Handle{Kind: redlock.KindElection, Name: "e", Keys: []string{"k"}, Token: "t", Value: "v"}, "needs its term"},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := c.RestoreHandle(tc.h)
			require.Nil(t, l)
			require.ErrorContains(t, err, tc.want)
		})
	}
	var k redlock.LockKind
	require.Error(t, json.Unmarshal([]byte(`"latch"`), &k))
	require.True(t, errors.Is(redlock.ErrClosed, redlock.ErrClosed))
}
