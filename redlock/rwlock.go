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

// RWLock is a read-write lock (Client.RWLock): readers share it, a writer
// holds it alone. Each hold is a *Lock taken on a quorum of nodes; on
// each node a writer is refused while a live reader or another writer is
// there. It is phase-fair: waiting writers queue in the order they began
// to wait, new readers wait while a writer waits, and when a writer
// releases, the readers that waited go in together before the next
// writer, so neither side starves. There is no reentrancy and no
// upgrade: release and take again. It is safe for concurrent use. See
// docs/kinds.md.
type RWLock struct {
	c    *Client
	name string
	keys [8]string // wire.RWKeys
}

// RWLock returns the read-write lock name. Nothing is sent until a call;
// an empty name makes every call fail. A name is one kind of lock: while
// a mutex (Lock, TryLock) holds name, every call fails with an error that
// says so, and while anyone holds the read-write lock, so does a mutex
// call on name.
func (c *Client) RWLock(name string) *RWLock {
	return &RWLock{c: c, name: name, keys: wire.RWKeys(name)}
}

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

// TryRLock makes one attempt to join the readers for ttl, as TryLock
// does: a *QuorumError matching ErrNotAcquired when a writer holds the
// lock or waits for it. A read-write lock mints no fences: WithFencing
// fails every call (errors.ErrUnsupported).
func (rw *RWLock) TryRLock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return rw.take(ctx, ttl, opts, true, false)
}

// RLock joins the readers for ttl, waiting until no writer holds or waits
// for the lock, or its turn comes after a writer's release, or ctx ends
// (the error then matches ErrNotAcquired and ctx.Err()). It sleeps until a release is announced, a holder's TTL runs
// out, or the back-off (WithRetry) passes.
func (rw *RWLock) RLock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return rw.take(ctx, ttl, opts, true, true)
}

// TryLock makes one attempt to take the lock alone for ttl.
func (rw *RWLock) TryLock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return rw.take(ctx, ttl, opts, false, false)
}

// Lock takes the lock alone for ttl, waiting as RLock does, behind the
// writers that began to wait before it and the readers whose turn it is;
// while it waits, new readers wait behind it.
func (rw *RWLock) Lock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return rw.take(ctx, ttl, opts, false, true)
}

// RDo runs fn as a reader, as Client.Do does for a lock.
func (rw *RWLock) RDo(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	return rw.c.do(ctx, fn, opts, func(ctx context.Context, opts []LockOption) (*Lock, error) {
		return rw.RLock(ctx, ttl, opts...)
	})
}

// Do runs fn as the writer, as Client.Do does for a lock.
func (rw *RWLock) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	return rw.c.do(ctx, fn, opts, func(ctx context.Context, opts []LockOption) (*Lock, error) {
		return rw.Lock(ctx, ttl, opts...)
	})
}

// take is every call: a reader's or the writer's, once or waiting.
func (rw *RWLock) take(ctx context.Context, ttl time.Duration, opts []LockOption, reader, wait bool) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, err := rw.c.lockConfig(rw.name, ttl, opts)
	if err == nil && cfg.fencing {
		err = unsupported("read-write lock", rw.name, "WithFencing")
	}
	if err != nil {
		return nil, err
	}
	since := rw.c.cfg.clock.Now()
	var l *Lock
	var refused time.Time
	if wait {
		l, refused, err = rw.wait(ctx, ttl, cfg, reader)
	} else {
		l, _, err = rw.try(ctx, ttl, cfg, reader, wire.Wait{})
	}
	kind := KindRWWrite
	if reader {
		kind = KindRWRead
	}
	rw.c.acquiredAs(kind, rw.name, since, refused, err)
	return l, err
}

