package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
)

// Observe delivers each new leader of the election, in term order: never
// a term lower than or equal to one it already delivered. It asks the
// nodes (as Leader does) at once, whenever a node announces a new leader
// record, and every second in case an announcement was lost; a leader
// that no quorum names yet is not delivered, and leaders that follow
// each other faster than the reader reads may be skipped (the newest
// wins). The channel is closed when ctx ends or the Client closes; an
// empty election name or a nil ctx give a channel closed at once. The
// reading goroutine is the Client's background work: Close waits for it,
// and it never blocks the Client's announcements while the channel is
// not read.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	if e.check(ctx) != nil {
		close(out)
		return out
	}
	o := &observer{e: e, out: out, wake: make(chan struct{}, 1)}
	if !e.c.bg.goTracked(func() { o.run(ctx) }) {
		close(out)
	}
	return out
}

// observer is one Observe call: it listens to the leader record's
// announcements (it implements listener) and asks for the leader in its
// own goroutine.
type observer struct {
	e    *Election
	out  chan Leader
	wake chan struct{} // signalled on every announcement
}

// run asks for the leader and delivers each new one until ctx ends or
// the Client closes.
func (o *observer) run(ctx context.Context) {
	defer close(o.out)
	c := o.e.c
	if kw := c.notify.join(wire.LeaderKey(o.e.name), o); kw != nil {
		defer c.notify.leave(kw, o)
	}
	var last uint64
	for {
		if l, err := o.e.Leader(ctx); err == nil && l.Term > last {
			select {
			case o.out <- l:
				last = l.Term
			case <-ctx.Done():
				return
			case <-c.bg.closing():
				return
			}
		}
		if !o.sleep(ctx) {
			return
		}
	}
}

// sleep waits for an announcement or observeEvery; it reports false when
// ctx ended or the Client closed first.
func (o *observer) sleep(ctx context.Context) bool {
	c := o.e.c
	t := c.cfg.clock.NewTimer(observeEvery)
	defer t.Stop()
	select {
	case <-t.C():
	case <-o.wake:
	case <-ctx.Done():
		return false
	case <-c.bg.closing():
		return false
	}
	return true
}

// released implements listener: a node announced a new leader record.
func (o *observer) released(int, string) { o.poke() }

// handedOff implements listener: nothing is handed off on the record.
func (o *observer) handedOff(int, string, int, uint64) {}

// subscribed implements listener: the observer asks every observeEvery
// anyway.
func (o *observer) subscribed(int) {}

// poke implements listener: the observer asks again.
func (o *observer) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Run takes part in the election until ctx ends: it campaigns (as
// Campaign does, with value and ttl), and once this caller leads, calls
// fn with the leadership's context (the lock's, which ends as soon as the
// leadership may be lost, or when ctx ends) and the term; when fn returns
// it resigns (Unlock), and campaigns again. fn is called only after a
// win, once per term, and never after ctx ended. fn must return soon
// after its context ends: a new leader may be elected from then on.
//
// It returns ctx's error once ctx ends. When fn returns an error while its
// leadership is live, Run resigns and returns that error: a failing
// leader is not re-elected by itself (what fn returns after its context
// ended is dropped: that end is the leadership's). It returns
// ErrClosed when the Client closes, and fails at once on bad
// arguments (those of Campaign, or a nil fn). opts are Campaign's.
func (e *Election) Run(ctx context.Context, value string, ttl time.Duration, fn func(ctx context.Context, term uint64) error, opts ...LockOption) error {
	if fn == nil {
		return errors.New("redlock: election Run needs a function to run")
	}
	if err := e.checkCampaign(ctx, value, ttl); err != nil {
		return err
	}
	if _, err := e.c.lockConfig(e.key, ttl, campaignOptions(opts)); err != nil {
		return err
	}
	for {
		l, err := e.Campaign(ctx, value, ttl, opts...)
		switch {
		case ctx.Err() != nil:
			if l != nil {
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
			return ctx.Err()
		case err != nil:
			return err
		}
		if err := e.lead(ctx, l, fn); err != nil {
			return err
		}
	}
}

// lead runs fn for the term l won, and resigns when it returns (also when
// it panics). It returns fn's error when fn failed while l was live.
func (e *Election) lead(ctx context.Context, l *Lock, fn func(context.Context, uint64) error) error {
	lctx := l.Context()
	fnCtx, stop := context.WithCancelCause(lctx)
	defer stop(nil)
	defer context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })()
	defer func() { _ = l.Unlock(context.WithoutCancel(ctx)) }()
	if fnCtx.Err() != nil || ctx.Err() != nil {
		return nil // the leadership or ctx ended before fn could start
	}
	if err := fn(fnCtx, l.Fence()); err != nil && fnCtx.Err() == nil && ctx.Err() == nil {
		return err
	}
	return nil
}
