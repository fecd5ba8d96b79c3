package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/pool"
)

// maxMultiKeys bounds the keys of one multi-key lock.
const maxMultiKeys = 64

// multiKeys returns keys sorted, without repeats, or why they cannot be
// locked together.
func multiKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, errors.New("redlock: no keys")
	}
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	switch {
	case ks[0] == "":
		return nil, errors.New("redlock: empty key")
	case len(ks) > maxMultiKeys:
		return nil, fmt.Errorf("redlock: %d keys: a multi-key lock takes at most %d", len(ks), maxMultiKeys)
	}
	return ks, nil
}

// TryLockMulti makes one attempt to take every key of keys for ttl, or
// none: on each node one script takes them all if none is held, and
// changes nothing otherwise. The quorum, validity, WithMinValidity, the
// release of a failed attempt and WithFencing (a fence per key,
// Lock.Fences) follow TryLock's rules. Keys are sorted and repeats
// dropped; one distinct key is TryLock. It fails before asking any node
// for no keys, an empty key, or more than 64. On a node that is a Redis
// Cluster the keys must share a hash slot (a common hash tag): otherwise
// the node refuses (CROSSSLOT) and the error says so. See
// docs/waiting.md, "Locks over several keys".
func (c *Client) TryLockMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.multi(ctx, keys, ttl, opts, c.TryLock, func(ks []string, cfg lockConfig) (*Lock, bool, error) {
		l, _, err := c.acquireMulti(ctx, ks, ttl, cfg)
		return l, false, err
	})
}

// multi is TryLockMulti and LockMulti: it checks the call, hands one
// distinct key to single (TryLock or Lock), and otherwise takes the keys
// with take, which reports whether it waited, and tells the observers.
func (c *Client) multi(ctx context.Context, keys []string, ttl time.Duration, opts []LockOption,
	single func(context.Context, string, time.Duration, ...LockOption) (*Lock, error),
	take func(ks []string, cfg lockConfig) (*Lock, bool, error)) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	ks, err := multiKeys(keys)
	if err != nil {
		return nil, err
	}
	if len(ks) == 1 {
		return single(ctx, ks[0], ttl, opts...)
	}
	cfg, err := c.lockConfig(ks[0], ttl, opts)
	if err != nil {
		return nil, err
	}
	since := c.cfg.clock.Now()
	l, waited, err := take(ks, cfg)
	c.acquired(strings.Join(ks, ","), since, waited, l, err)
	return l, err
}

// LockMulti is TryLockMulti that waits until it holds every key or ctx
// ends (the error then matches ErrNotAcquired and ctx.Err()), or the
// Client is closed (pool.ErrClosed). Between attempts it sleeps until a
// release of one of the keys is announced, the refusing nodes' keys run
// out, or the back-off (WithRetry) passes. A multi-key call does not
// queue: single-key waiters of the same keys are served in their order,
// and a multi-key waiter takes the keys when it finds them all free. See
// docs/waiting.md, "Locks over several keys".
func (c *Client) LockMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.multi(ctx, keys, ttl, opts, c.Lock, func(ks []string, cfg lockConfig) (*Lock, bool, error) {
		return c.waitMulti(ctx, ks, ttl, cfg)
	})
}

// DoMulti is Do over several keys: it waits for all of them as LockMulti
// does, runs fn with the lock's context, extends the lock while fn runs,
// and releases every key when fn returns. See Do.
func (c *Client) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	return c.do(ctx, fn, opts, func(ctx context.Context, opts []LockOption) (*Lock, error) {
		return c.LockMulti(ctx, keys, ttl, opts...)
	})
}

// Keys returns the lock's keys, sorted: one for a lock taken by TryLock,
// Lock, Do or Restore.
func (l *Lock) Keys() []string {
	if l.keys == nil {
		return []string{l.key}
	}
	return slices.Clone(l.keys)
}

// Fences returns the fencing token of each key, in the order of Keys;
// nil unless the lock was taken WithFencing.
func (l *Lock) Fences() []uint64 {
	if l.fences == nil && l.fence != 0 {
		return []uint64{l.fence}
	}
	return slices.Clone(l.fences)
}

// name is what observers and logs call the lock: its key, or its keys
// joined by commas.
func (l *Lock) name() string {
	if l.keys == nil {
		return l.key
	}
	return strings.Join(l.keys, ",")
}

