package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/redlock"
)

// Fresh mode: what a burst of brand-new Clients pays for their first
// locks. Each burst makes -clients Clients, each on pools of its own (new
// connections, opened by its first call), starts them all at once, and
// has each take a key of its own with up to -tries TryLocks, -pause
// apart, and Unlock it; then every Client and pool is closed. Before the
// first burst, the dial floor: as many raw connections as the Clients
// open, opened at once, each answering one PING.

// freshBurst is what one burst measured, per Client.
type freshBurst struct {
	tries []int           // the TryLock that took the Client's key (1: the first); 0: none did
	first []time.Duration // how long the Client's first TryLock took, whether it took the key or not
	errs  [][]opError     // the errors of the Client's TryLocks and Unlock
}

// opError is an error of an acquisition ("acquire") or release
// ("release"), as errKind names them.
type opError struct {
	op  string
	err error
}

// within returns how many Clients took their key within k TryLocks.
func (b *freshBurst) within(k int) int {
	n := 0
	for _, t := range b.tries {
		if t > 0 && t <= k {
			n++
		}
	}
	return n
}

// freshResult is what a fresh run measured.
type freshResult struct {
	dial          *hist // the dial floor: each raw connection's dial, PING and reply
	dialFailed    int   // raw connections that failed
	dialErr       error // the first of those failures
	bursts        []*freshBurst
	interrupted   bool // ctx ended during the run
	leftover      int  // lock keys still on the nodes after every Client closed
	leftoverKnown bool
}

// runFresh runs fresh mode on ns and writes its report to stdout.
func runFresh(ctx context.Context, cfg config, ns *nodes, stdout, stderr io.Writer) error {
	if cfg.busy > 0 {
		stop, err := startBusy(cfg.busy, cfg.freshBound())
		if err != nil {
			return err
		}
		defer stop()
	}
	id, err := randomHex(6)
	if err != nil {
		return err
	}
	kind := cfg.poolKinds()[0]
	prefix := "redlock-bench:" + id + ":fresh:"
	if err := markDeployment(ctx, cfg, ns, kind, prefix+"mark"); err != nil {
		fmt.Fprintf(stderr, "redlock-bench: warning: the unmeasured first lock failed: %v\n", err)
	}
	res := &freshResult{}
	res.dial, res.dialFailed, res.dialErr = dialAtOnce(ctx, ns.addrs, cfg.clients)
	var keys []string
	for i := range cfg.bursts {
		if ctx.Err() != nil {
			break
		}
		b, bkeys, err := runBurst(ctx, cfg, ns, kind, fmt.Sprintf("%sb%d:", prefix, i))
		if err != nil {
			return fmt.Errorf("burst %d: %w", i+1, err)
		}
		res.bursts, keys = append(res.bursts, b), append(keys, bkeys...)
	}
	if res.interrupted = ctx.Err() != nil; res.interrupted {
		fmt.Fprintln(stderr, "redlock-bench: interrupted: reporting what was measured so far")
	}
	if ns.close != nil {
		if n, _, err := countKeys(ns.addrs, keys, nil); err == nil {
			res.leftover, res.leftoverKnown = n, true
		}
	}
	writeFreshReport(stdout, cfg, ns, res)
	return nil
}

// markDeployment takes and releases a lock with a Client of its own,
// unmeasured, so that the nodes are a used deployment (each has its
// restart marker and the scripts loaded) before the first burst, as they
// are for a Client that starts beside others. It tries up to 3 times.
func markDeployment(ctx context.Context, cfg config, ns *nodes, kind, key string) error {
	one := cfg
	one.clients, one.workers = 1, 1
	cs, err := newClients(one, kind, ns)
	if err != nil {
		return err
	}
	defer cs.close()
	c := cs.clients[0].(*redlockClient).c
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, cfg.freshTryTimeout())
		l, err := c.TryLock(tctx, key, cfg.ttl)
		if err == nil {
			err = l.Unlock(tctx)
		}
		cancel()
		if err == nil || try == 3 || !faults.Sleep(ctx, 100*time.Millisecond) {
			return err
		}
	}
}

// runBurst makes cfg.clients new Clients on pools of the given kind,
// starts them at once, each taking a key of its own (prefix and its
// number), and closes them all once every one is done. It returns the
// keys too.
func runBurst(ctx context.Context, cfg config, ns *nodes, kind, prefix string) (*freshBurst, []string, error) {
	cs, err := newClients(cfg, kind, ns)
	if err != nil {
		return nil, nil, err
	}
	defer cs.close()
	n := len(cs.clients)
	b := &freshBurst{tries: make([]int, n), first: make([]time.Duration, n), errs: make([][]opError, n)}
	keys := make([]string, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs.clients {
		keys[i] = fmt.Sprintf("%sc%d", prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			b.take(ctx, cfg, c.(*redlockClient).c, i, keys[i])
		}()
	}
	close(start)
	wg.Wait()
	return b, keys, nil
}

// take has Client i take key with up to cfg.tries TryLocks, cfg.pause
// apart, and release it once it has it.
func (b *freshBurst) take(ctx context.Context, cfg config, c *redlock.Client, i int, key string) {
	for try := 1; try <= cfg.tries; try++ {
		if try > 1 && !faults.Sleep(ctx, cfg.pause) {
			return
		}
		tctx, cancel := context.WithTimeout(ctx, cfg.freshTryTimeout())
		t0 := time.Now()
		l, err := c.TryLock(tctx, key, cfg.ttl)
		if try == 1 {
			b.first[i] = time.Since(t0)
		}
		cancel()
		if err != nil {
			b.errs[i] = append(b.errs[i], opError{"acquire", err})
			continue
		}
		b.tries[i] = try
		uctx, cancel := context.WithTimeout(ctx, cfg.freshTryTimeout())
		if err := l.Unlock(uctx); err != nil {
			b.errs[i] = append(b.errs[i], opError{"release", err})
		}
		cancel()
		return
	}
}

// dialAtOnce is the dial floor: it opens n raw TCP connections to every
// node, all at once, and on each sends PING and reads the reply. It
// returns the time each took from dialling to the reply, how many failed
// and the first failure. Every connection stays open until all are done,
// as the Clients' connections do.
func dialAtOnce(ctx context.Context, addrs []string, n int) (*hist, int, error) {
	total := n * len(addrs)
	conns, took, errs := make([]net.Conn, total), make([]time.Duration, total), make([]error, total)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			conns[i], took[i], errs[i] = dialPing(ctx, addrs[i%len(addrs)])
		}()
	}
	close(start)
	wg.Wait()
	h, failed := newHist(), 0
	var first error
	for i := range total {
		if conns[i] != nil {
			conns[i].Close()
		}
		if errs[i] != nil {
			failed++
			first = cmp.Or(first, errs[i])
			continue
		}
		h.record(took[i])
	}
	return h, failed, first
}

// dialPing dials addr, sends PING (as a RESP array, which every server
// reads) and reads the +PONG, with pool.New's dial timeout and the same
// again for the reply. It returns the connection, open, whatever
// happened after the dial.
func dialPing(ctx context.Context, addr string) (net.Conn, time.Duration, error) {
	t0 := time.Now()
	d := net.Dialer{Timeout: poolTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	_ = c.SetDeadline(t0.Add(2 * poolTimeout))
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return c, 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return c, 0, err
	}
	if line != "+PONG\r\n" {
		return c, 0, fmt.Errorf("PING %s: got %q", addr, line)
	}
	return c, time.Since(t0), nil
}
