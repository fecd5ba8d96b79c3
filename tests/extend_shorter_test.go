package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/redlock"
)

// An Extend to a shorter TTL whose replies come after the node timeout
// has still run on the nodes: they now expire the key by the shorter TTL,
// so the lock's validity must not outlast it. Found by the simulator (a
// client that stalls). Before the fix the holder kept the 3s validity of
// its acquisition while the nodes let the key go after 150ms and another
// Client took it.
func TestExtend_aShorterExtensionWhoseRepliesAreLateCutsTheValidity(t *testing.T) {
	// Serial: its nodes must answer within tens of milliseconds (main_test.go).
	e := newEnv(t, 5)
	proxies := make([]*faults.Proxy, len(e.addrs))
	addrs := make([]string, len(e.addrs))
	for i, a := range e.addrs {
		p, err := faults.NewProxy(a, int64(i))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies[i], addrs[i] = p, p.Addr()
	}
	holder := newClient(t, newPools(t, addrs), redlock.WithNodeTimeout(50*time.Millisecond))
	key := newKey(t)
	// The acquisition is not under test, and with a 50ms node timeout a
	// loaded machine can fail it (the first round also dials and checks
	// the nodes): it is tried again, for up to 10s.
	var l *redlock.Lock
	require.Eventually(t, func() bool {
		var err error
		l, err = holder.TryLock(ctxT(t, 10*time.Second), key, 3*time.Second)
		if err != nil {
			t.Logf("TryLock: %v", err)
		}
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the holder never got the lock")

	for _, p := range proxies {
		p.Set(faults.Fault{Mode: faults.DelayReplies, Delay: 300 * time.Millisecond})
	}
	const shorter = 150 * time.Millisecond
	require.Error(t, l.Extend(ctxT(t, 10*time.Second), shorter), "every reply came after the node timeout")
	for _, p := range proxies {
		p.Heal()
	}
	require.LessOrEqual(t, l.Validity(), shorter, "the nodes may expire the key by the shorter TTL")

	// They do: another Client takes the key, and by then the first lock
	// has no validity left.
	other := e.client()
	require.Eventually(t, func() bool {
		o, err := other.TryLock(ctxT(t, 10*time.Second), key, time.Second)
		if err != nil {
			return false
		}
		require.Zero(t, l.Validity(), "both hold the key")
		_ = o.Unlock(ctxT(t, 10*time.Second))
		return true
	}, 2*time.Second, 5*time.Millisecond)
	<-l.Context().Done()
}