// try is one round of a reader or of the writer, of the waiting call w
// (zero for none: its id, and a writer's priority and time waited). It
// returns the round too, nil when none was sent.
func (rw *RWLock) try(ctx context.Context, ttl time.Duration, cfg lockConfig, reader bool, w wire.Wait) (*Lock, *round, error) {
	waiter := w.ID
	c := rw.c
	g := grab{name: rw.name, key: rw.keys[1], ttl: ttl, cfg: cfg, kind: readHold{rw, waiter}, final: waiter == ""}
	var err error
	if g.token, err = newTokenWith(c.tokenPrefix); err != nil {
		return nil, nil, err
	}
	life := int64(0) // how long a refused waiting call keeps its place
	if waiter != "" {
		life = rw.placeLife().Milliseconds()
	}
	g.req = request{script: wire.RWRead, args: wire.RWReadArgs(&rw.keys, g.token, ttl.Milliseconds(), waiter, life),
		status: rw.status, keep: true, gate: true}
	if !reader {
		g.key, g.kind = rw.keys[0], writeHold{rw}
		g.req.script = wire.RWWrite
		g.req.args = wire.RWWriteArgs(&rw.keys, g.token, ttl.Milliseconds(), life, waiter, w.Priority, w.Waited)
	}
	return c.take(ctx, &g)
}

// placeLife is how long a waiting call's place on a node lasts unless it
// asks again, and how long a readers' turn lasts at most: its rounds come
// back within the refresh interval.
func (rw *RWLock) placeLife() time.Duration { return rw.c.refresh() + rw.c.entrySlack() }

// wait takes the lock, waiting as RLock and Lock say; refused is when
// its first round was refused (zero when it was not). Every round of a
// waiting call carries its id (and a writer's, its priority: when it
// began to wait), with which the nodes keep its place, also where a
// round took the lock: a round that fails on too many nodes leaves the
// call first where it was, and the nodes keep agreeing on the order. A
// call that sent a round takes its place away when it ends: a reader
// that took the lock with its release (readHold), anyone else with a
// message of its own. A place lapses no later than the hold it took.
func (rw *RWLock) wait(ctx context.Context, ttl time.Duration, cfg lockConfig, reader bool) (l *Lock, refused time.Time, err error) {
	c := rw.c
	began := c.cfg.clock.Now()
	w := wire.Wait{ID: c.id + "." + strconv.FormatUint(rand.Uint64(), 36), Priority: began.UnixMicro()}
	var sent pending // the rounds the leave must not overtake
	defer func() {
		switch {
		case l != nil && !reader:
			// A writer with the lock: its place goes at once, so that
			// the nodes (and Inspect) name the next waiting writer first.
			// A late round that lands after the leave puts the place
			// back on its node only, until it lapses there.
			c.tellAfter(ctx, wire.RWRelease, wire.RWLeaveArgs(rw.name, &rw.keys, w.ID, true), nil, false)
		case l == nil && sent.last != nil:
			// Without the lock: after the call's rounds, which would put
			// the place back.
			c.tellAfter(ctx, wire.RWRelease, wire.RWLeaveArgs(rw.name, &rw.keys, w.ID, false), &sent, true)
		}
	}()
	// A writer is named by the last reader's release when it is the first
	// waiting writer, and wakes alone; a readers' turn is told to readers.
	wake := wakeOn{id: w.ID}
	if reader {
		wake = wakeOn{side: wire.ForReaders}
	}
	return c.waitUnqueued(ctx, []string{rw.name}, wake, cfg, func() (*Lock, error) {
		w.Waited = c.cfg.clock.Since(began).Microseconds()
		l, r, err := rw.try(ctx, ttl, cfg, reader, w)
		if r != nil {
			sent.add(r)
		}
		return l, err
	})
}

// status reads a node's answer to a reader's or writer's round: granted,
// refused with the holders' TTL, or failed (a mutex holds the name, or a
// reply that is not the script's).
func (rw *RWLock) status(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		return NodeFailed, err
	}
	if isKindRefusal(reply) {
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf(
			"%q is held as a mutex (Lock, TryLock) on this node: a name is either a mutex or a read-write lock", rw.name)}
	}
	return grantStatus(addr, reply, nil)
}

