package redlock

import (
	"context"
	"log/slog"
	"time"
)

// Observer is told what a Client does: every quorum round it decides,
// and the events of each lock's life (WithObserver). The Client calls it
// synchronously, from the goroutine of the call that caused it (a
// TryLock, Lock, Extend or Unlock caller, the lock's automatic extension,
// the timer of its context, a restart check, or an election's Observe
// goroutine for EventTermRegressed): it must return quickly, must not
// block, and must not call the Client or the Lock. Nothing is built for
// it when no Observer is set. See docs/observability.md.
type Observer interface {
	// Round is called once a round is decided. info and its Nodes are
	// valid only during the call: copy what is kept.
	Round(info *RoundInfo)
	// Event is called for each Event.
	Event(e Event)
}

// WithObserver adds o to the Client's observers; each call adds one, and
// they are called in the order given. Default: none.
func WithObserver(o Observer) Option {
	return clientOption(func(c *clientConfig) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	})
}

// RoundInfo is one decided round: an acquisition, an extension, a release,
// the write-back of a fence, or a lock taken by hand-offs (Op "handoff":
// the nodes that handed the key over are NodeOK, with no latency).
type RoundInfo struct {
	Op       Op
	Key      string        // the lock's name as its caller gave it, as in Event.Key
	Start    time.Time     // when the first command was sent
	Duration time.Duration // from Start to the decision
	// Nodes is every node, in the order the Client was given them, with
	// its outcome and latency as known at the decision: a node that had
	// not replied yet is NodePending.
	Nodes []NodeResult
	Won   bool // a quorum did what was asked
	// Validity is what the round left of the lock: for a won acquisition
	// or extension (or hand-off), the time from the decision to Until;
	// zero otherwise.
	Validity time.Duration
	// Drift is the allowance for clock drift subtracted from the TTL
	// (WithDriftFactor); zero for releases.
	Drift time.Duration
}

// EventKind says what an Event reports.
type EventKind uint8

// The events of a lock's life and of its nodes.
const (
	// EventAcquired: TryLock or Lock (or another kind's call: Event.Lock)
	// returned a lock. Duration is the call's time; Wait is how long Lock
	// waited after its first round was refused (zero when that round took
	// the lock, and for TryLock).
	EventAcquired EventKind = iota + 1
	// EventNotAcquired: TryLock or Lock failed; Err is its error (a
	// *QuorumError: Busy, unreachable nodes, or the context's end).
	EventNotAcquired
	// EventReleased: Unlock released the lock on a quorum. Duration is
	// how long it was held (from its acquisition round's start; zero for
	// a restored lock).
	EventReleased
	// EventLost: the lock ended before Unlock: Err is the cause its
	// context ends with (ErrLockLost from an extension or a release that
	// found the key gone, ErrExpired when its validity ran out). Duration
	// is how long it was held. Reported once per lock, when the Client
	// learns it.
	EventLost
	// EventExtendFailed: an extension round (Extend, or automatic
	// extension) did not reach a quorum; Err is its error. The lock may
	// still be valid (see Lock.Validity).
	EventExtendFailed
	// EventNodeReset: a node lost its data (restarted without
	// persistence, or its keys were flushed); Node names it, Err says how
	// it was seen.
	EventNodeReset
	// EventNodeExcluded: restart safety does not count Node toward any
	// quorum for Duration (WithRestartSafety), or until it answers the
	// restart check when Duration is zero; Err says why.
	EventNodeExcluded
	// EventNotAnnounced: Unlock released the lock on Node, but the node
	// refused to announce the release (the user lacks the PUBLISH
	// permission for the key's channel): Lock calls that wait for the key
	// wake only by their back-off. Err is the node's error.
	EventNotAnnounced
	// EventTermRegressed: an observer of an election (Election.Observe)
	// found a leader whose term is at or below the term of a leader it
	// delivered before: a quorum of nodes lost the election key's fence
	// counter (docs/fencing.md), so terms no longer fence the leaders
	// apart. Key is the election key; Err names both terms. Reported once
	// per regression, by each observer that sees it.
	EventTermRegressed
)