// acquireMulti is one multi-key acquisition round (and, fenced, the
// write-back of each key's fence).
func (c *Client) acquireMulti(ctx context.Context, ks []string, ttl time.Duration, cfg lockConfig) (*Lock, *round, error) {
	token, err := newTokenWith(c.tokenPrefix)
	if err != nil {
		return nil, nil, err
	}
	epoch := ""
	if cfg.fencing {
		if epoch, err = newToken(); err != nil {
			return nil, nil, err
		}
	}
	o := op{script: multiAcquireScript, args: multiAcquireArgs(ks, token, ttl.Milliseconds(), epoch),
		status: multiStatus(len(ks), cfg.fencing), keep: true, gate: true}
	c.beforeAcquire(ctx, ttl)
	r, err := c.run(ctx, false, o)
	if err != nil {
		return nil, nil, err
	}
	name := strings.Join(ks, ",")
	until := c.validUntil(r.start, ttl)
	c.observeRound(opAcquire, name, r, until.Sub(c.cfg.clock.Now()), c.drift(ttl))
	if !r.ok || until.Sub(c.cfg.clock.Now()) <= cfg.minValidity {
		return nil, r, c.failMulti(ctx, ks, token, r, until, ttl)
	}
	var fences []uint64
	if cfg.fencing {
		if fences, err = c.storeFences(ctx, ks, r, until, ttl, cfg.minValidity); err != nil {
			c.owe(ctx, multiReleaseScript, multiKeysArgs(ks, token, releasedPrefix), r, ttl)
			return nil, r, err
		}
		if until.Sub(c.cfg.clock.Now()) <= cfg.minValidity {
			return nil, r, c.failMulti(ctx, ks, token, r, until, ttl)
		}
	}
	l := c.newLock(ctx, ks[0], token, ttl, r, until, cfg)
	l.keys, l.fences = ks, fences
	if fences != nil {
		l.fence = fences[0]
	}
	return l, r, nil
}

// failMulti releases the failed multi-key round r and returns its error.
func (c *Client) failMulti(ctx context.Context, ks []string, token string, r *round, until time.Time, ttl time.Duration) error {
	validity := until.Sub(c.cfg.clock.Now())
	c.owe(ctx, multiReleaseScript, multiKeysArgs(ks, token, releasedPrefix), r, ttl)
	c.warnRefusals("node refused an acquisition", r)
	if !r.ok {
		validity = 0
	}
	e := c.quorumError(opAcquire, strings.Join(ks, ","), r, ErrNotAcquired, validity)
	c.readRefusals(e, r)
	return e
}

// multiStatus reads a node's answer to the multi-key acquisition of n
// keys: 1 (fenced: {1, counter, epoch per key}) when it took them, {0,
// pttl} when one was held. A node that refuses the keys because they are
// in different hash slots (a Redis Cluster) fails with an error that
// says what to do.
func multiStatus(n int, fenced bool) func(addr string, reply any, err error) (NodeStatus, error) {
	return func(addr string, reply any, err error) (NodeStatus, error) {
		var re pool.ReplyError
		if errors.As(err, &re) && strings.HasPrefix(string(re), "CROSSSLOT") {
			return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf(
				"the keys of a multi-key lock are in different hash slots of this Redis Cluster node: give them a common hash tag, as in {order42}:a and {order42}:b (%w)", err)}
		}
		if err != nil {
			return NodeFailed, err
		}
		if v, ok := reply.(int64); ok && v == codeAcquired && !fenced {
			return NodeOK, nil
		}
		if vs, ok := reply.([]any); ok && len(vs) == 1+2*n && fenced {
			if _, err := multiFences(vs, n); err == nil {
				return NodeOK, nil
			}
		}
		if a, ok := parseAcquire(reply); ok && a.code == codeHeld {
			return NodeRefused, nil
		}
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf("unexpected reply %v", reply)}
	}
}

// multiFences reads the counters and epochs of a fenced multi-key grant.
func multiFences(vs []any, n int) ([]fenceReply, error) {
	out := make([]fenceReply, n)
	for i := range out {
		fr, err := parseFenceReply([]any{int64(codeAcquired), vs[1+2*i], vs[2+2*i]})
		if err != nil {
			return nil, err
		}
		out[i] = fr
	}
	return out, nil
}

