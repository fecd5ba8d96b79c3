package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

const (
	// warmupMax bounds the unmeasured first round of the workers.
	warmupMax = time.Second
	// errorPause is how long a worker waits after an error that Lock did
	// not retry by itself, so that a persistent error cannot spin.
	errorPause = 10 * time.Millisecond
)

// run starts or connects to the nodes, measures for cfg.duration (less if
// ctx ends first) and writes the report to stdout. It stops the nodes it
// started before it returns, whatever happens.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	ns, err := startNodes(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if serr := ns.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping nodes: %w", serr))
		}
	}()

	pools := make([]pool.Pool, 0, len(ns.addrs))
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, addr := range ns.addrs {
		p, err := pool.New(addr)
		if err != nil {
			return err
		}
		pools = append(pools, p)
	}
	client, err := redlock.New(pools, redlock.WithNodeTimeout(cfg.nodeTimeout))
	if err != nil {
		return err
	}
	// Runs before the pools close: Close waits for the client's
	// background commands. (It is also closed before the report.)
	defer client.Close()

	prefix, keys, err := workerKeys(cfg)
	if err != nil {
		return err
	}
	if err := warmUp(ctx, client, cfg, keys); err != nil {
		return err
	}
	before, okBefore := queryConnStats(ns.addrs)
	res := measure(ctx, client, cfg, keys)
	after, okAfter := queryConnStats(ns.addrs)
	if res.connsKnown = okBefore && okAfter; res.connsKnown {
		res.dials = after.received - before.received
		res.connsOpen = after.connected
	}
	// Wait for the commands the client still runs in the background, then
	// look for lock keys that outlived their Unlock.
	client.Close()
	if ns.close != nil {
		if n, err := countKeys(ns.addrs, prefix); err == nil {
			res.leftover = n
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "redlock-bench: interrupted: reporting what was measured so far")
	}
	writeReport(stdout, cfg, ns, client.Quorum(), res)
	return nil
}

// workerKeys returns each worker's lock key and their common prefix. A
// random run id keeps runs against shared nodes (-addrs) from contending
// with each other.
func workerKeys(cfg config) (prefix string, keys []string, err error) {
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return "", nil, err
	}
	prefix = "redlock-bench:" + hex.EncodeToString(id) + ":"
	keys = make([]string, cfg.workers)
	for i := range keys {
		if cfg.keys == keysOne {
			keys[i] = prefix + "shared"
		} else {
			keys[i] = fmt.Sprintf("%sw%d", prefix, i)
		}
	}
	return prefix, keys, nil
}

// warmUp has every worker take and release its lock once, so that the
// connections are dialled before measuring. It is bounded by warmupMax
// and cfg.duration. It fails only for errors that would fail every
// round, such as a TTL the client rejects.
func warmUp(ctx context.Context, c *redlock.Client, cfg config, keys []string) error {
	ctx, cancel := context.WithTimeout(ctx, min(warmupMax, cfg.duration))
	defer cancel()
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, key, cfg.ttl)
			if err != nil {
				var qe *redlock.QuorumError
				if !errors.As(err, &qe) {
					errs[i] = err
				}
				return
			}
			_ = l.Unlock(context.WithoutCancel(ctx))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// result is what a measurement found. Latency slices are sorted.
type result struct {
	elapsed     time.Duration
	interrupted bool // ctx ended before cfg.duration
	acquire     []time.Duration
	release     []time.Duration
	rounds      int           // lock+unlock rounds with no error
	unfinished  int           // Lock calls cut short by the end of the run
	longestWait time.Duration // how long the longest of them had waited
	waitErr     error         // and its error
	errors      []*errorKind
	connsKnown  bool  // the nodes answered the connection counts below
	dials       int64 // connections the nodes accepted while measuring
	connsOpen   int64 // connections open to the nodes at the end
	leftover    int   // lock keys still on the nodes after the client closed
}

