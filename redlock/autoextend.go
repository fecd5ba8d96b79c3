package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// extender keeps one lock alive: it extends the lock every interval until
// the lock ends. It is started at acquisition by WithAutoExtend (and by
// Do), runs in one goroutine counted in the Client's background work, and
// returns when the lock's context ends (Unlock, loss, expiry), when the
// Client is closed, or when WithMaxHold says
// there is to be no further extension. Unlock waits for it to return.
//
// The rule for failures:
//
//   - An extension that finds the key no longer ours on more than N-quorum
//     nodes proves the loss: Extend ends the lock with ErrLockLost at once,
//     and the extender stops. Nothing is retried; nothing is re-created.
//   - An extension that fails without that proof (nodes failed or did not
//     answer in time) is retried after a short random delay, a quarter to
//     half a node timeout, while the context lives. Once attempts have
//     failed for a whole node timeout, counted from the start of the first
//     failed attempt, the lock ends with ErrLockLost: we can no longer show
//     that a quorum will keep it, and letting the holder run on to the
//     validity end would only cut its work off later, mid-way. The
//     validity end comes first when it is nearer (ErrExpired).
//
// So with a quorum of nodes down, the holder hears ErrLockLost within one
// interval plus one node timeout (plus one round) of the failure, and
// never later than the validity end.
type extender struct {
	interval time.Duration
	done     chan struct{} // closed when the goroutine has returned
}

// startExtender starts automatic extension; it does nothing on a closed
// Client, where the lock just runs out.
func (l *Lock) startExtender(cfg lockConfig) {
	ctx := l.Context() // the extender stops when it ends
	e := &extender{interval: cfg.extendInterval(l.ttl), done: make(chan struct{})}
	if l.c.bg.goTracked(func() { e.run(ctx, l) }) {
		l.ext = e
	}
}

func (e *extender) run(ctx context.Context, l *Lock) {
	c := l.c
	defer close(e.done)
	t := c.cfg.clock.NewTimer(e.untilNext(l))
	defer t.Stop()
	for {
		select {
		case <-t.C():
		case <-ctx.Done():
			return
		case <-c.bg.closing():
			return
		}
		if held, last := e.extend(l, ctx); !held || last {
			return
		}
		t.Reset(e.untilNext(l))
	}
}

// untilNext is the wait before the next extension: the interval counted
// from the start of the round that set the current validity (which is what
// the validity counts from), not from when that round returned.
func (e *extender) untilNext(l *Lock) time.Duration {
	l.mu.Lock()
	since := l.since
	l.mu.Unlock()
	return e.interval - l.c.cfg.clock.Since(since)
}

// nextTTL is the ttl of the next automatic extension: the lock's ttl, or
// less when WithMaxHold ends the hold sooner; last is set when this is the
// final extension the limit allows, and ttl is 0 when none is.
func (l *Lock) nextTTL() (ttl time.Duration, last bool) {
	if l.holdEnd.IsZero() {
		return l.ttl, false
	}
	left := l.holdEnd.Sub(l.c.cfg.clock.Now())
	if left >= l.ttl {
		return l.ttl, false
	}
	if l.c.checkTTL(left) != nil {
		return 0, true
	}
	return left, true
}

// extend makes one automatic extension, retrying failures that do not
// prove the loss as the type comment says. Each attempt works out its ttl
// afresh, so that a retry never carries the lock past WithMaxHold. It
// reports whether the lock is still held, and whether that extension was
// the last the limits allow.
func (e *extender) extend(l *Lock, ctx context.Context) (held, last bool) {
	c := l.c
	clk, nt := c.cfg.clock, c.cfg.nodeTimeout
	var first time.Time // start of the first failed attempt
	for {
		if !l.live() {
			return false, true // ended, or past the deadline: the context's timer ends it
		}
		ttl, last := l.nextTTL()
		if ttl == 0 {
			return false, true // the hold limit leaves no room for another extension
		}
		start := clk.Now()
		err := l.Extend(ctx, ttl)
		if c.onExtend != nil {
			c.onExtend(err)
		}
		if err == nil {
			return true, last
		}
		var qe *QuorumError
		if ctx.Err() != nil || !errors.As(err, &qe) {
			// The lock ended (Unlock, or Extend proved the loss), or the
			// Client was closed.
			return false, true
		}
		if first.IsZero() {
			first = start
		}
		left := first.Add(nt).Sub(clk.Now())
		if left <= 0 {
			l.end(qe)
			return false, true
		}
		t := clk.NewTimer(min(left, nt/4+rand.N(nt/4+1)))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return false, true
		case <-c.bg.closing():
			t.Stop()
			return false, true
		}
	}
}
