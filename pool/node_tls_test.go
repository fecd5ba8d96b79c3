package pool_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testcerts"
	"github.com/quorumlock/redlock/pool"
)

// TLS: certificates, and handshakes that are refused, paused or lost.

// tlsFiles writes a fresh CA and a server certificate for 127.0.0.1 to a
// temporary directory and returns the CA pool and the file names.
func tlsFiles(t *testing.T) (roots *x509.CertPool, certFile, keyFile, caFile string) {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "ca")
	certFile, keyFile = ca.Issue(t, dir, "server", x509.ExtKeyUsageServerAuth)
	return ca.Pool(), certFile, keyFile, ca.File
}

// startTLSNode starts a node that also listens for TLS, and returns it with
// the TLS address and the CA pool. It skips the test when redis-server was
// built without TLS.
func startTLSNode(t *testing.T) (s *redistest.Server, tlsAddr string, roots *x509.CertPool) {
	t.Helper()
	if _, err := redistest.Path(); err != nil {
		redistest.StartT(t, 1) // skips, or fails under REDLOCK_REQUIRE_REDIS=1
	}
	roots, certFile, keyFile, caFile := tlsFiles(t)
	// The plain port stays: the harness checks readiness on it.
	c, err := redistest.Start(1, redistest.Options{TLSPort: true, Args: []string{
		"--tls-cert-file", certFile,
		"--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile,
		"--tls-auth-clients", "no",
	}})
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "tls") &&
			(strings.Contains(err.Error(), "Bad directive") || strings.Contains(err.Error(), "not supported")) {
			t.Skipf("redis-server was built without TLS support: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing cluster: %v", err)
		}
	})
	return c.Node(0), c.Node(0).TLSAddr(), roots
}

func TestNode_Do_worksOverTLS(t *testing.T) {
	t.Parallel()
	_, tlsAddr, roots := startTLSNode(t)
	cfg := &tls.Config{RootCAs: roots}
	n := newNode(t, tlsAddr, pool.WithTLS(cfg))
	ctx := ctxTimeout(t, waitLimit)

	pong, err := redis.String(n.Do(ctx, "PING"))
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
	_, err = n.Do(ctx, "SET", "k", "over-tls")
	require.NoError(t, err)
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "over-tls", v)
	require.Empty(t, cfg.ServerName, "New must not modify the caller's tls.Config")
}

func TestNode_Do_overTLSRejectsAnUntrustedCertificate(t *testing.T) {
	t.Parallel()
	_, tlsAddr, roots := startTLSNode(t)
	ctx := ctxTimeout(t, waitLimit)

	n := newNode(t, tlsAddr, pool.WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}))
	_, err := n.Do(ctx, "PING")
	requireNodeError(t, err, tlsAddr)
	require.ErrorContains(t, err, "certificate")
	var cve *tls.CertificateVerificationError
	require.ErrorAs(t, err, &cve)

	// A trusted CA but the wrong server name also fails.
	wrongName := newNode(t, tlsAddr, pool.WithTLS(&tls.Config{RootCAs: roots, ServerName: "other.example"}))
	_, err = wrongName.Do(ctx, "PING")
	requireNodeError(t, err, tlsAddr)
	require.ErrorAs(t, err, &cve)
}

func TestNode_Do_overTLSOnAPausedNodeTimesOutAtTheContextDeadline(t *testing.T) {
	// The TLS handshake is part of the call: it must respect the caller's
	// deadline (and WithDialTimeout), like the TCP connect and AUTH do.
	t.Parallel()
	s, tlsAddr, roots := startTLSNode(t)
	n := newNode(t, tlsAddr, pool.WithTLS(&tls.Config{RootCAs: roots}))
	require.NoError(t, s.Pause())

	start := time.Now()
	_, err := n.Do(ctxTimeout(t, shortDeadline), "PING")
	elapsed := time.Since(start)
	requireTimeout(t, err, tlsAddr)
	require.Less(t, elapsed, boundedBy,
		"a call with a %v deadline took %v: the TLS handshake ignored the deadline", shortDeadline, elapsed)
}

// silentThenProxy listens on 127.0.0.1: the first connection it accepts is
// held open and never answered (a TLS handshake that gets lost), later
// ones are forwarded to target. stop closes everything and waits for its
// goroutines.
func silentThenProxy(t *testing.T, target string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		conns   []net.Conn
		stopped bool
		wg      sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			c.Close() // accepted or dialled while stopping
		}
		conns = append(conns, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			if first {
				continue // hold it, say nothing
			}
			up, err := net.DialTimeout("tcp", target, waitLimit)
			if err != nil {
				c.Close()
				continue
			}
			track(up)
			for _, dir := range [][2]net.Conn{{c, up}, {up, c}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = io.Copy(dir[0], dir[1])
					dir[0].Close()
					dir[1].Close()
				}()
			}
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		stopped = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// WithDialTimeout is documented to bound the TLS handshake. A handshake
// that gets no answer must be given up after it, so that the node is
// dialled again, instead of stalling every call for redigo's own 10s
// handshake timeout.
func TestNode_Do_overTLSGivesUpALostHandshakeAfterTheDialTimeout(t *testing.T) {
	t.Parallel()
	_, tlsAddr, roots := startTLSNode(t)
	const dialTimeout = 300 * time.Millisecond
	proxy, stop := silentThenProxy(t, tlsAddr)
	n := newNode(t, proxy, pool.WithTLS(&tls.Config{RootCAs: roots}),
		pool.WithDialTimeout(dialTimeout), pool.WithIOTimeout(5*time.Second))
	t.Cleanup(stop) // runs before the node's Close: frees a stuck handshake

	// The first dial meets the silent connection.
	start := time.Now()
	_, err := n.Do(ctxTimeout(t, 2*dialTimeout), "PING")
	requireTimeout(t, err, proxy)
	require.Less(t, time.Since(start), boundedBy)

	// Soon after the dial timeout (and the short back-off that follows a
	// failed dial), the node must be dialled again, through the proxy.
	var pong string
	for time.Since(start) < 3*time.Second {
		if pong, err = redis.String(n.Do(ctxTimeout(t, 500*time.Millisecond), "PING")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "%v after the first dial began, the node had not been dialled again", time.Since(start))
	require.Equal(t, "PONG", pong)
}

// A TLS client on a plain node fails its handshake after the dial timeout
// (or at once, when the node happens to answer the ClientHello). Callers
// whose deadlines are much shorter must still learn why: while the node is
// being dialled they are told so, and once a dial failed, every call says
// how.
func TestNode_Do_overTLSOnAPlainNodeReportsTheHandshakeToShortDeadlines(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const password = "tls-plain-s3cret"
	const dialTimeout = 300 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithTLS(&tls.Config{InsecureSkipVerify: true}),
		pool.WithPassword(password), pool.WithDialTimeout(dialTimeout))

	handshake := 0 // calls that reported the failed handshake
	seen := map[string]bool{}
	for start := time.Now(); time.Since(start) < 4*dialTimeout; {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := n.Do(ctx, "PING")
		cancel()
		ne := requireNodeError(t, err, s.Addr())
		require.Equal(t, "dial", ne.Op, "a call on a node that cannot be dialled: %v", err)
		require.NotContains(t, err.Error(), password)
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			t.Log(msg)
		}
		if strings.Contains(err.Error(), "TLS handshake") {
			handshake++
		} else {
			require.Zero(t, handshake, "once a dial failed, every call must say how: %v", err)
			require.ErrorContains(t, err, "still connecting")
			require.True(t, isTimeout(err), "%v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NotZero(t, handshake, "no call reported the failed handshake")
}
