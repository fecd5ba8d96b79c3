package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// Restart safety checks each new connection of a Client before a grant
// on it counts (docs/operations.md, "Persistence and restarts"). These
// tests are about what that costs a Client's first locks: the check goes
// out beside the first acquisition, not before it, and a check that
// answers late still settles its node for the next call.

// freshResult is what freshClientsTakeTheirKeys saw.
type freshResult struct {
	n     int
	first int   // Clients that took their key on the first TryLock
	tries []int // per Client, the TryLock that took its key; 0: none did
	last  error // the last failure, for the test's message
	// unchecked is a failure of a later try that counted a node out for
	// want of a restart check: the first try's check should have settled
	// it by then.
	unchecked error
}

// within returns how many Clients took their key within k TryLocks.
func (r freshResult) within(k int) int {
	n := 0
	for _, t := range r.tries {
		if t > 0 && t <= k {
			n++
		}
	}
	return n
}

func (r freshResult) String() string {
	return fmt.Sprintf("%d Clients: %d took their key on the first try, %d within 2, %d within 3; last failure: %v",
		r.n, r.first, r.within(2), r.within(3), r.last)
}

// freshClientsTakeTheirKeys makes n Clients over addrs, each with pools
// of its own (new connections), and has them take a free key of their
// own with at most tries TryLocks, pause apart: wave Clients at once, the
// next wave once the last has done. Each Client gets opts.
func freshClientsTakeTheirKeys(t testing.TB, addrs []string, n, wave, tries int, pause time.Duration, opts ...redlock.Option) freshResult {
	t.Helper()
	res := freshResult{n: n, tries: make([]int, n)}
	var mu sync.Mutex
	for from := 0; from < n; from += wave {
		clients := make([]*redlock.Client, min(wave, n-from))
		for k := range clients {
			clients[k] = newClient(t, newPools(t, addrs), opts...)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for k, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := newKey(t)
				<-start
				for try := 1; try <= tries; try++ {
					if try > 1 {
						time.Sleep(pause)
					}
					_, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
					if err == nil { // the key is the Client's own: it expires with the test's nodes
						res.tries[from+k] = try
						return
					}
					mu.Lock()
					res.last = err
					if try > 1 && strings.Contains(err.Error(), "not checked for a restart yet") {
						res.unchecked = err
					}
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	for _, try := range res.tries {
		if try == 1 {
			res.first++
		}
	}
	return res
}

// markDeployment takes and releases a lock on addrs with a Client of its
// own, so that the nodes are a used deployment (each has its restart
// marker) and have the scripts loaded: the Clients of a test start as
// they would beside others.
func markDeployment(t testing.TB, addrs []string) {
	t.Helper()
	c := newClient(t, newPools(t, addrs))
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// A fresh Client's first TryLock needs one round trip to each node, not
// two: the restart check goes out beside the acquisition. Each node is
// behind a proxy that holds every request back for 600ms, and the node
// timeout is 1.15s: one round trip fits, with room for a busy machine's
// delays, two do not. The first TryLock of every one of 50 fresh Clients
// (10 at a time) takes its key. Before, the check went
// first (and, on a pool's first connection, twice: the connection opened
// under it), ran out of the node timeout, and every first TryLock failed
// with "node not checked for a restart yet".
func TestRestartSafety_aFreshClientsFirstTryLockNeedsOneRoundTrip(t *testing.T) {
	e := newEnv(t, 5)
	markDeployment(t, e.addrs)
	slow := make([]string, len(e.addrs))
	for i, a := range e.addrs {
		slow[i] = startLatencyProxy(t, a, 600*time.Millisecond, nil).Addr()
	}
	res := freshClientsTakeTheirKeys(t, slow, 50, 10, 1, 0, redlock.WithNodeTimeout(1150*time.Millisecond))
	require.Equal(t, res.n, res.first, "%v", res)
}

// A fresh Client's first TryLock counts each node once that node's own
// restart check has answered with its marker, without waiting for slower
// nodes' checks. Nodes 0 and 1 answer at once; node 2's check (and the
// grant behind it on its connection) is held back 100ms, nodes 3 and 4's
// 1.5s; the node timeout is 400ms. Before, the checks' answers were
// adopted only once every node had answered or a grace of four times the
// quorum's time had passed (500ms here), and every first TryLock failed
// with "its check had not answered yet".
func TestRestartSafety_aFirstTryLockCountsANodeOnceItsOwnCheckAnswered(t *testing.T) {
	e := newEnv(t, 5)
	markDeployment(t, e.addrs)
	addrs := slices.Clone(e.addrs)
	addrs[2] = startLatencyProxy(t, e.addrs[2], 100*time.Millisecond, []byte(wire.MarkerKey)).Addr()
	for _, i := range []int{3, 4} {
		addrs[i] = startLatencyProxy(t, e.addrs[i], 1500*time.Millisecond, []byte(wire.MarkerKey)).Addr()
	}
	res := freshClientsTakeTheirKeys(t, addrs, 10, 5, 1, 0, redlock.WithNodeTimeout(400*time.Millisecond))
	require.Equal(t, res.n, res.first, "%v", res)
}

// On a machine whose cores are busy with other work (two CPU-bound
// processes beside the test) and whose nodes answer the restart check
// later than the default node timeout (a proxy holds every request that
// carries the check back for 130ms), a check that ran out of the node
// timeout goes on in the background and settles its node for the next
// TryLock, a second later, which does not start over: no second or third
// try of 50 fresh Clients (25 at a time) counts a node out for want of a
// check, and Clients take their keys. Before, every TryLock's check timed
// out again, and no Client took its key: each failure read "node not
// checked for a restart yet (new connection); counted once checked; the
// last check failed: EVALSHA: context deadline exceeded". How many take
// their key within three tries depends on how busy the machine is (95%
// and more with make test; 35 of 50 beside the simulator and other -race
// runs): BenchmarkFreshClients and redlock-bench -mode fresh measure it.
func TestRestartSafety_freshClientsOnABusyMachineTakeTheirKeysWithinThreeTries(t *testing.T) {
	e := newEnv(t, 5)
	markDeployment(t, e.addrs)
	slowCheck := make([]string, len(e.addrs))
	for i, a := range e.addrs {
		slowCheck[i] = startLatencyProxy(t, a, 130*time.Millisecond, []byte(wire.MarkerKey)).Addr()
	}
	keepCoresBusy(t, 2, time.Minute)
	const n = 50
	res := freshClientsTakeTheirKeys(t, slowCheck, n, 25, 3, time.Second, redlock.WithNodeTimeout(50*time.Millisecond))
	t.Log(res)
	require.NoError(t, res.unchecked, "a later try started over")
	require.Positive(t, res.within(3), "%v", res)
}

// busyEnv makes the test binary a CPU-bound process (TestBusyLoop).
const busyEnv = "REDLOCK_TEST_BUSY_FOR"

// keepCoresBusy runs n processes that keep a core busy each, for at most
// d (they end by themselves after it, and with the test process: they
// are killed when the test ends, or when the test process dies).
func keepCoresBusy(t testing.TB, n int, d time.Duration) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	for range n {
		cmd := exec.Command(exe, "-test.run=^TestBusyLoop$", "-test.count=1")
		cmd.Env = append(os.Environ(), busyEnv+"="+d.String(), "GOMAXPROCS=1")
		cmd.SysProcAttr = workerProcAttr()
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// TestBusyLoop is not a test: run by keepCoresBusy, it keeps one core busy
// for the time REDLOCK_TEST_BUSY_FOR says, at most a minute.
func TestBusyLoop(t *testing.T) {
	raw := os.Getenv(busyEnv)
	if raw == "" {
		t.Skip("a CPU-bound helper process of keepCoresBusy")
	}
	d, err := time.ParseDuration(raw)
	require.NoError(t, err)
	end := time.Now().Add(min(d, time.Minute))
	x := 0
	for time.Now().Before(end) {
		for range 1 << 16 {
			x = x*31 + 7
		}
	}
	_ = x
}

// startLatencyProxy forwards TCP connections to target, holding back what
// a client sends for delay: every read of it, or, when only is not nil,
// each read that contains only and whatever follows it on its connection
// (the order is kept); replies go back at once. A round trip through it
// that is held back takes delay more than one to target.
func startLatencyProxy(t testing.TB, target string, delay time.Duration, only []byte) *fakeServer {
	t.Helper()
	return startFakeServer(t, func(c net.Conn) {
		defer c.Close()
		up, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			return
		}
		defer up.Close()
		type chunk struct {
			b  []byte
			at time.Time
		}
		chunks := make(chan chunk, 1024)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // client -> chunks
			defer wg.Done()
			defer close(chunks)
			for {
				buf := make([]byte, 32<<10)
				n, err := c.Read(buf)
				if n > 0 {
					at := time.Now()
					if only == nil || bytes.Contains(buf[:n], only) {
						at = at.Add(delay)
					}
					chunks <- chunk{buf[:n], at}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // chunks -> node, each at its time
			defer wg.Done()
			defer up.Close()
			for ch := range chunks {
				time.Sleep(time.Until(ch.at))
				if _, err := up.Write(ch.b); err != nil {
					return
				}
			}
		}()
		_, _ = io.Copy(c, up)
		_ = c.Close()
		wg.Wait()
	})
}

// BenchmarkFreshClients is the scenario of the tests above at the size
// where it was first seen: 200 fresh Clients at once, 5 pools each, the
// default node timeout, each taking a free key of its own with up to 10
// TryLocks back to back, on real nodes (no proxy). It reports, per run,
// how many took their key on the first TryLock, within 3 and within 10.
// With REDLOCK_BENCH_BUSY=1, two CPU-bound processes run beside it.
func BenchmarkFreshClients(b *testing.B) {
	e := newEnv(b, 5)
	markDeployment(b, e.addrs)
	if os.Getenv("REDLOCK_BENCH_BUSY") == "1" {
		keepCoresBusy(b, 2, time.Minute)
	}
	var first, within3, within10 int
	for range b.N {
		res := freshClientsTakeTheirKeys(b, e.addrs, 200, 200, 10, 0, redlock.WithNodeTimeout(50*time.Millisecond))
		first, within3, within10 = first+res.first, within3+res.within(3), within10+res.within(10)
	}
	b.ReportMetric(float64(first)/float64(b.N), "first-try/op")
	b.ReportMetric(float64(within3)/float64(b.N), "within-3/op")
	b.ReportMetric(float64(within10)/float64(b.N), "within-10/op")
}
