package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// mutex is the kind of a lock on one key: TryLock, Lock, Do and Restore.
// A waiting Lock call's rounds queue it on the nodes, and its release
// hands the key to the head of the queue (waiter.go, docs/waiting.md).
type mutex struct{}

func (mutex) is() LockKind                                    { return KindMutex }
func (mutex) name(key string) string                          { return key }
func (mutex) keys() []string                                  { return nil }
func (mutex) handle(*Lock, *Handle)                           {}
func (mutex) fenceAt(reply any, n, k int) (wire.Fence, error) { return wire.FenceAt(reply, n, k) }

// undo gives a failed round up. A plain SET NX round was a first try:
// its key is most likely not contended, and the short release leaves it
// free; a script round (a waiter's, or fenced) gives the key to the head
// of its queue.
func (mutex) undo(c *Client, key, token string, plain []any, _ int) (*pool.Script, []any) {
	if plain != nil {
		return wire.ReleaseFree, wire.ReleaseFreeArgs(plain[0], plain[1])
	}
	return wire.Release, c.queue.ReleaseArgs(key, token, "", "")
}

// extend also accepts what a node handed a waiting call after its round
// (extendAlso).
func (mutex) extend(l *Lock, ms int64) (*pool.Script, []any) {
	return wire.Extend, wire.ExtendArgs(l.key, l.token, ms, extendAlso(l.token, l.handoffToken))
}

// release: a key that is not contended (the lock was taken without
// waiting and the Client waits for no one on it) is released the short
// way, which leaves the key free; release_free.lua says why the order of
// a queue, if there is one after all, still holds. Otherwise the queue's
// release gives the key to the head of the queue, and takes the call
// that waited for the lock out of the queue.
func (mutex) release(l *Lock) (*pool.Script, []any) {
	switch {
	case l.queueID != "" || l.c.notify.subscribed(l.key):
		return wire.Release, l.c.queue.ReleaseArgs(l.key, l.token, l.queueID, l.handoffToken)
	case l.plainArgs != nil:
		return wire.ReleaseFree, wire.ReleaseFreeArgs(l.plainArgs[0], l.plainArgs[1])
	}
	return wire.ReleaseFree, wire.ReleaseFreeArgs(l.key, l.token)
}

// restoreMutex restores a Handle of a mutex: its one key.
func restoreMutex(_ *Client, h *Handle) (kind, string, error) {
	if len(h.Keys) != 1 || h.Keys[0] == "" {
		return nil, "", errors.New("redlock: handle of a mutex: it has one key")
	}
	return mutex{}, h.Keys[0], nil
}

// restoreWaited gives a restored lock whose token says that a waiting
// call took it (waitToken) what that call's release needs: it also
// takes the call out of the queues, and gives up what a node handed to
// it after its round.
func restoreWaited(l *Lock) {
	if id, handoff, ok := waitToken(l.token); ok {
		l.queueID, l.handoffToken = id, handoff
	}
}

// TryLock makes one attempt to take key for ttl: SET key token NX PX ttl on
// every node at once, decided as soon as the outcome is known. It
// succeeds with a quorum and positive validity (ttl less the round's time
// and the drift allowance; above WithMinValidity when given). On failure
// it waits for the nodes still to answer (until the node timeout), releases
// every node that may hold the token, and returns once each answered the
// release or had a node timeout to (a silent one is released in the
// background), with a *QuorumError matching ErrNotAcquired that tells
// node by node what happened. When ctx ends first it returns then, with
// ctx.Err() in the error, and leaves the undoing to the background. Bad arguments
// fail before any node is asked; a closed Client returns ErrClosed.
// See docs/algorithm.md.
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, err := c.lockConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	var since time.Time
	if c.observing() {
		since = c.cfg.clock.Now()
	}
	g, err := c.mutexGrab(mutex{}, key, ttl, cfg, nil)
	if err != nil {
		return nil, err
	}
	g.final = true
	l, _, err := c.take(ctx, &g)
	c.acquiredAs(KindMutex, key, since, time.Time{}, err)
	return l, err
}

// mutexGrab describes an acquisition round of key, of kind k (a mutex,
// or an election's leadership): a plain one (SET NX
// PX, the cheapest command there is) unless w is a waiting call's round
// (nil for none) or the lock is fenced; otherwise the acquisition script, which also
// queues w when the key is held and reports the holder's TTL (a
// reservation of the key for a waiter refuses SET NX too). The token is
// new, or for the round of a waiter that takes hand-offs, its hand-off
// token and the round's number (waiterRoundToken).
func (c *Client) mutexGrab(k kind, key string, ttl time.Duration, cfg lockConfig, w *wire.Waiter) (grab, error) {
	g := grab{name: k.name(key), key: key, ttl: ttl, cfg: cfg, kind: k}
	var err error
	if w != nil && w.Handoff != "" {
		g.token = waiterRoundToken(w.Handoff, w.Round)
	} else if g.token, err = newTokenWith(c.tokenPrefix); err != nil {
		return g, err
	}
	ms := ttl.Milliseconds()
	if w == nil && !cfg.fencing {
		g.req = request{cmd: "SET", args: wire.SetArgs(key, g.token, ms), status: setStatus}
	} else {
		var epoch string
		if cfg.fencing {
			if epoch, err = newToken(); err != nil {
				return g, err
			}
		}
		var ww wire.Waiter // a caller that does not wait, unless w is one
		if w != nil {
			ww = *w
		}
		g.req = request{script: wire.Acquire, args: c.queue.AcquireArgs(key, g.token, ms, ww, epoch),
			status: grantStatus, keep: true}
	}
	g.req.gate = true // restart safety: only trusted nodes count
	return g, nil
}

// queueGrab describes the first round of the waiting call w on key (of
// kind k) as a
// transaction (wire.QueueTx) on every node: it queues w and reads the
// key, and takes nothing. Only when txReady.
func (c *Client) queueGrab(k kind, key string, ttl time.Duration, cfg lockConfig, w wire.Waiter) grab {
	g := grab{name: k.name(key), key: key, ttl: ttl, cfg: cfg, kind: k, token: waiterRoundToken(w.Handoff, w.Round)}
	g.req = request{tx: &queueTx{key: key, cmds: c.queue.QueueTx(key, ttl.Milliseconds(), w), w: w},
		status: grantStatus, keep: true, gate: true}
	return g
}

// txReady reports whether a waiting call's first round can be a
// transaction: every pool sends them (pool.New's), and no node refused
// one.
func (c *Client) txReady() bool { return c.allTx && !c.noTx.Load() }

// Restore returns a handle on a lock taken elsewhere, for example by another
// process that passed on its key and token. Its validity is unknown (zero)
// until Extend succeeds. Extend and Unlock on it work as on a lock this
// Client took; for a lock that Lock got after waiting (not fenced, with
// queueing on), the token also names the Lock call, and Unlock takes the
// call out of the queues too (see Lock.Token). It restores a mutex only:
// a lock of any kind is restored from its Handle (RestoreHandle).
func (c *Client) Restore(key, token string) *Lock {
	l := &Lock{c: c, key: key, token: token, kind: mutex{}}
	restoreWaited(l)
	return l
}