// readHold is the kind of a reader's hold of a read-write lock: the
// lock's key is the readers' hash, which holds the token. waiter is the
// id of the waiting call that took it ("" for none, and for a restored
// Handle): its place goes with the release, which saves every node a
// script call per waiting reader (a waiting writer leaves at once).
type readHold struct {
	rw     *RWLock
	waiter string
}

// writeHold is the kind of the writer's hold: the lock's key is the
// writer's key.
type writeHold struct{ rw *RWLock }

func (readHold) is() LockKind                  { return KindRWRead }
func (writeHold) is() LockKind                 { return KindRWWrite }
func (h readHold) name(string) string          { return h.rw.name }
func (h writeHold) name(string) string         { return h.rw.name }
func (readHold) keys() []string                { return nil }
func (writeHold) keys() []string               { return nil }
func (h readHold) handle(_ *Lock, hd *Handle)  { hd.Name = h.rw.name }
func (h writeHold) handle(_ *Lock, hd *Handle) { hd.Name = h.rw.name }

// undo keeps the waiting call's place: it still waits.
func (h readHold) undo(_ *Client, _, token string, _ []any, _ int) (*pool.Script, []any) {
	return h.rw.release(token, "")
}
func (h writeHold) undo(_ *Client, _, token string, _ []any, _ int) (*pool.Script, []any) {
	return h.rw.release(token, "")
}
func (h readHold) release(l *Lock) (*pool.Script, []any)          { return h.rw.release(l.token, h.waiter) }
func (h writeHold) release(l *Lock) (*pool.Script, []any)         { return h.rw.release(l.token, "") }
func (h readHold) extend(l *Lock, ms int64) (*pool.Script, []any) { return h.rw.extend(l.token, ms) }
func (h writeHold) extend(l *Lock, ms int64) (*pool.Script, []any) {
	return h.rw.extend(l.token, ms)
}
func (readHold) fenceAt(any, int, int) (wire.Fence, error)  { return wire.Fence{}, errRWFence }
func (writeHold) fenceAt(any, int, int) (wire.Fence, error) { return wire.Fence{}, errRWFence }

// errRWFence: a read-write lock mints no fences (its calls refuse
// WithFencing before any round).
var errRWFence = errors.New("a read-write lock has no fence")

// release is the script and arguments that free token's hold, reader's
// or writer's, and announce it; a writer's begins the readers' turn. The
// place of waiter, the waiting call that took the hold ("" for none),
// goes with it.
func (rw *RWLock) release(token, waiter string) (*pool.Script, []any) {
	return wire.RWRelease, wire.RWReleaseArgs(rw.name, &rw.keys, token, waiter, rw.placeLife().Milliseconds())
}

// extend is the script and arguments that extend token's hold for ms.
func (rw *RWLock) extend(token string, ms int64) (*pool.Script, []any) {
	return wire.RWExtend, wire.RWExtendArgs(&rw.keys, token, ms)
}

// restoreRead and restoreWrite restore a Handle of a reader's or the
// writer's hold: the read-write lock's name.
func restoreRead(c *Client, h *Handle) (kind, string, error) {
	rw, err := c.restoreRW(h)
	if err != nil {
		return nil, "", err
	}
	return readHold{rw: rw}, rw.keys[1], nil
}

func restoreWrite(c *Client, h *Handle) (kind, string, error) {
	rw, err := c.restoreRW(h)
	if err != nil {
		return nil, "", err
	}
	return writeHold{rw}, rw.keys[0], nil
}

// restoreRW returns the read-write lock of a hold's Handle.
func (c *Client) restoreRW(h *Handle) (*RWLock, error) {
	rw := c.RWLock(h.Name)
	if h.Name == "" {
		return nil, errEmptyName
	}
	return rw, nil
}
