package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// The acquisition engine: every kind of lock takes its keys through one
// round described by a grab, decided by take, undone by undo (owed
// releases) and fenced by mintFences. TryLock, the rounds of a waiting
// Lock and the multi-key calls only describe their grab; waiting is
// waiter.go's.

// grab is one acquisition round, described before it is sent: what it
// takes, the command that takes it (numbered and built once), and how to
// give it up on a node that may hold it.
type grab struct {
	name  string // what observers and errors call it: kind.name(key)
	key   string // the key; a multi-key lock's first; a semaphore's slot once won
	token string
	ttl   time.Duration
	cfg   lockConfig
	req   request // what every node is sent, and how its reply is read
	kind  kind    // the kind of lock it takes (kind.go)
	// adopt, when not nil, is a waiting call's: it gives the new lock
	// what the call knows (its queue id, its rounds, its hand-off token)
	// before anything else can read the lock (its extender starts).
	adopt func(l *Lock, r *round)
	// owedBy, when not nil, is a waiting call's record of its latest
	// round that owes each node a release, and seq is this round's
	// number: a later round's release on a node undoes this one's too
	// (superseder).
	owedBy *superseder
	seq    int64
	// final marks the round of a call that does not wait (TryLock and
	// its kin): refused, it returns once every node has answered the
	// round and its undoing, or the node timeout passed (done when
	// returned). A waiting call's rounds are undone in the background,
	// and its end waits for its leaving instead (waiter.end).
	final bool
}

// plain returns the key and token g's round sent as a plain SET NX, boxed;
// nil for a script's or a transaction's round.
func (g *grab) plain() []any {
	if g.req.script == nil && g.req.tx == nil {
		return g.req.args[:2:2]
	}
	return nil
}

// take sends g to every node and decides it: the lock when a quorum
// granted with more than the minimum validity left (and, fenced, a fence
// was minted for every key); otherwise every node that may hold the token
// is released (undo) and the error says why, node by node. It returns the
// round too, nil when none was sent, so that a waiting call can read the
// refusals.
func (c *Client) take(ctx context.Context, g *grab) (*Lock, *round, error) {
	c.beforeAcquire(ctx, g.ttl)
	r, err := c.run(ctx, g.req)
	if err != nil {
		return nil, nil, err
	}
	until := c.validUntil(r.start, g.ttl)
	c.observeRound(OpAcquire, g.name, r, until.Sub(c.cfg.clock.Now()), c.drift(g.ttl))
	if !r.ok || !c.validEnough(until, g.cfg) {
		return nil, r, c.undo(ctx, g, r, until)
	}
	won := r.won() // a choice round's: the lock is on the choice won
	if won >= 0 {
		g.key = g.req.choice.key(won)
	}
	var fence uint64
	var fences []uint64
	if g.cfg.fencing {
		if fence, fences, err = c.mintFences(ctx, g, r, until); err != nil {
			c.owe(ctx, g, r)
			return nil, r, err
		}
		// The validity is counted from the first round's start, after both.
		if !c.validEnough(until, g.cfg) {
			return nil, r, c.undo(ctx, g, r, until)
		}
	}
	split := false
	if won >= 0 {
		// The nodes that took another choice give it up, in the
		// background; split, the lock's Unlock gives up every choice.
		split = c.oweRelease(ctx, g, r, won) != nil
	}
	l := c.newLock(ctx, g, r, until)
	l.fence, l.fences, l.split = fence, fences, split
	return l, r, nil
}

// validEnough reports whether a lock valid until until has more than the
// minimum validity cfg asks for left now.
func (c *Client) validEnough(until time.Time, cfg lockConfig) bool {
	return until.Sub(c.cfg.clock.Now()) > cfg.minValidity
}

// undo releases the failed acquisition round r of g and returns its error:
// a *QuorumError matching ErrNotAcquired, with what each refusing node
// said of the key.
func (c *Client) undo(ctx context.Context, g *grab, r *round, until time.Time) error {
	validity := until.Sub(c.cfg.clock.Now())
	c.owe(ctx, g, r)
	c.warnRefusals("node refused an acquisition", r)
	if !r.ok {
		validity = 0
	}
	e := c.quorumError(OpAcquire, g.name, r, ErrNotAcquired, validity)
	c.readRefusals(e, r)
	return e
}