// storeFences writes back each key's fence, one more than the largest of
// its counters among the nodes that granted round r, as storeFence does
// for one key.
func (c *Client) storeFences(ctx context.Context, ks []string, r *round, until time.Time, ttl, minValidity time.Duration) ([]uint64, error) {
	fences := make([]uint64, len(ks))
	for i, n := range r.nodes {
		if n.Status != NodeOK {
			continue
		}
		vs, _ := r.replies[i].([]any)
		frs, err := multiFences(vs, len(ks))
		if err != nil {
			continue
		}
		for k, fr := range frs {
			fences[k] = max(fences[k], fr.counter)
			c.seeEpoch(i, keyslot.Slot(ks[k]), fr.epoch)
		}
	}
	for k, key := range ks {
		f, err := c.writeBackFence(ctx, key, fences[k]+1, until, ttl, minValidity)
		if err != nil {
			return nil, err
		}
		fences[k] = f
	}
	return fences, nil
}

// waitMulti takes ks, waiting as LockMulti says; waited reports whether
// the first round was refused.
func (c *Client) waitMulti(ctx context.Context, ks []string, ttl time.Duration, cfg lockConfig) (l *Lock, waited bool, err error) {
	l, _, err = c.acquireMulti(ctx, ks, ttl, cfg)
	qe := asRefusal(err)
	if err == nil || qe == nil {
		return l, false, err
	}
	mw, err := c.listenMulti(ks)
	if err != nil {
		return nil, true, errors.Join(err, qe)
	}
	defer mw.leave()
	mw.armed(ctx)
	for failures, splits := 1, 0; ; failures++ {
		if l, _, err = c.acquireMulti(ctx, ks, ttl, cfg); err == nil || asRefusal(err) == nil {
			return l, true, err
		}
		qe = asRefusal(err)
		d := cfg.retry.delay(failures)
		switch refused := qe.Count(NodeRefused); {
		case qe.Count(NodeOK) > 0 && refused < c.quorum:
			splits++ // split votes: the others' releases free the keys soon
			d = rand.N(min(splitMin<<min(splits-1, 16), splitMax) + 1)
		case qe.retryKnown:
			splits = 0
			d = min(qe.RetryAfter, c.refresh()) + rand.N(expiryJitter+1)
		}
		if !mw.isArmed() {
			d = min(d, cfg.retry.delay(failures))
		}
		if err := mw.sleep(ctx, d); err != nil {
			if errors.Is(err, pool.ErrClosed) {
				return nil, true, errors.Join(pool.ErrClosed, qe)
			}
			qe.Cause = err
			return nil, true, qe
		}
	}
}

// multiWaiter is a multi-key Lock call's subscription to its keys'
// release announcements: one waiter per key, sharing one wake channel.
type multiWaiter struct {
	c    *Client
	wake chan struct{}
	ws   []*waiter
}

// listenMulti subscribes to the announcements of every key of ks.
func (c *Client) listenMulti(ks []string) (*multiWaiter, error) {
	mw := &multiWaiter{c: c, wake: make(chan struct{}, 1)}
	for _, k := range ks {
		w := &waiter{c: c, key: k, wake: mw.wake}
		if w.kw = c.notify.join(k, w); w.kw == nil {
			mw.leave()
			return nil, pool.ErrClosed
		}
		mw.ws = append(mw.ws, w)
	}
	return mw, nil
}

// armed waits, at most one node timeout, until every key's subscription
// is confirmed on a quorum.
func (mw *multiWaiter) armed(ctx context.Context) {
	for _, w := range mw.ws {
		if !mw.c.notify.waitArmed(ctx, w.kw) {
			return
		}
	}
}

// isArmed reports whether every key's subscription is confirmed on a
// quorum: a release of any of them is then heard.
func (mw *multiWaiter) isArmed() bool {
	for _, w := range mw.ws {
		if !mw.c.notify.armed(w.key) {
			return false
		}
	}
	return true
}

// sleep waits d, or until a release of one of the keys is announced, ctx
// ends (its error) or the Client closes (pool.ErrClosed).
func (mw *multiWaiter) sleep(ctx context.Context, d time.Duration) error {
	t := mw.c.timer(d)
	defer mw.c.putTimer(t)
	select {
	case <-t.C():
	case <-mw.wake:
	case <-ctx.Done():
		return ctx.Err()
	case <-mw.c.bg.closing():
		return pool.ErrClosed
	}
	return nil
}

// leave ends the subscriptions.
func (mw *multiWaiter) leave() {
	for _, w := range mw.ws {
		if w.kw != nil {
			mw.c.notify.leave(w)
		}
	}
}
