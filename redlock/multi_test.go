package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

func TestTryLockMulti_takesEveryKeyAndUnlockReleasesThemAll(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	l, err := c.TryLockMulti(ctx, []string{"b", "a", "b", "c"}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, l.Keys(), "sorted, repeats dropped")
	require.Equal(t, "a", l.Key())
	for _, k := range l.Keys() {
		waitHeld(t, nodes, k, l.Token())
	}
	_, err = c.TryLock(ctx, "b", time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired, "a single-key caller cannot take one of the keys")
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.NoError(t, l.Unlock(ctx))
	for _, k := range l.Keys() {
		waitHeldNone(t, nodes, k)
	}
}

// On a node where one key is held, the script takes none of them.
func TestTryLockMulti_isAllOrNoneOnEachNode(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	held, err := c.TryLock(ctx, "b", time.Minute)
	require.NoError(t, err)
	waitHeld(t, nodes, "b", held.Token())

	_, err = c.TryLockMulti(ctx, []string{"a", "b", "c"}, time.Minute)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.True(t, qe.Busy())
	require.Equal(t, "a,b,c", qe.Key)
	told := false
	for _, n := range qe.Nodes {
		if n.Status == NodeRefused {
			require.Equal(t, time.Minute, n.TTL, "the refusal tells the held key's TTL")
			told = true
		}
	}
	require.True(t, told)
	for _, n := range nodes {
		for _, k := range []string{"a", "c"} {
			_, ok := n.get(k)
			require.False(t, ok, "%s: %s was taken although b was held", n.Addr(), k)
		}
	}
}

// A round that won fewer nodes than a quorum releases the ones it won.
func TestTryLockMulti_aFailedRoundReleasesTheNodesItTook(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	nodes[0].set("b", "someone")
	nodes[1].set("b", "someone")
	_, err := c.TryLockMulti(ctx, []string{"a", "b"}, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	// The two refusals may decide the round before node 3 has run it:
	// its keys are released once it has.
	require.Eventually(t, func() bool { return nodes[2].count(callMulti) == 1 }, 5*time.Second, time.Millisecond)
	waitHeldNone(t, nodes, "a")
	waitHeldNone(t, nodes[2:], "b")

	// One node held: a quorum of the others grants.
	nodes[1].del("b")
	l, err := c.TryLockMulti(ctx, []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	v, _ := nodes[0].get("b")
	require.Equal(t, "someone", v, "another owner's key is never touched")
	require.NoError(t, l.Unlock(ctx))
	v, _ = nodes[0].get("b")
	require.Equal(t, "someone", v)
}

func TestExtendMulti_isAllOrNone(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	l, err := c.TryLockMulti(ctx, []string{"a", "b"}, time.Minute)
	require.NoError(t, err)
	waitHeld(t, nodes, "a", l.Token())
	for _, n := range nodes {
		n.del("b")
	}
	require.ErrorIs(t, l.Extend(ctx, 2*time.Minute), ErrLockLost)
	for _, n := range nodes {
		_, ok := n.get("b")
		require.False(t, ok, "an extension never re-creates a key")
	}
}

func TestTryLockMulti_fencesEveryKey(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	// Every quorum has a node with b's counter at 41: the write-back
	// makes b's fence larger, whichever nodes granted.
	nodes[0].set(wire.FenceKey("b"), "41")
	nodes[1].set(wire.FenceKey("b"), "41")
	var last []uint64
	for range 3 {
		l, err := c.TryLockMulti(ctx, []string{"a", "b"}, time.Minute, WithFencing())
		require.NoError(t, err)
		f := l.Fences()
		require.Len(t, f, 2)
		require.Equal(t, f[0], l.Fence())
		if last != nil {
			require.Greater(t, f[0], last[0])
			require.Greater(t, f[1], last[1])
		} else {
			require.Greater(t, f[1], uint64(41), "one more than the largest counter")
		}
		last = f
		require.NoError(t, l.Unlock(ctx))
		waitHeldNone(t, nodes, "a")
	}
}

func TestTryLockMulti_refusesBadKeys(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	ctx := context.Background()
	for _, keys := range [][]string{nil, {}, {"a", ""}} {
		_, err := c.TryLockMulti(ctx, keys, time.Minute)
		require.Error(t, err, "%q", keys)
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = strings.Repeat("k", i+1)
	}
	_, err := c.TryLockMulti(ctx, many, time.Minute)
	require.ErrorContains(t, err, "at most 64")
	_, err = c.LockMulti(ctx, nil, time.Minute)
	require.Error(t, err)
	require.Error(t, c.DoMulti(ctx, []string{"a", "b"}, time.Minute, nil))
}

// One distinct key is a plain lock.
func TestTryLockMulti_oneKeyIsTryLock(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	l, err := c.TryLockMulti(context.Background(), []string{"a", "a"}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, l.Keys())
	require.Equal(t, mutex{}, l.kind)
}

func TestTryLockMulti_namesTheHashTagOnACrossSlotRefusal(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	for _, n := range nodes {
		n.failWith(pool.ReplyError("CROSSSLOT Keys in request don't hash to the same slot"))
	}
	_, err := c.TryLockMulti(context.Background(), []string{"a", "b"}, time.Minute)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorContains(t, err, "common hash tag")
}

func TestObserver_seesAMultiKeyLockByItsKeys(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newFakeClient(t, 3, WithObserver(rec))
	l, err := c.TryLockMulti(context.Background(), []string{"b", "a"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	require.Equal(t, []Op{OpAcquire, OpUnlock}, rec.ops())
	require.Equal(t, "a,b", rec.rounds[0].Key)
	require.Equal(t, []EventKind{EventAcquired, EventReleased}, rec.kinds())
	require.Equal(t, "a,b", rec.events[1].Key)
}

// Lock and LockMulti pace their rounds by one policy: a round with nodes
// that answered with an error is no split vote, and waits as the retry
// strategy says.
func TestWaiting_aRoundWithFailedNodesWaitsAsTheRetryStrategySaysNotAsASplitVote(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       string
		kind, rel string // the acquisition's and the release's call kinds
		lock      func(c *Client, ctx context.Context) error
	}{
		{"Lock", "k", callSet, callRelease, func(c *Client, ctx context.Context) error {
			_, err := c.Lock(ctx, "k", ttl)
			return err
		}},
		{"LockMulti", "k1", callMulti, "script", func(c *Client, ctx context.Context) error {
			_, err := c.LockMulti(ctx, []string{"k1", "k2"}, ttl)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := make(signalRetry, 1) // 100ms between rounds
			c, nodes, clk := newFakeClient(t, 5, withPacer(asked))
			nodes[2].failWith(pool.ReplyError("READONLY You can't write against a read only replica."))
			for _, n := range nodes[3:] {
				n.set(tc.key, "foreign")
			}
			// Nodes 0 and 1 grant, 2 answers with an error, 3 refuses, and 4
			// refuses last: each round is decided with every reply read.
			step := stepRounds(t, nodes[4], nodes[:2], nodes[2:4], tc.kind, tc.rel, 2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.lock(c, ctx) }()
			step()
			// Two OK, one answered with an error, two refused: no quorum,
			// but not a split vote either. Two rounds fail before the first
			// sleep.
			require.Equal(t, 1, <-asked)
			require.True(t, clk.WaitTimers(1, nil)) // the call sleeps
			clk.Advance(50 * time.Millisecond)      // a split vote's wait (≤ 32ms) would be over
			select {
			case n := <-asked:
				t.Fatalf("asked again (failure %d) after 50ms, before the strategy's 100ms", n)
			case <-time.After(50 * time.Millisecond):
			}
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
		})
	}
}
