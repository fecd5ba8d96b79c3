package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// MaxPermits is the most permits a semaphore may have: each acquisition
// looks at every permit slot on each node.
const MaxPermits = 64

// Semaphore lets up to a fixed number of holders at once hold its
// permits, each permit a *Lock (Client.Semaphore). Each permit is a slot
// taken on a quorum of nodes exactly as a lock is, so there are never
// more holders than permits, whatever order the nodes see the requests
// in, and a dead holder's permit comes back when its TTL runs out. It is
// safe for concurrent use. See docs/kinds.md.
type Semaphore struct {
	c       *Client
	name    string
	permits int
	keys    []any // the slots', the size's and the queue's keys, boxed once (wire.SemKeys)
	fkeys   []any // keys and the slots' fence counters, for fenced calls
	err     error // why every call fails: a bad name or number of permits
	status  func(addr string, reply any, err error) (NodeStatus, error)
	choice  choice // a round's choice among the slots
}

// Semaphore returns the semaphore name with permits permits. Nothing is
// sent until a call. permits below 1 or above MaxPermits, or an empty
// name, make every call fail. Every Client that uses name must give the
// same permits: a node keeps the number the first acquisition set, and a
// call that gives another fails with an error naming both (docs/kinds.md
// says how to change it).
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	s := &Semaphore{c: c, name: name, permits: permits}
	switch {
	case name == "":
		s.err = errEmptyName
	case permits < 1 || permits > MaxPermits:
		s.err = fmt.Errorf("redlock: semaphore %q: %d permits: a semaphore has from 1 to %d", name, permits, MaxPermits)
	default:
		s.keys, s.fkeys = wire.SemKeys(name, permits, false), wire.SemKeys(name, permits, true)
		s.status, s.choice = s.permitStatus, choice{n: permits, read: permitSlot, key: s.slotKey}
	}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits the semaphore was made with.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt to take a permit for ttl: on every node at
// once, the first free slot, and the permit is the slot a quorum took
// (the nodes that took another give it up). It succeeds and fails as
// TryLock does: a *QuorumError matching ErrNotAcquired says node by node
// why (Busy when every permit is held). It does not pass callers that
// wait (Acquire): while any wait, it gets a permit only when more are
// free than callers wait. WithFencing mints the fence of the permit's
// slot (each slot counts on its own). The *Lock's Key is the permit's
// slot key; Extend and Unlock work as on any lock.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	cfg, err := s.config(ctx, ttl, opts)
	if err != nil {
		return nil, err
	}
	since := s.c.cfg.clock.Now()
	l, _, err := s.try(ctx, ttl, cfg, -1, wire.Wait{})
	s.c.acquiredAs(KindSemaphore, s.name, since, time.Time{}, err)
	return l, err
}

// Acquire takes a permit for ttl, round after round, until it succeeds or
// ctx ends (the error then matches ErrNotAcquired and ctx.Err()), or the
// Client closes (ErrClosed). Between rounds it sleeps until a permit
// is announced free, a held permit's TTL runs out, or the back-off
// (WithRetry) passes; after a round in which the nodes took different
// slots it asks for the slot most of them took. Waiting calls queue on
// each node by when they began to wait, and a freed permit goes to the
// longest waiter (a node whose clock is more than a second off the
// Client's places a call by its own clock); a call that ends without a
// permit leaves the queues once its rounds are answered (docs/kinds.md).
// A quorum of nodes that keep another number of permits for the
// semaphore fails it at once, with the error TryAcquire gives.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	cfg, err := s.config(ctx, ttl, opts)
	if err != nil {
		return nil, err
	}
	since := s.c.cfg.clock.Now()
	l, refused, err := s.wait(ctx, ttl, cfg)
	s.c.acquiredAs(KindSemaphore, s.name, since, refused, err)
	return l, err
}

