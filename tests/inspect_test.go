package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// On real nodes: Inspect sees a lock, its holder, its TTL and its queue;
// ForceRelease hands the key to the waiting Lock call, and the holder
// learns of the loss at its next extension.
func TestForceRelease_handsTheKeyToTheWaiterAndInspectSeesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	holder, waiter, operator := e.client(), e.client(), e.client()
	held, err := holder.TryLock(ctxT(t, quickly), key, longTTL, redlock.WithFencing())
	require.NoError(t, err)

	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctxT(t, 10*time.Second), key, longTTL)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var in *redlock.Inspection
	require.Eventually(t, func() bool {
		in, err = operator.Inspect(ctxT(t, quickly), key)
		require.NoError(t, err)
		queued, settled := 0, 0
		for _, n := range in.Nodes {
			queued += n.Queued
			if n.Held && n.Fence == held.Fence() {
				settled++ // the acquisition and its fence reached this node too
			}
		}
		return queued >= 5 && settled == 5
	}, 5*time.Second, 5*time.Millisecond, "the waiter is queued on every node, and the holder's round settled")
	who := in.Holders()
	require.Len(t, who, 1)
	require.Equal(t, holder.ID(), who[0].Holder)
	for _, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.True(t, n.Held, n.Addr)
		require.NotEqual(t, operator.ID(), n.Holder, "the operator's Client is not the holder")
		require.Greater(t, n.TTL, longTTL-5*time.Second)
		require.LessOrEqual(t, n.TTL, longTTL)
		require.Equal(t, held.Fence(), n.Fence)
	}

	require.NoError(t, operator.ForceRelease(ctxT(t, quickly), key))
	l := <-got
	require.NotNil(t, l, "the waiter got the key")
	in, err = waiter.Inspect(ctxT(t, quickly), key)
	require.NoError(t, err)
	who = in.Holders()
	require.Len(t, who, 1)
	require.Equal(t, waiter.ID(), who[0].Holder)
	mine := 0
	for _, n := range in.Nodes {
		if n.Holder == waiter.ID() {
			mine++
		}
	}
	require.GreaterOrEqual(t, mine, 3)

	require.ErrorIs(t, held.Extend(ctxT(t, quickly), longTTL), redlock.ErrLockLost)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
}

// On real nodes: a semaphore's inspection names the permits in use and
// their holders on every node, and the node's size.
func TestSemaphoreInspect_namesThePermitsInUse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	a, b, operator := e.client(), e.client(), e.client()
	pa, err := a.Semaphore(name, 3).TryAcquire(ctxT(t, quickly), longTTL)
	require.NoError(t, err)
	pb, err := b.Semaphore(name, 3).TryAcquire(ctxT(t, quickly), longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, pa.Key(), pa.Token())
	awaitToken(t, e.nodes, pb.Key(), pb.Token())

	in, err := operator.Semaphore(name, 3).Inspect(ctxT(t, quickly))
	require.NoError(t, err)
	used := in.Holders()
	require.Len(t, used, 2)
	require.ElementsMatch(t, []string{a.ID(), b.ID()}, []string{used[0].Holder, used[1].Holder})
	for _, p := range used {
		require.Greater(t, p.TTL, longTTL-5*time.Second)
		require.LessOrEqual(t, p.TTL, longTTL)
	}
	for _, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.Equal(t, 3, n.Size)
		require.Len(t, n.Permits, 2, n.Addr)
	}

	require.NoError(t, pa.Unlock(ctxT(t, quickly)))
	in, err = operator.Semaphore(name, 3).Inspect(ctxT(t, quickly))
	require.NoError(t, err)
	used = in.Holders()
	require.Len(t, used, 1)
	require.Equal(t, b.ID(), used[0].Holder)
	require.NoError(t, pb.Unlock(ctxT(t, quickly)))
}

// On real nodes: a read-write lock's inspection shows a reader, the
// intent of a writer that waits for it, then the writer.
func TestRWLockInspect_showsReadersAWaitingWriterAndTheWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	reader, writer, operator := e.client(), e.client(), e.client()
	r, err := reader.RWLock(name).TryRLock(ctxT(t, quickly), longTTL)
	require.NoError(t, err)
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := writer.RWLock(name).Lock(ctxT(t, 10*time.Second), longTTL)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var in *redlock.RWInspection
	require.Eventually(t, func() bool {
		in, err = operator.RWLock(name).Inspect(ctxT(t, quickly))
		require.NoError(t, err)
		intents := 0
		for _, n := range in.Nodes {
			if n.Intent != nil && n.Intent.Holder == writer.ID() {
				intents++
			}
		}
		return intents == 5
	}, 5*time.Second, 5*time.Millisecond, "the waiting writer's intent is on every node")
	mode, holds := in.Mode(), in.Holders()
	require.Equal(t, redlock.RWRead, mode)
	require.Len(t, holds, 1)
	require.Equal(t, reader.ID(), holds[0].Holder)

	require.NoError(t, r.Unlock(ctxT(t, quickly)))
	w := <-got
	require.NotNil(t, w)
	in, err = operator.RWLock(name).Inspect(ctxT(t, quickly))
	require.NoError(t, err)
	mode, holds = in.Mode(), in.Holders()
	require.Equal(t, redlock.RWWrite, mode)
	require.Equal(t, writer.ID(), holds[0].Holder)
	require.NoError(t, w.Unlock(ctxT(t, quickly)))
}

// On real nodes: an election's inspection names the leader, its term and
// TTL, as Leader does, and the campaign that waits.
func TestElectionInspect_namesTheLeaderAndTheWaitingCampaign(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	leader, rival, operator := e.client(), e.client(), e.client()
	l, err := leader.Election(name).Campaign(ctxT(t, quickly), "first", longTTL)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctxT(t, 10*time.Second))
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = rival.Election(name).Campaign(ctx, "second", longTTL)
	}()
	var in *redlock.ElectionInspection
	require.Eventually(t, func() bool {
		in, err = operator.Election(name).Inspect(ctxT(t, quickly))
		require.NoError(t, err)
		queued := 0
		for _, n := range in.Nodes {
			queued += n.Queued
		}
		return queued >= 3
	}, 5*time.Second, 5*time.Millisecond, "the rival's campaign is queued")
	got, ttl, ok := in.Leader()
	require.True(t, ok)
	require.Equal(t, redlock.Leader{Value: "first", Term: l.Fence(), ClientID: leader.ID()}, got)
	require.Greater(t, ttl, longTTL-5*time.Second)
	want, err := operator.Election(name).Leader(ctxT(t, quickly))
	require.NoError(t, err)
	require.Equal(t, want, got, "as Leader says")
	cancel()
	<-done
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
}