// errorKind counts the errors of one kind.
type errorKind struct {
	kind  string
	count int
	first string // the first error's text
}

// stats is one worker's record; only that worker touches it.
type stats struct {
	acquire, release []time.Duration
	rounds           int
	unfinished       int
	longestWait      time.Duration
	waitErr          error
	errs             map[string]*errorKind
}

func (s *stats) addErr(op string, err error) {
	kind := errKind(op, err)
	if e, ok := s.errs[kind]; ok {
		e.count++
		return
	}
	s.errs[kind] = &errorKind{kind: kind, count: 1, first: err.Error()}
}

// measure runs the workers for cfg.duration or until ctx ends.
func measure(ctx context.Context, c *redlock.Client, cfg config, keys []string) *result {
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	all := make([]*stats, len(keys))
	var wg sync.WaitGroup
	start := time.Now()
	for i, key := range keys {
		all[i] = &stats{errs: map[string]*errorKind{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(runCtx, c, key, cfg.ttl, all[i])
		}()
	}
	wg.Wait()
	res := &result{elapsed: time.Since(start), interrupted: ctx.Err() != nil}
	return merge(res, all)
}

// work is one worker's loop: Lock (retrying until acquired or ctx ends),
// then Unlock, until ctx ends.
func work(ctx context.Context, c *redlock.Client, key string, ttl time.Duration, s *stats) {
	for ctx.Err() == nil {
		t0 := time.Now()
		l, err := c.Lock(ctx, key, ttl)
		took := time.Since(t0)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				// The run ended while waiting: not an error of the lock.
				s.unfinished++
				if s.waitErr == nil || took > s.longestWait {
					s.longestWait, s.waitErr = took, err
				}
				return
			}
			s.addErr("acquire", err)
			sleep(ctx, errorPause)
			continue
		}
		s.acquire = append(s.acquire, took)

		// A lock that was taken is always released, even after the run
		// ended: Unlock's own node timeout bounds it.
		t0 = time.Now()
		err = l.Unlock(context.WithoutCancel(ctx))
		s.release = append(s.release, time.Since(t0))
		if err != nil {
			s.addErr("release", err)
			continue
		}
		s.rounds++
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// merge adds the workers' records to res.
func merge(res *result, all []*stats) *result {
	kinds := map[string]*errorKind{}
	for _, s := range all {
		res.acquire = append(res.acquire, s.acquire...)
		res.release = append(res.release, s.release...)
		res.rounds += s.rounds
		res.unfinished += s.unfinished
		if s.waitErr != nil && (res.waitErr == nil || s.longestWait > res.longestWait) {
			res.longestWait, res.waitErr = s.longestWait, s.waitErr
		}
		for k, e := range s.errs {
			if m, ok := kinds[k]; ok {
				m.count += e.count
				continue
			}
			kinds[k] = e
			res.errors = append(res.errors, e)
		}
	}
	slices.Sort(res.acquire)
	slices.Sort(res.release)
	slices.SortFunc(res.errors, func(a, b *errorKind) int {
		if a.count != b.count {
			return b.count - a.count
		}
		if a.kind < b.kind {
			return -1
		}
		return 1
	})
	return res
}

// errKind names the kind of an error from Lock ("acquire") or Unlock
// ("release").
func errKind(op string, err error) string {
	var qe *redlock.QuorumError
	switch {
	case errors.Is(err, redlock.ErrClosed):
		return op + ": client closed"
	case !errors.As(err, &qe):
		return op + ": other"
	case qe.Count(redlock.NodeRefused) > len(qe.Nodes)-qe.Quorum:
		if op == "acquire" {
			return op + ": held by another owner"
		}
		return op + ": not held any more (expired or taken)"
	case qe.Count(redlock.NodeOK) >= qe.Quorum:
		return op + ": too little validity left"
	case qe.Count(redlock.NodeFailed) > 0:
		return op + ": node errors"
	default:
		return op + ": nodes did not reply within the node timeout"
	}
}