// Do runs fn while holding a permit, as Client.Do does for a lock: it
// waits as Acquire does, extends the permit while fn runs, and releases it
// when fn returns.
func (s *Semaphore) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	return s.c.do(ctx, fn, opts, func(ctx context.Context, opts []LockOption) (*Lock, error) {
		return s.Acquire(ctx, ttl, opts...)
	})
}

// config checks a call.
func (s *Semaphore) config(ctx context.Context, ttl time.Duration, opts []LockOption) (lockConfig, error) {
	switch {
	case ctx == nil:
		return lockConfig{}, errNilContext
	case s.err != nil:
		return lockConfig{}, s.err
	}
	return s.c.lockConfig(s.name, ttl, opts)
}

// try is one acquisition round of the waiting call w (zero for none),
// asking for slot prefer first (-1 for none). It returns the round too,
// nil when none was sent.
func (s *Semaphore) try(ctx context.Context, ttl time.Duration, cfg lockConfig, prefer int, w wire.Wait) (*Lock, *round, error) {
	g := grab{name: s.name, key: s.name, ttl: ttl, cfg: cfg, kind: permit{s}, final: w.ID == ""}
	var err error
	if g.token, err = newTokenWith(s.c.tokenPrefix); err != nil {
		return nil, nil, err
	}
	keys, epoch := s.keys, ""
	if cfg.fencing {
		if epoch, err = newToken(); err != nil {
			return nil, nil, err
		}
		keys = s.fkeys
	}
	g.req = request{script: wire.SemAcquire, args: wire.SemAcquireArgs(keys, s.permits, g.token, ttl.Milliseconds(), prefer, w, epoch),
		status: s.status, keep: true, gate: true, choice: &s.choice}
	return s.c.take(ctx, &g)
}

// wait takes a permit, waiting as Acquire says; refused is when its
// first round was refused (zero when it was not). Every round carries
// the call's place in the nodes' queues, and how long it has waited (a
// node whose clock is off the Client's places the call by that); after a
// round in which the nodes took different slots, the next asks for the
// one most took. A call that was refused anywhere leaves the queues when
// it ends, on each node after its rounds there. A round that a quorum
// failed with another number of permits ends the wait (sizeRefused).
func (s *Semaphore) wait(ctx context.Context, ttl time.Duration, cfg lockConfig) (l *Lock, refused time.Time, err error) {
	c := s.c
	began := c.cfg.clock.Now()
	w := wire.Wait{ID: c.id + "." + strconv.FormatUint(rand.Uint64(), 36),
		Priority: began.UnixMicro(), LifeMs: (c.refresh() + c.entrySlack()).Milliseconds()}
	prefer, queued := -1, false
	var sent pending // the rounds the leave must not overtake
	defer func() {
		if queued {
			c.tellAfter(ctx, wire.SemRelease, wire.SemReleaseArgs(s.name, s.keys, s.permits, "", -1, w.ID), &sent, l == nil)
		}
	}()
	return c.waitUnqueued(ctx, []string{s.name}, wakeOn{id: w.ID, kept: true}, cfg, func() (*Lock, error) {
		w.Waited = c.cfg.clock.Since(began).Microseconds()
		l, r, err := s.try(ctx, ttl, cfg, prefer, w)
		if r != nil {
			sent.add(r)
			prefer = r.won() // the slot most nodes took, if any did
			queued = queued || !grantedEverywhere(r)
		}
		if qe := asRefusal(err); qe != nil && sizeRefused(qe) {
			return nil, endWait{err}
		}
		return l, err
	})
}

// permitStatus reads a node's answer to the semaphore acquisition:
// granted with the slot it took, refused with the least TTL of the held
// slots, or failed (a semaphore of another size on the node, or a reply
// that is not the script's).
func (s *Semaphore) permitStatus(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		return NodeFailed, err
	}
	p, ok := wire.ParsePermit(reply)
	switch {
	case !ok || p.Code == wire.CodeAcquired && p.Slot >= s.permits:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf("unexpected reply %v", reply)}
	case p.Code == wire.CodeSize:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: &sizeError{name: s.name, node: p.Size, given: s.permits}}
	case p.Code == wire.CodeHeld:
		return NodeRefused, nil
	}
	return NodeOK, nil
}

