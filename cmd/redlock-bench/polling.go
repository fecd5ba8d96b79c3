package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/pool"
)

// The polling client's parameters, which are go-redsync/redsync v4's
// defaults (redsync.go and mutex.go in its repository).
const (
	// pollTries is redsync's default number of attempts of one
	// LockContext call (WithTries). This client does not stop there: it
	// tries until its context ends, as a caller that calls LockContext
	// again after ErrFailed would; acquisitions that needed more are
	// counted.
	pollTries = 32
	// pollDelayMin and pollDelayMax bound redsync's default delay before
	// every attempt but the first: a whole number of milliseconds drawn
	// uniformly from [pollDelayMin, pollDelayMax), that is 50 to 249 ms.
	pollDelayMin = 50 * time.Millisecond
	pollDelayMax = 250 * time.Millisecond
	// pollDriftFactor is redsync's clock drift allowance: the validity is
	// ttl - the attempt's duration - ttl*pollDriftFactor.
	pollDriftFactor = 0.01
	// pollTimeoutFactor bounds each attempt's context, and the release
	// after a failed attempt, to ttl*pollTimeoutFactor. As in redsync on
	// redigo, that context bounds getting a connection from the pool
	// (dialling one); a command on a connection is bounded by the
	// connection's read and write timeouts (poolTimeout).
	pollTimeoutFactor = 0.05
)

// pollReleaseScript deletes the key when it holds the caller's value. It
// returns 1 when it deleted it, 0 when the key holds another value and
// -1 when there is no key, as redsync's release script does.
var pollReleaseScript = redis.NewScript(1, `
local v = redis.call("GET", KEYS[1])
if v == false then
	return -1
end
if v ~= ARGV[1] then
	return 0
end
return redis.call("DEL", KEYS[1])
`)

// errPollFailed is what a polling Lock returns when its context ended
// before it acquired the lock (redsync's ErrFailed).
var errPollFailed = errors.New("polling: lock not acquired")

// pollClient is a minimal Redlock client in the manner of
// go-redsync/redsync v4 (its Mutex on redigo pools, default options), for
// comparison: a lock polls. An attempt sends SET key value NX PX ttl to
// every node at once, each on a connection of its own taken from a redigo
// *redis.Pool per node, and waits for every node (redsync's failFast is
// off by default). The lock is held when a quorum granted and the
// validity left, ttl - the attempt's duration - ttl*pollDriftFactor, is
// positive. Otherwise the release script runs on every node and the next
// attempt follows a random delay of 50-249 ms (pollDelayMin,
// pollDelayMax), until the context ends. Unlock runs the release script on
// every node (EVALSHA, then EVAL on NOSCRIPT) and succeeds when a quorum
// deleted the key.
//
// It differs from redsync only where the benchmark needs it: it does not
// give up after 32 attempts (pollTries) but counts the acquisitions that
// needed more; it returns an error matching the context's error when the
// context ends (redsync returns ErrFailed); and the release after a failed
// attempt is not cut short by the caller's context ending, so that the end
// of a run leaves no keys behind (redsync's would be when it had to dial a
// connection for it).
type pollClient struct {
	pools  []*redis.Pool
	addrs  []string
	quorum int
	closed atomic.Bool
	stats  pollCounters
}

// pollCounters count what the polling clients did. They are read while
// the workers run, so they are atomic.
type pollCounters struct {
	attempts     atomic.Int64 // attempts of the acquisitions below
	acquisitions atomic.Int64
	overTries    atomic.Int64 // acquisitions that took more than pollTries attempts
	maxAttempts  atomic.Int64
}

// pollStats is a snapshot of pollCounters, summed over clients.
type pollStats struct {
	attempts, acquisitions, overTries, maxAttempts int64
}

// sub returns s less the earlier snapshot o; the maximum is s's.
func (s pollStats) sub(o pollStats) pollStats {
	return pollStats{
		attempts:     s.attempts - o.attempts,
		acquisitions: s.acquisitions - o.acquisitions,
		overTries:    s.overTries - o.overTries,
		maxAttempts:  s.maxAttempts,
	}
}

// newPollClient returns a polling client on a redigo pool per node, sized
// as the plain pool is for the workers it serves.
func newPollClient(addrs []string, workers int) *pollClient {
	c := &pollClient{addrs: addrs, quorum: len(addrs)/2 + 1}
	for _, addr := range addrs {
		c.pools = append(c.pools, plainPool(addr, workers))
	}
	return c
}

// snapshot returns the client's counters.
func (c *pollClient) snapshot() pollStats {
	return pollStats{
		attempts:     c.stats.attempts.Load(),
		acquisitions: c.stats.acquisitions.Load(),
		overTries:    c.stats.overTries.Load(),
		maxAttempts:  c.stats.maxAttempts.Load(),
	}
}

