package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	waitHeldNone(t, nodes, "a")

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
	nodes[0].set(fenceKey("b"), "41")
	nodes[1].set(fenceKey("b"), "41")
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
	require.Nil(t, l.keys)
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
	require.Equal(t, []Op{opAcquire, opUnlock}, rec.ops())
	require.Equal(t, "a,b", rec.rounds[0].Key)
	require.Equal(t, []EventKind{EventAcquired, EventReleased}, rec.kinds())
	require.Equal(t, "a,b", rec.events[1].Key)
}