// sizeError is a node's answer that it keeps another number of permits
// for the semaphore than the call gives.
type sizeError struct {
	name  string
	node  int64 // the permits the node keeps
	given int   // the permits the call gives
}

func (e *sizeError) Error() string {
	return fmt.Sprintf("semaphore %q has %d permits on this node, but this Client gives it %d: every Client must give the same (docs/kinds.md)",
		e.name, e.node, e.given)
}

// sizeRefused reports whether so many nodes of the refused round qe keep
// another number of permits that the others cannot make a quorum: no
// round of the call can succeed until the semaphore's size is changed
// (docs/kinds.md), and waiting would only run out its context.
func sizeRefused(qe *QuorumError) bool {
	n := 0
	for _, r := range qe.Nodes {
		var se *sizeError
		if r.Status == NodeFailed && errors.As(r.Err, &se) {
			n++
		}
	}
	return n > len(qe.Nodes)-qe.Quorum
}

// permitSlot reads the slot a granting node took.
func permitSlot(reply any) int {
	p, _ := wire.ParsePermit(reply)
	return p.Slot
}

// grantedEverywhere reports whether every node granted round r by its
// decision: no node can have queued the call.
func grantedEverywhere(r *round) bool {
	for _, n := range r.nodes {
		if n.Status != NodeOK {
			return false
		}
	}
	return true
}

// slotKey is the key of the permit slot i.
func (s *Semaphore) slotKey(i int) string { return wire.PermitKey(s.name, i) }

// permit is the kind of a semaphore's permit: the lock's key is the slot
// it holds.
type permit struct{ s *Semaphore }

func (permit) is() LockKind                { return KindSemaphore }
func (p permit) name(string) string        { return p.s.name }
func (permit) keys() []string              { return nil }
func (p permit) handle(_ *Lock, h *Handle) { h.Name, h.Permits = p.s.name, p.s.permits }

// undo gives up every slot the token holds but the one kept.
func (p permit) undo(_ *Client, _, token string, _ []any, keep int) (*pool.Script, []any) {
	return wire.SemRelease, wire.SemReleaseArgs(p.s.name, p.s.keys, p.s.permits, token, keep, "")
}

// fenceAt reads the fence of the slot a node took.
func (permit) fenceAt(reply any, _, _ int) (wire.Fence, error) {
	pr, ok := wire.ParsePermit(reply)
	if !ok || pr.Fence.Epoch == "" {
		return wire.Fence{}, fmt.Errorf("unexpected reply %v", reply)
	}
	return pr.Fence, nil
}

// extend extends the slot as a mutex's key is.
func (permit) extend(l *Lock, ms int64) (*pool.Script, []any) {
	return wire.Extend, wire.ExtendArgs(l.key, l.token, ms, "")
}

// release frees the slot and gives it to the longest waiter; every slot
// that holds the token when some nodes took another (Lock.split).
func (p permit) release(l *Lock) (*pool.Script, []any) {
	if l.split {
		return wire.SemRelease, wire.SemReleaseArgs(p.s.name, p.s.keys, p.s.permits, l.token, -1, "")
	}
	return wire.SemRelease, wire.SemReleaseSlotArgs(p.s.name, l.key, l.token)
}

// restorePermit restores a Handle of a permit: the semaphore's name and
// permits, and the slot's key, which must be one of the semaphore's.
func restorePermit(c *Client, h *Handle) (kind, string, error) {
	s := c.Semaphore(h.Name, h.Permits)
	if s.err != nil {
		return nil, "", s.err
	}
	if len(h.Keys) == 1 {
		for i := range s.permits {
			if h.Keys[0] == s.slotKey(i) {
				return permit{s}, h.Keys[0], nil
			}
		}
	}
	return nil, "", fmt.Errorf("redlock: handle of a permit of semaphore %q: its key is not one of the semaphore's %d slots", h.Name, h.Permits)
}
