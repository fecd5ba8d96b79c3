package tests

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// recorder is an Observer that keeps copies of what it is told.
type recorder struct {
	mu     sync.Mutex
	rounds []redlock.RoundInfo
	events []redlock.Event
}

func (r *recorder) Round(info *redlock.RoundInfo) {
	cp := *info
	cp.Nodes = append([]redlock.NodeResult(nil), info.Nodes...)
	r.mu.Lock()
	r.rounds = append(r.rounds, cp)
	r.mu.Unlock()
}

func (r *recorder) Event(e redlock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// event returns the first event of kind k, and whether there is one.
func (r *recorder) event(k redlock.EventKind) (redlock.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == k {
			return e, true
		}
	}
	return redlock.Event{}, false
}

// round returns the first round of op o, and whether there is one.
func (r *recorder) round(o redlock.Op) (redlock.RoundInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, info := range r.rounds {
		if info.Op == o {
			return info, true
		}
	}
	return redlock.RoundInfo{}, false
}

// On real nodes: a holder's rounds carry each node's latency; a waiter
// that gets the key by hand-offs reports a "handoff" round, and every
// waiter its wait. The first holder took the key with TryLock, so its
// release frees the key (release_free.lua) and the first waiter takes it
// (with a round, or handed to it by the second's); that waiter's release
// hands the key to the second.
func TestObserver_aHolderAndTwoWaitersOnRealNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	holderRec := &recorder{}
	holder := e.client(redlock.WithObserver(holderRec))
	held, err := holder.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)

	recs := []*recorder{{}, {}}
	var wg sync.WaitGroup
	for _, rec := range recs {
		c := e.client(redlock.WithObserver(rec))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctxT(t, 10*time.Second), key, longTTL)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(50 * time.Millisecond)
			if err := l.Unlock(ctxT(t, quickly)); err != nil {
				t.Error(err)
			}
		}()
		// Each waiter is refused and queued before the next one begins.
		require.Eventually(t, func() bool { _, ok := rec.round("acquire"); return ok }, 5*time.Second, time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	wg.Wait()

	acq, ok := holderRec.round("acquire")
	require.True(t, ok)
	require.True(t, acq.Won)
	require.Positive(t, acq.Duration)
	require.Greater(t, acq.Validity, longTTL-acq.Drift-time.Second)
	measured := 0
	for _, n := range acq.Nodes {
		if n.Status == redlock.NodeOK {
			require.Positive(t, n.Latency, "%s", n.Addr)
			require.LessOrEqual(t, n.Latency, acq.Duration)
			measured++
		}
	}
	require.GreaterOrEqual(t, measured, 3)
	released, ok := holderRec.event(redlock.EventReleased)
	require.True(t, ok)
	require.GreaterOrEqual(t, released.Duration, 50*time.Millisecond)

	handoffs := 0
	for i, rec := range recs {
		refused, _ := rec.round("acquire")
		require.False(t, refused.Won, "waiter %d", i)
		acquired, ok := rec.event(redlock.EventAcquired)
		require.True(t, ok, "waiter %d", i)
		require.GreaterOrEqual(t, acquired.Wait, 50*time.Millisecond, "waiter %d", i)
		require.Less(t, acquired.Wait, acquired.Duration, "waiter %d: the wait counts from the first refusal", i)
		handoff, ok := rec.round("handoff")
		if !ok {
			continue
		}
		handoffs++
		require.True(t, handoff.Won)
		require.Positive(t, handoff.Validity)
		oks := 0
		for _, n := range handoff.Nodes {
			if n.Status == redlock.NodeOK {
				oks++
			}
		}
		require.GreaterOrEqual(t, oks, 3)
	}
	// The second waiter holds the key by hand-offs when a quorum's
	// announcements reach it within the grace period; on a busy machine
	// they may not, and a round takes the key instead. The first one
	// takes the free key with its own round, or is handed it by the
	// second's round, should that find the key free first: the key goes
	// to the head of the queue.
	if handoffs == 0 {
		t.Logf("no hand-off this time: each waiter took the key by a round")
	}
}
