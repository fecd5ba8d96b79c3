package redlock

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// How every waiting call paces its rounds (Lock, LockMulti, a
// Semaphore's Acquire, an RWLock's RLock and Lock, Campaign): how long it
// sleeps after a refused round, which nodes it watches for, and the
// Client's tunables its waiting reads. What each call does between its
// rounds is its own: waiter.go (a mutex's queue and hand-offs),
// unqueued.go (the calls that take no hand-off).

// Split back-off: after a round in which the key was free but no one got a
// quorum (the nodes split their votes between callers), a waiter waits a
// random time in [0, d], d = splitMin doubling with each split in a row up
// to splitMax, unless a release names it first.
const (
	splitMin = time.Millisecond
	splitMax = 32 * time.Millisecond
)

// expiryJitter spreads the waiters that wake when a key runs out.
const expiryJitter = time.Millisecond

// pacing is the pause policy of every waiting call (Lock, LockMulti,
// Semaphore.Acquire, RWLock): how long it sleeps after a refused round.
// It keeps the call's latest refused round, for the error that ends the
// wait.
type pacing struct {
	c       *Client
	retry   pacer
	splits  int          // split votes in a row
	lagging int          // rounds in a row that could not ask a node that is back (lag)
	last    *QuorumError // the call's latest refused round; nil before the first
}

// next returns how long to sleep after qe, the failures-th refused round
// in a row, and whether it was a split vote (the key was free but no one
// got a quorum: the others' releases name the longest waiter, who goes
// at once); a round whose refusals and unasked nodes left a quorum out of
// reach is none (QuorumError.outOfReach), whatever the nodes that
// granted. A busy round
// (QuorumError.Busy) sleeps until the holder's keys run out (busyFor);
// any other failure by the back-off. armed says
// whether releases are heard: without them the call never sleeps past the
// back-off.
func (p *pacing) next(qe *QuorumError, failures int, armed bool) (d time.Duration, split bool) {
	delay := p.retry.delay(failures)
	d = delay
	switch refused := qe.Count(NodeRefused); {
	case qe.Count(NodeOK) > 0 && refused < p.c.quorum && !answeredWithError(qe) && !qe.outOfReach():
		// A node that answered with an error (read-only, out of memory, no
		// permission) is no split and will not change soon: the back-off
		// paces those rounds.
		p.splits++
		ceiling := min(splitMin<<min(p.splits-1, 16), splitMax)
		d, split = rand.N(ceiling+1), true
	case qe.Busy():
		p.splits = 0
		if after, ok := busyFor(qe); ok {
			d = min(after, p.c.refresh()) + rand.N(expiryJitter+1)
		}
	default:
		p.splits = 0
	}
	if !armed {
		d = min(d, delay)
	}
	return d, split
}

// busyFor is how long until the holder's keys of the busy round qe run
// out on enough nodes that a quorum could grant: RetryAfter when the
// refusals alone rule a quorum out; otherwise counting the nodes that
// were excluded or unreachable as unable to grant, and those not awaited
// as able. ok is false when it cannot be told (a refusing node did not
// say how long its key has left).
func busyFor(qe *QuorumError) (d time.Duration, ok bool) {
	if qe.retryKnown {
		return qe.RetryAfter, true
	}
	// Each node that cannot grant needs one more refusing key to run out.
	return retryAfter(qe.Nodes, qe.Quorum+qe.unasked())
}

// lagRetry paces the rounds that could not ask a node whose pub/sub
// connection is back (pacing.lag), whatever WithRetry says: the Client's
// command connection to the node follows within its own dial back-off
// (at most a second).
var lagRetry = backoff{min: defaultRetryMin, max: defaultRetryMax}

// lag returns d, the sleep pacing.next chose, cut to lagRetry's when
// lagging: the round could not ask a node that confirmed the key's
// subscription, so the node is back but the Client's command connection
// to it is not yet (it dials with a back-off of its own). The wait for
// the holder's keys, or the refresh interval, would outlast it.
func (p *pacing) lag(d time.Duration, lagging bool) time.Duration {
	if !lagging {
		p.lagging = 0
		return d
	}
	p.lagging++
	return min(d, lagRetry.delay(p.lagging))
}