// owe releases, in the background, every node that may hold the token of
// g's round r (owed.go). A transaction (a waiting call's first round)
// takes no key: it owes nothing. The round of a call that does not wait
// (g.final) first reads the replies still to come (finish), and owe
// returns once each node it owes answered the release, or had a node
// timeout to, unless ctx ends first: a call its caller gave up returns
// at once (its error matches ctx.Err()), and leaves the rest to the
// background.
func (c *Client) owe(ctx context.Context, g *grab, r *round) {
	if g.req.tx != nil {
		return
	}
	if g.final {
		r.finish(ctx) // the late grants are undone now, not in the background
	}
	if d := c.oweRelease(ctx, g, r, -1); g.final && d != nil {
		d.awaitFirst(ctx, c.cfg.nodeTimeout)
	}
}

// grantStatus reads a node's answer to an acquisition script (of one key
// or several): granted (a fenced grant with its counters), refused with
// the holder's TTL, or failed. A Redis Cluster node that refuses keys in
// different hash slots fails with an error that says what to do.
func grantStatus(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		var re pool.ReplyError
		if errors.As(err, &re) && strings.HasPrefix(string(re), "CROSSSLOT") {
			return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf(
				"the keys of a multi-key lock are in different hash slots of this Redis Cluster node: give them a common hash tag, as in {order42}:a and {order42}:b (%w)", err)}
		}
		return NodeFailed, err
	}
	a, ok := wire.ParseAcquire(reply)
	switch {
	case !ok && isKindRefusal(reply):
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: errHeldAsRW}
	case !ok:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf("unexpected reply %v", reply)}
	case a.Code != wire.CodeAcquired:
		return NodeRefused, nil
	}
	if vs, fenced := reply.([]any); fenced {
		for k, n := 0, (len(vs)-1)/2; k < n; k++ {
			if _, err := wire.FenceAt(reply, n, k); err != nil {
				return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: err}
			}
		}
	}
	return NodeOK, nil
}

// readRefusals fills in, from the replies of acquisition round r, what
// each refusing node said of the key (NodeResult.TTL, Reserved) and the
// error's RetryAfter.
func (c *Client) readRefusals(e *QuorumError, r *round) {
	for i := range e.Nodes {
		n := &e.Nodes[i]
		if n.Status != NodeRefused {
			continue
		}
		n.TTL = -1 // a plain SET NX does not say
		if r.replies == nil {
			continue
		}
		if a, ok := wire.ParseAcquire(r.replies[i]); ok {
			n.Reserved = a.Code == wire.CodeReserved
			if a.PTTL >= 0 {
				n.TTL = time.Duration(a.PTTL) * time.Millisecond
			}
		}
	}
	e.RetryAfter, e.retryKnown = retryAfter(e.Nodes, c.quorum)
}

// retryAfter is how long until enough of the refusing nodes' keys (or
// reservations) run out that a quorum could grant, counting the nodes that
// failed or had no reply in time as if they could grant at once: the
// earliest time a round can succeed without a release. ok is false when it
// cannot be told (a refusing node did not say, or the key has no TTL), or
// when the refusals alone do not rule a quorum out, or when no refusing
// key that runs out can make one possible (too many nodes out).
func retryAfter(nodes []NodeResult, quorum int) (d time.Duration, ok bool) {
	var ttls []time.Duration
	for _, n := range nodes {
		if n.Status == NodeRefused {
			if n.TTL < 0 {
				return 0, false
			}
			ttls = append(ttls, n.TTL)
		}
	}
	need := quorum - (len(nodes) - len(ttls)) // refusing nodes that must run out
	if need <= 0 || need > len(ttls) {
		return 0, false // no refusal decides it, or they cannot: too many nodes out
	}
	slices.Sort(ttls)
	return ttls[need-1], true
}

// errHeldAsRW is a node's answer to a mutex call on a name a read-write
// lock holds.
var errHeldAsRW = errors.New("the name is held as a read-write lock (RWLock) on this node: a name is either a mutex or a read-write lock")

// isKindRefusal reports whether reply is a script's {4}: the name is held
// as another kind of lock.
func isKindRefusal(reply any) bool {
	vs, ok := reply.([]any)
	return ok && len(vs) == 1 && vs[0] == int64(wire.CodeKind)
}
