package tests

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// keepProxy forwards each client connection to its target, and keeps the
// client connections open when the target changes: the next bytes a
// client sends go to the new target, on a connection of the proxy's own
// (as an endpoint does that moves its clients to a promoted replica
// without closing them).
type keepProxy struct {
	*fakeServer
	mu     sync.Mutex
	target string
	ups    map[net.Conn]net.Conn // client connection → its upstream now
}

func startKeepProxy(t testing.TB, target string) *keepProxy {
	t.Helper()
	p := &keepProxy{target: target, ups: map[net.Conn]net.Conn{}}
	p.fakeServer = startFakeServer(t, p.serve)
	return p
}

func (p *keepProxy) serve(c net.Conn) {
	defer func() {
		p.mu.Lock()
		if up := p.ups[c]; up != nil {
			_ = up.Close()
		}
		delete(p.ups, c)
		p.mu.Unlock()
		_ = c.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		up, err := p.upstream(c)
		if err != nil {
			return
		}
		if _, err := up.Write(buf[:n]); err != nil {
			_ = up.Close() // the target changed under the write: the bytes are lost, as in a failover
		}
	}
}

// upstream returns c's connection to the target, dialling one (and
// starting its way back to c) when it has none.
func (p *keepProxy) upstream(c net.Conn) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up := p.ups[c]; up != nil {
		return up, nil
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return nil, err
	}
	p.ups[c] = up
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return up, nil
}

// point sends what clients write from now on to target, on new upstream
// connections; the client connections stay open.
func (p *keepProxy) point(target string) {
	p.mu.Lock()
	p.target = target
	ups := p.ups
	p.ups = map[net.Conn]net.Conn{}
	p.mu.Unlock()
	for _, up := range ups {
		_ = up.Close()
	}
}

// The issue scenario behind endpoints that keep client connections open
// across the failover: the Client's pool never reconnects, so it has no
// sign that it talks to another process. With WithVerifiedGrants every
// grant names the dataset that made it: one from a promoted replica names
// another than the one checked, is not counted, and the check it starts
// sees the promotion. The Client that took its connections before the
// failover never takes A's key while A holds it.
func TestFailover_verifiedGrantsSeeAFailoverBehindAnEndpointThatKeepsConnections(t *testing.T) {
	t.Parallel()
	const maxTTL = 2 * time.Second
	r := startReplicatedWith(t, 5, func(t testing.TB, target string) front { return startKeepProxy(t, target) })
	b := newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(maxTTL), redlock.WithVerifiedGrants())
	l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
	require.NoError(t, err, "a healthy deployment with replicas")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	time.Sleep(time.Until(r.started.Add(maxTTL + 1500*time.Millisecond))) // the replicas have run for longer than the maximum TTL

	const k = 3
	for i := range k {
		r.links[i].cutOff()
		r.awaitLink(t, i, "down")
	}
	key := newKey(t)
	a := newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(maxTTL))
	held, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)
	for i := range k {
		r.failOver(t, i)
	}
	refused := 0
	for time.Now().Before(held.Until()) {
		_, err := b.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "the Client took the key while A holds it (%v of validity left)", time.Until(held.Until()))
		for _, n := range asQuorumError(t, err).Nodes {
			if errors.Is(n.Err, redlock.ErrNodeRestarted) {
				refused++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Positive(t, refused, "the promoted nodes are named")
}