// Close closes the pools. Nothing runs in the background: every call
// waits for all its nodes. It may be called more than once.
func (c *pollClient) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, p := range c.pools {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Lock takes key for ttl, attempt after attempt, until it holds it or ctx
// ends.
func (c *pollClient) Lock(ctx context.Context, key string, ttl time.Duration) (heldLock, error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return nil, fmt.Errorf("polling: ttl %v must be at least 1ms", ttl)
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("polling: %w", pool.ErrClosed)
	}
	value, err := pollValue()
	if err != nil {
		return nil, err
	}
	drift := time.Duration(float64(ttl) * pollDriftFactor)
	timeout := time.Duration(float64(ttl) * pollTimeoutFactor)
	var timer *time.Timer
	var last error
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			d := pollDelay()
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, fmt.Errorf("%w after %d attempts: %w (the last: %w)", errPollFailed, attempt-1, ctx.Err(), last)
			case <-timer.C:
			}
		}
		if c.closed.Load() {
			return nil, fmt.Errorf("polling: %w", pool.ErrClosed)
		}
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, timeout)
		res := c.onEveryNode(actx, func(conn redis.Conn) (int64, error) {
			_, err := redis.String(conn.Do("SET", key, value, "NX", "PX", ms))
			switch {
			case errors.Is(err, redis.ErrNil):
				return 0, nil // refused: the key exists
			case err != nil:
				return 0, err
			}
			return 1, nil
		})
		cancel()
		now := time.Now()
		validity := ttl - now.Sub(start) - drift
		if res.ok >= c.quorum && validity > 0 {
			if timer != nil {
				timer.Stop()
			}
			c.count(attempt)
			return &pollLock{c: c, key: key, value: value}, nil
		}
		res.validity = validity
		last = res.err("acquire", c.quorum)
		c.release(context.WithoutCancel(ctx), key, value, timeout)
	}
}

// count records an acquisition that took attempts attempts.
func (c *pollClient) count(attempts int) {
	s := &c.stats
	s.attempts.Add(int64(attempts))
	s.acquisitions.Add(1)
	if attempts > pollTries {
		s.overTries.Add(1)
	}
	for {
		m := s.maxAttempts.Load()
		if int64(attempts) <= m || s.maxAttempts.CompareAndSwap(m, int64(attempts)) {
			return
		}
	}
}

// release runs the release script on every node, bounded as an attempt
// is, and returns what the nodes said.
func (c *pollClient) release(ctx context.Context, key, value string, timeout time.Duration) pollResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.onEveryNode(ctx, func(conn redis.Conn) (int64, error) {
		return redis.Int64(pollReleaseScript.Do(conn, key, value))
	})
}

// pollResult counts the nodes' answers to one call on every node.
type pollResult struct {
	nodes    int
	ok       int // SET granted; release: deleted
	refused  int // SET refused; release: the key held another value
	missing  int // release: no key
	failed   int // an error, or no connection
	first    error
	validity time.Duration // acquire: the validity left, when a quorum granted
}

// err describes a call that did not reach a quorum.
func (r pollResult) err(op string, quorum int) error {
	return &pollError{op: op, res: r, quorum: quorum}
}

// onEveryNode runs fn on every node at once, each on a connection of its
// own from the node's pool, and waits for them all. fn returns 1 for
// success, 0 for a refusal and -1 (release) for a missing key.
func (c *pollClient) onEveryNode(ctx context.Context, fn func(redis.Conn) (int64, error)) pollResult {
	type answer struct {
		v   int64
		err error
	}
	ch := make(chan answer, len(c.pools))
	for _, p := range c.pools {
		go func() {
			conn, err := p.GetContext(ctx)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			v, err := fn(conn)
			conn.Close()
			ch <- answer{v, err}
		}()
	}
	r := pollResult{nodes: len(c.pools)}
	for range c.pools {
		a := <-ch
		switch {
		case a.err != nil:
			r.failed++
			if r.first == nil {
				r.first = a.err
			}
		case a.v == 1:
			r.ok++
		case a.v == -1:
			r.missing++
		default:
			r.refused++
		}
	}
	return r
}

// pollLock is a lock the polling client holds.
type pollLock struct {
	c          *pollClient
	key, value string
}

// Token returns the lock's value, as the nodes hold it.
func (l *pollLock) Token() string { return l.value }

// Unlock runs the release script on every node; it fails when fewer than
// a quorum deleted the key. As in redsync, ctx bounds getting connections
// only.
func (l *pollLock) Unlock(ctx context.Context) error {
	res := l.c.onEveryNode(ctx, func(conn redis.Conn) (int64, error) {
		return redis.Int64(pollReleaseScript.Do(conn, l.key, l.value))
	})
	if res.ok >= l.c.quorum {
		return nil
	}
	return res.err("release", l.c.quorum)
}

// pollError is a polling call that did not reach a quorum.
type pollError struct {
	op     string // "acquire" or "release"
	res    pollResult
	quorum int
}

func (e *pollError) Error() string {
	r := e.res
	s := fmt.Sprintf("polling: %s: %d of %d nodes succeeded (quorum %d), %d refused, %d had no key, %d failed",
		e.op, r.ok, r.nodes, e.quorum, r.refused, r.missing, r.failed)
	if e.op == "acquire" && r.ok >= e.quorum {
		s += fmt.Sprintf(", validity left %v", r.validity)
	}
	if r.first != nil {
		s += ": " + r.first.Error()
	}
	return s
}

func (e *pollError) Unwrap() error { return e.res.first }

// kind names the error's kind for the report, as errKind does for the
// redlock client's errors.
func (e *pollError) kind() string {
	r := e.res
	switch {
	case e.op == "acquire" && r.refused > r.nodes-e.quorum:
		return "held by another owner"
	case e.op == "release" && r.refused+r.missing > r.nodes-e.quorum:
		return "not held any more (expired or taken)"
	case e.op == "acquire" && r.ok >= e.quorum:
		return "too little validity left"
	case r.failed > 0:
		return "node errors"
	default:
		return "split vote"
	}
}

// pollValue returns a lock value as redsync makes one: 16 random bytes in
// standard base64.
func pollValue() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// pollDelay returns redsync's default delay before a retry: a whole
// number of milliseconds from [pollDelayMin, pollDelayMax).
func pollDelay() time.Duration {
	lo, hi := int(pollDelayMin/time.Millisecond), int(pollDelayMax/time.Millisecond)
	return time.Duration(mrand.IntN(hi-lo)+lo) * time.Millisecond
}
