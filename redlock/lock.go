package redlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lock is a lock held on a quorum of nodes, returned by TryLock, Lock or
// Restore. It is safe for concurrent use.
type Lock struct {
	c     *Client
	key   string
	token string
	// after are the rounds of the call that took the lock: Extend and
	// Unlock do not overtake them on a node. Empty for a restored lock.
	after pending
	fence uint64 // WithFencing: the fencing token; 0 without
	// queueID is the queue id the lock was waited for with; its release
	// drops any entry a node still has for it. "" when it did not wait.
	queueID string
	// plainArgs is the key and token as the plain round that took the
	// lock sent them, boxed, for its release to reuse; nil otherwise.
	plainArgs []any
	// handoffToken is the hand-off token of the Lock call that won the
	// lock after waiting: a node may hold another value of the call's
	// ("<handoffToken>/<round>" of a failed round, "<handoffToken>/h<round>"
	// of a hand-off after another round); the release gives those up too.
	// "" otherwise.
	handoffToken string
	// fences are a multi-key lock's fences, in the order of its keys,
	// with WithFencing; nil otherwise.
	fences []uint64
	// split says that some nodes of the round that took the lock (a
	// semaphore's) took another choice, or had not answered by its
	// decision: its release gives up every slot that holds the token,
	// not only the one won, so that Unlock leaves none behind.
	split bool
	// kind is the kind of lock it is (kind.go): how it is extended and
	// released, and what observers call it.
	kind kind

	acquired time.Time // start of the round that took the lock; zero for a restored one

	// mu guards what follows. It is a leaf: no other lock of the Client
	// is taken while it is held (the lock's context is ended under it,
	// and observers are told after it is released).
	mu       sync.Mutex
	until    time.Time // validity end on the client's clock; zero when unknown
	since    time.Time // start of the round that set until
	released bool
	lost     bool // EventLost was reported

	// The lock's context and automatic extension (context.go,
	// autoextend.go); zero for a restored lock.
	parent  context.Context // the acquiring call's: Context keeps its values
	ttl     time.Duration   // the acquisition's ttl, reused by automatic extension
	margin  time.Duration   // WithSafetyMargin
	holdEnd time.Time       // WithMaxHold: the hold ends by then; zero when unlimited
	ext     *extender       // set at acquisition with automatic extension
	cause   error           // guarded by mu: why the lock ended; nil while held
	ctx     *lockContext    // guarded by mu: made by the first Context call
}

// Key returns the lock's key; the first of its Keys for a lock taken by
// TryLockMulti, LockMulti or DoMulti.
func (l *Lock) Key() string { return l.key }

// Token returns the owner token: the Client's ID and a random value that
// only this acquisition knows ("<client id>:<random>"). A lock that Lock
// got after waiting (not fenced, with queueing on) has a token that
// starts with the Lock call's id instead ("<client id>.<n>/<random>",
// followed by "/<round>" when a round took it and "/h<round>" when
// releases handed it over after that round), so that a handle restored
// from it releases all the call was given. Anyone with the key and token
// can release the lock (see Restore), so treat it as a secret: do not log
// it.
func (l *Lock) Token() string { return l.token }

// Until returns when the lock's validity ends, on the Client's clock: the
// moment up to which no other client can hold it, as long as the nodes and
// clocks behave as the drift allowance assumes. It is the zero time when
// the validity is unknown (a restored lock not yet extended) and moves on
// each successful Extend.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Validity returns the time left until Until, never negative.
func (l *Lock) Validity() time.Duration {
	until := l.Until()
	if until.IsZero() {
		return 0
	}
	if d := until.Sub(l.c.cfg.clock.Now()); d > 0 {
		return d
	}
	return 0
}

// Extend gives the lock a new ttl on every node that still holds its token,
// never re-creating a key; with a quorum the validity is counted again from
// this round, Until and the context's deadline move. With fewer than a
// quorum it returns a *QuorumError matching ErrLockLost, and when a quorum
// said the key is no longer ours the lock's context ends with it. Once the
// context has ended it returns the cause and asks no node; after Unlock,
// ErrReleased; on a closed Client, ErrClosed. See docs/algorithm.md.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := l.c.checkTTL(ttl); err != nil {
		return err
	}
	l.mu.Lock()
	released, ended := l.released, l.cause
	l.mu.Unlock()
	switch {
	case released:
		return ErrReleased
	case ended != nil:
		// The lock's context has ended (lost or expired): the holder was
		// told to stop, and no extension brings the lock back.
		return ended
	}
	// Before the round: a node that restarts once it may hold the key for
	// ttl waits at least ttl before this Client counts it.
	l.c.noteTTL(ttl)
	req := request{status: doneStatus, after: l.after}
	req.script, req.args = l.kind.extend(l, ttl.Milliseconds())
	r, err := l.c.run(ctx, req)
	if err != nil {
		return err
	}
	until := l.c.validUntil(r.start, ttl)
	l.c.observeRound(OpExtend, l.name(), r, until.Sub(l.c.cfg.clock.Now()), l.c.drift(ttl))
	if r.ok && until.After(l.c.cfg.clock.Now()) {
		return l.extended(r, until)
	}
	err = l.notExtended(ctx, r, until)
	if l.c.observing() {
		l.c.emit(Event{Kind: EventExtendFailed, Lock: l.kind.is(), Key: l.name(), Err: err})
	}
	return err
}

