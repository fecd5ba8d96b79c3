package redlock

import (
	"context"
	"time"
)

// Lock takes key for ttl, round after round, until it succeeds or ctx
// ends. Its first round is TryLock's; after a refusal it waits without
// polling: it subscribes to the key's release announcements, queues on
// the nodes (WithHandoffWindow) so that waits are served in the order they
// began, and sleeps until a release concerns it or the holder's key runs
// out. A release may hand the key straight to it. When ctx ends first the
// error matches both ErrNotAcquired and ctx.Err(); other errors are as
// for TryLock. See docs/waiting.md.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, err := c.lockConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	since := c.cfg.clock.Now()
	// The first round is a plain SET NX, so that an uncontended Lock costs
	// what TryLock does; not when the Client already waits for the key
	// (it is likely held, and the script queues) or the lock is fenced.
	var first *round
	subscribed, armed := c.notify.state(key)
	if !subscribed && !cfg.fencing {
		var l *Lock
		if l, first, err = c.acquire(ctx, key, ttl, cfg, nil, true); err == nil || asRefusal(err) == nil {
			c.acquired(key, since, false, l, err)
			return l, err
		}
	}
	w, err := c.newWaiter(key, ttl, cfg, since)
	if err != nil {
		c.acquired(key, since, false, nil, err)
		return nil, err
	}
	l, err := w.lock(ctx, first, armed)
	c.acquired(key, since, true, l, err)
	return l, err
}

// answeredWithError reports whether a node of the round answered with an
// error reply.
func answeredWithError(qe *QuorumError) bool {
	for _, n := range qe.Nodes {
		if n.Status == NodeFailed && replied(n.Err) {
			return true
		}
	}
	return false
}
