package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/clock"
)

// lockContext is the context of a Lock (see Lock.Context). Cancellation
// and the cause come from an ordinary context.WithCancelCause, so children
// made with the context package attach to it without a goroutine and
// context.Cause works on them; only Deadline is the lock's own, because
// it moves with every extension and runs on the Client's clock.
type lockContext struct {
	context.Context // WithCancelCause(WithoutCancel(the acquiring call's context))
	l               *Lock
	cancel          context.CancelCauseFunc
	timer           clock.Timer // ends the context at deadline; nil when born ended
	deadline        time.Time   // guarded by l.mu: the deadline last armed
}

// Deadline returns when the context ends unless the lock is extended:
// the validity end (Until), or the WithMaxHold limit when that comes
// first, minus the WithSafetyMargin margin. It moves with each successful
// extension. On a Client with a fake clock it is a time on that clock.
func (c *lockContext) Deadline() (time.Time, bool) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.deadline, !c.deadline.IsZero()
}

// Context returns a context that lives while the lock is known to be held.
// It ends with a cause (context.Cause): ErrExpired when the validity, less
// WithSafetyMargin, runs out or WithMaxHold is reached; ErrReleased on
// Unlock; a *QuorumError matching ErrLockLost when an extension proves the
// loss or automatic extension cannot reach a quorum. Its Deadline moves
// with each Extend; it keeps the acquiring context's values, not its
// cancellation. It is made on first use; every call returns the same one.
// A live context cannot promise the lock is still held when the caller
// acts: see docs/critical-sections.md.
func (l *Lock) Context() context.Context {
	l.mu.Lock()
	expired := false
	if l.ctx == nil {
		l.ctx, expired = l.newContextLocked()
	}
	lc := l.ctx
	l.mu.Unlock()
	if expired {
		l.ended(ErrExpired)
	}
	return lc
}

// newContextLocked makes the lock's context; expired reports that it
// found the validity run out and ended the lock.
func (l *Lock) newContextLocked() (lc *lockContext, expired bool) {
	parent := l.parent
	if parent == nil {
		parent = context.Background()
	}
	inner, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	lc = &lockContext{Context: inner, l: l, cancel: cancel, deadline: l.deadlineLocked()}
	clk := l.c.cfg.clock
	switch now := clk.Now(); {
	case l.cause != nil:
		cancel(l.cause)
	case !now.Before(lc.deadline):
		l.cause, expired = ErrExpired, true
		cancel(ErrExpired)
	default:
		lc.timer = clk.AfterFunc(lc.deadline.Sub(now), l.expire)
	}
	return lc, expired
}

// deadlineLocked is when the lock's context ends unless the lock is
// extended; zero when the validity is unknown.
func (l *Lock) deadlineLocked() time.Time {
	end := l.until
	if end.IsZero() {
		return end
	}
	if !l.holdEnd.IsZero() && l.holdEnd.Before(end) {
		end = l.holdEnd
	}
	return end.Add(-l.margin)
}

// expire runs when the context's timer fires. An extension that moved the
// deadline after the timer had already fired re-arms it instead.
func (l *Lock) expire() {
	l.mu.Lock()
	if l.cause != nil {
		l.mu.Unlock()
		return
	}
	d := l.deadlineLocked()
	if now := l.c.cfg.clock.Now(); now.Before(d) {
		l.ctx.timer.Reset(d.Sub(now))
		l.mu.Unlock()
		return
	}
	ended := l.endLocked(ErrExpired)
	l.mu.Unlock()
	if ended {
		l.ended(ErrExpired)
	}
}

// extendedLocked moves the context's deadline after Until moved.
func (l *Lock) extendedLocked() {
	lc := l.ctx
	if lc == nil || l.cause != nil {
		return
	}
	lc.deadline = l.deadlineLocked()
	lc.timer.Reset(lc.deadline.Sub(l.c.cfg.clock.Now()))
}

// end records why the lock ended and ends its context; the first cause
// wins. It is recorded even when no context exists yet, so that one made
// later is born ended.
func (l *Lock) end(cause error) {
	l.mu.Lock()
	ended := l.endLocked(cause)
	l.mu.Unlock()
	if ended {
		l.ended(cause)
	}
}

// endLocked is end under l.mu; it reports whether cause ended the lock
// (it was live), and the caller then reports it (Lock.ended) after
// unlocking.
func (l *Lock) endLocked(cause error) bool {
	if l.cause != nil {
		return false
	}
	l.cause = cause
	if lc := l.ctx; lc != nil {
		if lc.timer != nil {
			lc.timer.Stop()
		}
		lc.cancel(cause)
	}
	return true
}

// live reports whether the lock has not ended and its context's deadline
// has not passed.
func (l *Lock) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause == nil && l.c.cfg.clock.Now().Before(l.deadlineLocked())
}