// nodeWatch is a waiting call's record of the nodes its latest refused
// round could not ask, and of those of them that came back since: their
// pub/sub connection, dialled anew, confirmed the key's subscription. The
// call's goroutine writes the round (refused), the notifier's the
// confirmations (confirmed).
type nodeWatch struct {
	out  atomic.Uint64 // QuorumError.unaskedNodes of the latest refused round, until the next one's replace them
	back atomic.Uint64 // nodes of out that confirmed the subscription, and that no round has asked since
}

// refused notes qe, the call's latest refused round, and reports whether
// it could not reach a node that is back (its command connection is not,
// yet): pacing.lag.
func (nw *nodeWatch) refused(qe *QuorumError) (lagging bool) {
	out := qe.unaskedNodes()
	nw.out.Store(out)
	// The nodes the round asked are no longer news.
	return updateMask(&nw.back, func(b uint64) uint64 { return b & out })&qe.unreachableNodes() != 0
}

// confirmed notes that node i confirmed the key's subscription, and
// reports whether the latest refused round could not ask it: the node is
// back, and the call asks again.
func (nw *nodeWatch) confirmed(i int) bool {
	bit := nodeBit(i)
	if nw.out.Load()&bit == 0 {
		return false
	}
	updateMask(&nw.back, func(b uint64) uint64 { return b | bit })
	return true
}

// updateMask sets m to f of its value, atomically, and returns the new
// value.
func updateMask(m *atomic.Uint64, f func(uint64) uint64) uint64 {
	for {
		old := m.Load()
		if v := f(old); m.CompareAndSwap(old, v) {
			return v
		}
	}
}

// note records qe, the call's latest refused round.
func (p *pacing) note(qe *QuorumError) { p.last = qe }

// cut returns err, the error of a round of the call that was not a
// refusal. When the caller's context ended that round before it was
// decided (a *QuorumError with a Cause), the error is the call's latest
// refused round instead, with the context's error as its cause: what the
// nodes last answered, however early the context cut the round.
func (p *pacing) cut(err error) error {
	qe, ok := err.(*QuorumError)
	if !ok || qe.Cause == nil || qe.Op != OpAcquire || p.last == nil {
		return err
	}
	return p.end(qe.Cause, p.last)
}

// end is the error of a wait that ended with err after the refused round
// qe: qe with the caller's context error as its cause, or ErrClosed
// joined with qe.
func (p *pacing) end(err error, qe *QuorumError) error {
	if errors.Is(err, ErrClosed) {
		return errors.Join(ErrClosed, qe)
	}
	e := *qe
	e.Cause = err
	return &e
}

// nodeBit is node i's bit in a waiter's masks; more than 64 nodes share
// bits: a quorum is then sooner assumed.
func nodeBit(i int) uint64 { return uint64(1) << (i % 64) }

// ownNodes returns, as a mask, the nodes that a failed round whose
// outcome on each node is nodes may have taken keys on: those it owes a
// release (owes: they granted, whether or not restart safety counted the
// grant, or failed after the command may have landed), and those that had
// not answered by its decision (not awaited, or timed out), which it
// releases if they grant late. That release is announced: a waiting call
// must not take its own announcements for another holder's release, or
// it wakes itself after every round. The nodes that refused are never
// among them.
func ownNodes(nodes []NodeResult) uint64 {
	return nodeMask(nodes, func(n NodeResult) bool { return n.Status == NodePending || owes(n.Status, n.Err, -1, -1) })
}

// windowMs is the reservation window in whole milliseconds (rounded up).
func (c *Client) windowMs() int64 {
	return int64((c.cfg.window + time.Millisecond - 1) / time.Millisecond)
}

// refresh is the longest a waiter sleeps between rounds, even with
// announcements: each round renews its queue entries, so an entry left by
// a waiter that vanished runs out soon.
func (c *Client) refresh() time.Duration {
	return max(time.Second, 5*c.cfg.nodeTimeout)
}

// entrySlack is how long a waiter's queue entry outlives the time it was
// told to come back: it comes back by then, unless it is gone. A waiter
// that left without saying so is dropped from the queues that much later.
func (c *Client) entrySlack() time.Duration {
	return c.cfg.nodeTimeout + 100*time.Millisecond
}