// extended moves the lock's validity to until after the successful
// extension round r. The newest round decides, also when its ttl is
// shorter: the nodes now expire the key by it.
func (l *Lock) extended(r *round, until time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil && !l.released {
		return l.cause // the context ended while this round ran
	}
	if !l.released && !r.start.Before(l.since) { // an Unlock since then wins
		l.until, l.since = until, r.start
		l.extendedLocked() // the context's deadline moves too
	}
	return nil
}

// notExtended returns the error of the failed extension round r (valid
// until until had it counted); when a quorum said the key is no longer
// ours, the lock ends with it.
func (l *Lock) notExtended(ctx context.Context, r *round, until time.Time) error {
	if !r.ok {
		// Nodes that failed without an answer may have restarted without
		// their data: then the lock is gone from them.
		l.c.restartedSince(ctx, r)
	}
	now := l.c.cfg.clock.Now()
	e := l.c.quorumError(OpExtend, l.name(), r, ErrLockLost, 0)
	if r.ok {
		e.Validity = until.Sub(now)
	}
	l.mu.Lock()
	if !l.released && l.cause == nil && until.Before(l.until) && !r.start.Before(l.since) {
		// A shorter TTL: the nodes that ran the extension without its
		// answer reaching us expire the key by it now, so the validity
		// is cut to what it gives (an older round's success cannot undo
		// this). A deadline already passed ends the lock (ErrExpired).
		l.until, l.since = until, r.start
		l.extendedLocked()
	}
	l.mu.Unlock()
	if e.Count(NodeRefused) > len(e.Nodes)-e.Quorum {
		// Whatever validity was left is gone.
		l.mu.Lock()
		l.until, l.since = now, r.start // an older round's success cannot undo this
		ended := l.endLocked(e)         // the lock's context ends with this error
		l.mu.Unlock()
		if ended {
			l.ended(e)
		}
	}
	return e
}

// Unlock ends the lock's context (ErrReleased), stops automatic extension,
// and deletes the key on every node that still holds the token, never
// another owner's. It returns once every node has answered or the node
// timeout has passed: after a nil return no node that answered in time
// holds the token (a silent one is released in the background; see
// docs/algorithm.md, "Done when returned"). With fewer than a quorum it
// returns a *QuorumError matching ErrLockLost. A node that released the key but
// refused to announce it (the user lacks PUBLISH) does not fail the call:
// it is logged (WithLogger) and reported as EventNotAnnounced, since
// waiting Lock calls then wake only by the back-off. The release goes out
// even when ctx has ended (ctx.Err() joins the error); a closed Client
// returns ErrClosed.
func (l *Lock) Unlock(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	ctxLive := ctx.Err() == nil
	l.mu.Lock()
	l.released = true
	l.endLocked(ErrReleased) // the lock's context ends
	l.mu.Unlock()
	if ctxLive && ctx.Err() != nil {
		// ctx is the lock's own context, or derived from it: its end is
		// this Unlock's doing and must not cut the release short.
		ctx = context.WithoutCancel(ctx)
	}
	if l.ext != nil {
		<-l.ext.done // automatic extension has stopped: no extension follows the release
	}
	r, err := l.c.run(ctx, l.releaseRequest())
	if err != nil {
		return err
	}
	l.c.observeRound(OpUnlock, l.name(), r, 0, 0)
	l.mu.Lock()
	l.until = time.Time{}
	l.mu.Unlock()
	l.releasedEvent(r)
	// A node that did not answer may still hold the key: it is released
	// again in the background, for as long as the key can live.
	l.c.releaseUnanswered(ctx, r, max(l.ttl, l.c.cfg.maxTTL))

	if !r.ok {
		return l.c.quorumError(OpUnlock, l.name(), r, ErrLockLost, 0)
	}
	l.c.unannounced(l.name(), l.kind.is(), r)
	return nil
}

// releaseRequest is the release of l (its kind's), sent even when the
// caller's context has ended, and waited for on every node.
func (l *Lock) releaseRequest() request {
	req := request{status: doneStatus, after: l.after, always: true, all: true}
	req.script, req.args = l.kind.release(l)
	return req
}

// name is what observers, logs and errors call the lock: the name its
// caller gave (kind.name).
func (l *Lock) name() string { return l.kind.name(l.key) }

func (l *Lock) check(ctx context.Context) error {
	switch {
	case ctx == nil:
		return errNilContext
	case l.key == "":
		return errEmptyName
	case l.token == "":
		return errors.New("redlock: empty token")
	}
	return nil
}