// Event is something that happened to a lock or a node (Observer.Event).
type Event struct {
	Kind EventKind
	// Lock is the kind of lock the event concerns (the call that took
	// it); zero for node events (EventNodeReset, EventNodeExcluded).
	Lock LockKind
	// Key is the lock's name as its caller gave it, the same in every
	// event of the lock: a mutex's key, a multi-key lock's keys joined by
	// commas, a semaphore's, read-write lock's or election's name; ""
	// for node events.
	Key      string
	Node     string        // the node's address, for node events
	Duration time.Duration // see each EventKind
	Wait     time.Duration // EventAcquired: how long the call waited after its first round was refused
	Err      error         // see each EventKind
}

// observing reports whether anyone is told what the Client does.
func (c *Client) observing() bool { return len(c.cfg.observers) > 0 }

// observeRound tells the observers of decided round r of op on key,
// which left validity (zero when it failed) after subtracting drift.
func (c *Client) observeRound(o Op, key string, r *round, validity, drift time.Duration) {
	if !c.observing() || r == nil {
		return
	}
	// Observers are told right after the decision: now is when it was.
	info := RoundInfo{Op: o, Key: key, Start: r.start, Nodes: r.nodes, Won: r.ok, Drift: drift}
	if r.sent {
		info.Duration = c.cfg.clock.Now().Sub(r.start)
	}
	if r.ok && validity > 0 {
		info.Validity = validity
	}
	for _, ob := range c.cfg.observers {
		ob.Round(&info)
	}
}

// emit tells the observers of e, and logs a lost lock at Warn.
func (c *Client) emit(e Event) {
	if e.Kind == EventLost && c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "redlock: lock lost",
			slog.String("key", e.Key), slog.Duration("held", e.Duration), slog.String("cause", e.Err.Error()))
	}
	for _, ob := range c.cfg.observers {
		ob.Event(e)
	}
}

// acquiredAs reports the end of a call that took a lock of kind, called
// key (kind.name: the name the caller gave), that began at since and
// whose first round was refused at refused (zero when it was not); err
// is the call's error (nil when it took the lock).
func (c *Client) acquiredAs(kind LockKind, key string, since, refused time.Time, err error) {
	if !c.observing() {
		return
	}
	d := c.cfg.clock.Now().Sub(since)
	if err != nil {
		c.emit(Event{Kind: EventNotAcquired, Lock: kind, Key: key, Duration: d, Err: err})
		return
	}
	e := Event{Kind: EventAcquired, Lock: kind, Key: key, Duration: d}
	if !refused.IsZero() {
		e.Wait = c.cfg.clock.Now().Sub(refused)
	}
	c.emit(e)
}

// ended reports that lock l ended with cause, once, from the caller of
// endLocked after it released l.mu: anything but Unlock is a loss.
func (l *Lock) ended(cause error) {
	c := l.c
	if cause == ErrReleased || (!c.observing() && c.cfg.logger == nil) {
		return
	}
	l.mu.Lock()
	first := !l.lost
	l.lost = true
	l.mu.Unlock()
	if first {
		c.emit(Event{Kind: EventLost, Lock: l.kind.is(), Key: l.name(), Duration: l.held(), Err: cause})
	}
}

// releasedEvent reports the release round r of Unlock: the lock was
// released, or (no quorum) found lost unless that was reported already.
func (l *Lock) releasedEvent(r *round) {
	c := l.c
	if !c.observing() && c.cfg.logger == nil {
		return
	}
	if r.ok {
		if c.observing() {
			c.emit(Event{Kind: EventReleased, Lock: l.kind.is(), Key: l.name(), Duration: l.held()})
		}
		return
	}
	l.ended(c.quorumError(OpUnlock, l.name(), r, ErrLockLost, 0))
}

// held returns how long l has been held: from its acquisition round's
// start; zero for a restored lock.
func (l *Lock) held() time.Duration {
	if l.acquired.IsZero() {
		return 0
	}
	return l.c.cfg.clock.Now().Sub(l.acquired)
}
