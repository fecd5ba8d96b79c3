package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/pool"
)

// Split back-off: after a round in which the key was free but no one got a
// quorum (the nodes split their votes between callers), a waiter waits a
// random time in [0, d], d = splitMin doubling with each split in a row up
// to splitMax, unless a release names it first.
const (
	splitMin = time.Millisecond
	splitMax = 32 * time.Millisecond
)

// expiryJitter spreads the waiters that wake when a key runs out.
const expiryJitter = time.Millisecond

// waiter is one Lock call while it waits for its key.
type waiter struct {
	// id is its entry in the key's queue on the nodes; "" when queueing is
	// off (WithHandoffWindow(0)).
	id string
	// priority is its place in the queues (µs, the median node time of its
	// first refusal), sent with every later round so that all nodes order
	// the waiters alike; "" before it has one.
	priority string
	queued   bool          // a node may hold its queue entry
	wake     chan struct{} // a release of the key was announced
	named    atomic.Bool   // an announcement named this waiter
	kw       *keyWait      // its subscription; nil before the first refusal
}

func newWaiter(queue bool) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	if queue {
		w.id = strconv.FormatUint(rand.Uint64(), 36)
	}
	return w
}

// signal wakes the waiter, for an announcement that named next.
func (w *waiter) signal(next string) {
	if next != "" && next != w.id {
		return // the key is kept for another waiter
	}
	if next != "" {
		w.named.Store(true)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// forget drops announcements from before the round about to start: that
// round sees the nodes as they are.
func (w *waiter) forget() {
	select {
	case <-w.wake:
	default:
	}
	w.named.Store(false)
}

// learn takes the waiter's priority from its first refused round: the
// median of the nodes' times, which every later round sends to every node.
func (w *waiter) learn(r *round) {
	if w.id == "" || r == nil {
		return
	}
	w.queued = true
	if w.priority != "" || r.replies == nil {
		return
	}
	var ps []int64
	for i, n := range r.nodes {
		if n.Status != NodeRefused {
			continue
		}
		if a, ok := parseAcquire(r.replies[i]); ok && a.priority >= 0 {
			ps = append(ps, a.priority)
		}
	}
	if len(ps) > 0 {
		slices.Sort(ps)
		w.priority = strconv.FormatInt(ps[len(ps)/2], 10)
	}
}

// Lock takes key for ttl, trying round after round until it succeeds or ctx
// ends. It does not poll: after a refused round it subscribes to the key's
// release announcements (ReleaseChannel) on every node and sleeps until a
// release that concerns it is announced, or until the holder's key would
// run out (the refusing nodes report its TTL), whichever comes first. While
// it waits it is queued on the nodes (WithHandoffWindow), so that a release
// keeps the key for the longest waiter instead of whoever asks first;
// waits are served in the order they began. After a split vote (the key
// was free, but no caller got a quorum) it waits a random time that grows
// with each split in a row, from about 1ms to 32ms.
//
// The retry strategy (WithRetry; default DefaultRetry) sets the wait when
// the nodes cannot tell how long the key has left (they failed, or did not
// answer in time) and, as a ceiling, while release announcements are not
// available (pools that do not implement pool.Subscriber, or while the
// subscription is being made); a strategy that gives up ends Lock with the
// last round's error. When ctx ends first the error matches both
// ErrNotAcquired and ctx.Err(). Each round uses a new token, so that a late
// release from a failed round can never remove what a later round set.
// Other errors are as for TryLock.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	cfg, err := c.lockConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	w := newWaiter(c.cfg.window > 0)
	var l *Lock
	defer func() { c.endWait(ctx, key, w, l) }()
	splits, checked := 0, false
	for failures := 1; ; failures++ {
		w.forget()
		armed := c.notify.armed(w.kw)
		var r *round
		l, r, err = c.acquire(ctx, key, ttl, cfg, w)
		var qe *QuorumError
		if err == nil {
			l.waited = w.id
			return l, nil
		}
		if !errors.As(err, &qe) || qe.Cause != nil {
			return nil, err
		}
		delay, again := cfg.retry.NextDelay(failures)
		if !again {
			return nil, err
		}
		w.learn(r)
		if w.kw == nil {
			w.kw = c.notify.join(key, w)
		}
		if !armed && !checked {
			// A release between this round's refusal and the subscription
			// would go unheard: once subscribed, ask again at once.
			checked = true
			if c.notify.waitArmed(ctx, w.kw) {
				failures--
				continue
			}
		}
		wait, namedOnly := delay, false
		switch {
		case qe.Count(NodeOK) > 0:
			// A split vote (or too little validity left): the others'
			// releases name the longest waiter, who goes at once.
			splits++
			d := min(splitMin<<min(splits-1, 16), splitMax)
			wait, namedOnly = rand.N(d+1), true
		case qe.RetryAfter > 0:
			splits = 0
			wait = qe.RetryAfter + rand.N(expiryJitter+1)
		default:
			splits = 0
		}
		if !c.notify.armed(w.kw) {
			wait = min(wait, delay) // no announcements: do not sleep past the back-off
		}
		if err := c.sleep(ctx, w, wait, namedOnly); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, errors.Join(ErrClosed, qe)
			}
			qe.Cause = err
			return nil, qe
		}
	}
}

// sleep waits d, or until a release is announced (with namedOnly, one
// that named w), ctx ends (its error) or the Client closes (ErrClosed).
func (c *Client) sleep(ctx context.Context, w *waiter, d time.Duration, namedOnly bool) error {
	t := c.cfg.clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			return nil
		case <-w.wake:
			if !namedOnly || w.named.Load() {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return ErrClosed
		}
	}
}

// endWait ends w's wait: it drops its subscription and takes it out of the
// queues, in the background, on every node that may still hold its entry
// (with l acquired, the nodes that granted it removed it already).
func (c *Client) endWait(ctx context.Context, key string, w *waiter, l *Lock) {
	if w.kw != nil {
		c.notify.leave(w)
	}
	if !w.queued {
		return
	}
	for i, p := range c.pools {
		if l != nil && l.acq != nil && l.acq.nodes[i].Status == NodeOK {
			continue
		}
		if !c.begin(1) {
			return
		}
		args := []any{waitersKey(key), deadlinesKey(key), reservedKey(key), w.id}
		if s, ok := p.(pool.Starter); ok {
			s.StartEval(bgCall{c}, leaveScript, args...)
			continue
		}
		go func() {
			defer c.bg.Done()
			ctx, cancel := c.nodeContext(ctx)
			defer cancel()
			_, _ = p.Eval(ctx, leaveScript, args...)
		}()
	}
}

// bgCall receives the reply of a background command that nobody reads.
type bgCall struct{ c *Client }

func (b bgCall) Receive(any, error) { b.c.bg.Done() }
