package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
)

// Observe delivers each new leader of the election, in term order: a
// leader whose term is lower than or equal to the last one delivered is
// delivered only when the terms went back (below). It asks the nodes (as
// Leader does) at once, whenever a node announces a new leader record,
// and every second in case an announcement was lost; a leader that no
// quorum names yet is not delivered. The channel holds one leader: when
// the reader is slower than the leaders change, the leader it has not
// read yet is replaced by the newer one, so that a reader that comes
// back late reads the newest leader seen, never an older one.
//
// Terms are the fences of the election key, and they increase only while
// the fence counters survive on every quorum of nodes (docs/fencing.md).
// When a quorum lost its counters, a new leader may have a term at or
// below one already delivered: Observe delivers it, with the term the
// nodes give, and reports the regression once, as an EventTermRegressed
// to the Client's observers and a record at Warn (WithLogger); from then
// on it counts from that term.
//
// The channel is closed when ctx ends or the Client closes; an empty
// election name or a nil ctx give a channel closed at once. The reading
// goroutine is the Client's background work: Close waits for it, and it
// never blocks the Client's announcements, nor waits for the reader.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
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
	out  chan Leader   // one leader; only run sends on it
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
	var last Leader // the last leader delivered; none while its Term is 0
	for {
		if l, err := o.e.Leader(ctx); err == nil && l != last {
			if last.Term != 0 && l.Term <= last.Term {
				o.e.termRegressed(last.Term, l.Term)
			}
			o.deliver(l)
			last = l
		}
		if !o.sleep(ctx) {
			return
		}
	}
}

// deliver puts l on the channel, in place of a leader the reader has not
// read yet. It never blocks: only run sends, so once the pending leader
// is taken out (by deliver or by the reader) there is room.
func (o *observer) deliver(l Leader) {
	for range 2 {
		select {
		case o.out <- l:
			return
		default:
		}
		select {
		case <-o.out: // the older leader, unread: l replaces it
		default:
		}
	}
}

// termRegressed reports that the election's leader has term to, at or
// below the term from of a leader delivered before it: a quorum of nodes
// lost the election key's fence counter.
func (e *Election) termRegressed(from, to uint64) {
	c := e.c
	if c.cfg.logger == nil && !c.observing() {
		return
	}
	err := fmt.Errorf("redlock: election %q: the leader's term went back from %d to %d: a quorum of nodes lost the election key's fence counter (docs/fencing.md)", e.name, from, to)
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "redlock: election term went back",
			slog.String("election", e.name), slog.Uint64("from", from), slog.Uint64("to", to),
			slog.String("cause", "a quorum of nodes lost the election key's fence counter (docs/fencing.md)"))
	}
	if c.observing() {
		c.emit(Event{Kind: EventTermRegressed, Lock: KindElection, Key: e.name, Err: err})
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
