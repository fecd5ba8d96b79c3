package tests

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testcerts"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// tlsEnv is a set of nodes that also listen for TLS, each with a
// certificate of the same CA, and that require a client certificate of
// that CA (tls-auth-clients yes, Redis's default).
type tlsEnv struct {
	nodes    []*redistest.Server // the harness's handles, on the plain ports
	tlsAddrs []string
	ca       *testcerts.CA
	client   *tls.Config // trusts the CA, shows a client certificate
}

// newTLSEnv starts n nodes. The harness probes a node on its plain port,
// so each node keeps one, bound to 127.0.0.1; the library is pointed at
// the TLS ports alone.
func newTLSEnv(t *testing.T, n int) *tlsEnv {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "ca")
	certFile, keyFile := ca.Issue(t, dir, "node", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.Issue(t, dir, "client", x509.ExtKeyUsageClientAuth)
	e := &tlsEnv{ca: ca, client: testcerts.ClientConfig(t, ca.Pool(), clientCert, clientKey)}
	for range n {
		// Each node needs a TLS port of its own, and the harness passes
		// the same arguments to every node of a Start: one Start per node.
		c := redistest.StartT(t, 1, redistest.Options{TLSPort: true, Args: []string{
			"--tls-cert-file", certFile,
			"--tls-key-file", keyFile,
			"--tls-ca-cert-file", ca.File,
		}})
		e.nodes = append(e.nodes, c.Node(0))
		e.tlsAddrs = append(e.tlsAddrs, c.Node(0).TLSAddr())
	}
	return e
}

// Over TLS, with mutual authentication, every call works as over TCP:
// TryLock, Extend, Unlock, and a Lock that waits and is woken by the
// release announced on its pub/sub connection (itself over TLS).
func TestTLS_everyCallWorksOverTLS(t *testing.T) {
	t.Parallel()
	e := newTLSEnv(t, 5)
	pools := newPools(t, e.tlsAddrs, pool.WithTLS(e.client))
	c := newClient(t, pools)

	key := newKey(t)
	l, err := c.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctxT(t, quickly), longTTL))
	require.NoError(t, l.Unlock(ctxT(t, quickly)))

	// A waiter that never retries by itself: only the announcement, over
	// its TLS pub/sub connection, ends its wait within the test.
	waiter := newClient(t, newPools(t, e.tlsAddrs, pool.WithTLS(e.client)))
	key = newKey(t)
	held := takeEverywhere(t, &env{t: t, nodes: e.nodes}, c, key, longTTL)
	got := lockAsync(ctxT(t, time.Minute), waiter, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	r := awaitLock(t, got, 10*time.Second, "the waiter was not woken by the release")
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(ctxT(t, quickly)))
	awaitAbsent(t, e.nodes, key) // Unlock returns once a quorum released
}

// A client that does not trust the nodes' CA is refused by every node at
// the handshake: the error names each node and says why (certificate),
// and comes within the deadline instead of after retries.
func TestTLS_aWrongCAIsReportedPerNodeAsACertificateError(t *testing.T) {
	e := newTLSEnv(t, 5)
	dir := t.TempDir()
	other := testcerts.NewCA(t, dir, "other-ca")
	cert, key := other.Issue(t, dir, "client", x509.ExtKeyUsageClientAuth)
	pools := newPools(t, e.tlsAddrs, pool.WithTLS(testcerts.ClientConfig(t, other.Pool(), cert, key)))
	c := newClient(t, pools)

	start := time.Now()
	_, err := c.TryLock(ctxT(t, quickly), newKey(t), longTTL)
	require.Less(t, time.Since(start), quickly)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	qe := asQuorumError(t, err)
	require.Zero(t, qe.Count(redlock.NodeOK), statuses(qe))
	failed := 0
	for i, n := range qe.Nodes {
		if n.Status == redlock.NodePending {
			continue // the outcome was decided without it
		}
		requireNodeFailed(t, qe, i, e.tlsAddrs[i], "certificate")
		failed++
	}
	require.Greater(t, failed, len(qe.Nodes)-qe.Quorum, statuses(qe))
}

// A TLS client pointed at plain nodes never connects: a plain node does
// not answer the ClientHello (the handshake then fails at the dial
// timeout), or answers it with an error (at once). Rounds are much
// shorter than the dial timeout, so most of them end while a dial is
// under way. Every round must still name why each node it heard nothing
// from is silent: being dialled, and from the first failed handshake
// until a dial succeeds (never, here), the handshake.
func TestTLS_onPlainNodesEveryRoundNamesTheConnectingStateAndTheHandshake(t *testing.T) {
	// Serial: its nodes must answer within tens of milliseconds (main_test.go).
	e := newEnv(t, 3)
	const dialTimeout = 500 * time.Millisecond
	pools := newPools(t, e.addrs, pool.WithTLS(&tls.Config{InsecureSkipVerify: true}), pool.WithDialTimeout(dialTimeout))
	c := newClient(t, pools, redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithRestartSafety(0))

	failed := make([]bool, len(e.addrs)) // node i has named the handshake
	rounds := 0
	for start := time.Now(); time.Since(start) < 3*dialTimeout; time.Sleep(10 * time.Millisecond) {
		_, err := c.TryLock(ctxT(t, quickly), newKey(t), longTTL)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		qe := asQuorumError(t, err)
		rounds++
		named := 0
		for i, n := range qe.Nodes {
			require.NotEqual(t, redlock.NodeOK, n.Status, statuses(qe))
			if n.Err == nil {
				continue // not awaited: the round was decided without it
			}
			named++
			msg := n.Err.Error()
			if strings.Contains(msg, "TLS handshake") {
				failed[i] = true
				continue
			}
			require.False(t, failed[i], "round %d, node %d: once a handshake failed, every round must name it: %s", rounds, i, statuses(qe))
			require.Contains(t, msg, "still connecting", "round %d, node %d: %s", rounds, i, statuses(qe))
		}
		require.Positive(t, named, "round %d named no node: %s", rounds, statuses(qe))
	}
	for i := range failed {
		require.True(t, failed[i], "node %d: no round named the failed handshake", i)
	}
}
