package redlock

// Restart safety: whether a node's reply counts toward a quorum, and the
// errors of a node it does not count (restart.go tells the whole story).

import (
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
)

// counts reports whether node i's reply to an acquisition counts toward
// the quorum: nil when it does, otherwise why not. It never blocks; a
// check it finds missing is started in the background.
func (c *Client) counts(i int) error {
	_, err := c.countAt(i, c.generation(i), true)
	return err
}

// generation returns node i's connection generation now.
func (c *Client) generation(i int) uint64 { return c.rs.gens[i].Generation() }

// countAt reports whether a reply of node i read at connection generation
// gen counts toward a quorum: err is nil when it does, otherwise why not.
// When it does not count for want of a check, start starts one in the
// background (unless one is under way), and wait says that a check under
// way may still make it count (awaitCheck). It never blocks.
func (c *Client) countAt(i int, gen uint64, start bool) (wait bool, err error) {
	return c.countProved(i, gen, "", start)
}

// countProved is countAt for a grant that came with proof, the identity
// of the dataset that made it (wire.Sharded; "" for none): a grant whose
// identity is the checked process's counts whatever connection it came
// on, and one whose identity is another's waits for a check that sees it.
func (c *Client) countProved(i int, gen uint64, proof string, start bool) (wait bool, err error) {
	if c.cfg.maxTTL == 0 {
		return false, nil
	}
	v := c.rs.views[i].Load()
	for v == nil || v.marking || c.stale(i, v, gen, proof) {
		// Not checked, being marked, or checked on an older connection
		// than the reply's (or of another dataset than the proof's): a
		// check that runs now sees the reply's process (while no
		// connection was opened since the reply).
		if start {
			c.recheck(i)
		}
		if c.checkUnderWay(i) {
			return true, c.uncheckedWaiting(i)
		}
		// A check that ended between the look and now (the one just
		// started may have) changed the view: look again.
		if now := c.rs.views[i].Load(); now != v {
			v, start = now, false
			continue
		}
		return false, c.unchecked(i)
	}
	if proof == "" && gen < v.gen {
		// Checked on a connection opened after the reply was read: the
		// check says nothing of the reply's.
		return false, errUnchecked
	}
	if proof != "" && start && gen > v.gen {
		// Proved; the pool opened a connection since the check: check
		// again in the background, so that later grants need no proof.
		c.recheck(i)
	}
	return c.countView(i, v)
}

// stale reports whether node i's view v says nothing of a reply read at
// connection generation gen with proof (countProved): a connection was
// opened since the check, or, with a proof, it names another dataset. On a
// cluster node the proof is the shard's, which the shard gate checks.
func (c *Client) stale(i int, v *nodeView, gen uint64, proof string) bool {
	switch {
	case proof == "":
		return gen > v.gen
	case c.rs.clusters[i].Load():
		return false
	}
	return wire.ShardOf(v.runID, v.lineage) != proof
}

// countView reports whether node i counts by its view v (checked, marked,
// of the reply's process): err is nil when it does, otherwise why not.
func (c *Client) countView(i int, v *nodeView) (wait bool, err error) {
	if v.from.IsZero() {
		return false, nil
	}
	now := c.cfg.clock.Now()
	if now.Before(v.from) {
		return false, &restartedError{left: v.from.Sub(now), why: v.why}
	}
	// The wait is over: mark the node, so that other clients count it at
	// once too.
	if c.rs.views[i].CompareAndSwap(v, &nodeView{gen: v.gen, runID: v.runID, lineage: v.lineage, subs: v.subs}) {
		c.bg.goTracked(func() { c.mark(i, v.runID, v.lineage, "", "") })
	}
	return false, nil
}

// awaitWakes bounds how many times awaitCheck looks again at a node after
// a check ended: each look is one check's end, and a grant needs at most
// the check under way, then one of the connection it came on.
const awaitWakes = 8

// awaitCheck waits for a check of node i that may make its grant, read at
// connection generation gen with proof (countProved), count (countProved
// said wait), until deadline (its round's node timeout) or Close, and
// returns why the grant does not count, or nil when it does. After a
// check under way ended, it starts one more when the node was checked on
// an older connection than the grant's, or saw another dataset.
func (c *Client) awaitCheck(i int, gen uint64, proof string, deadline time.Time) error {
	t := c.cfg.clock.NewTimer(max(deadline.Sub(c.cfg.clock.Now()), 0))
	defer t.Stop()
	var err error
	for range awaitWakes {
		ev := c.checkEvent() // before looking: a check that ends after the look closes it
		var wait bool
		if wait, err = c.countProved(i, gen, proof, true); !wait {
			return err
		}
		select {
		case <-ev:
		case <-t.C():
			return err
		case <-c.bg.closing():
			return err
		}
	}
	_, err = c.countProved(i, gen, proof, false)
	return err
}

// countsHeard reports whether what node i announced on the pub/sub
// connection numbered conn (subConn.opened; 0: unknown) counts toward a
// quorum now: the node counts, and it was checked after that connection
// opened. A node that restarts loses its pub/sub connection too, and the
// notifier dials the new process at once, while the Client's command
// connection may not have noticed yet: until a check on it, that process
// is not known to be the one counted. Otherwise it starts a check in the
// background; the node's waiters count again when it is done.
func (c *Client) countsHeard(i int, conn uint64) bool {
	if c.counts(i) != nil || c.clustered(i) {
		return false // on a cluster node, a hand-off does not say which shard made it (shards.go)
	}
	if c.cfg.maxTTL == 0 {
		return true
	}
	if v := c.rs.views[i].Load(); conn != 0 && v != nil && v.subs >= conn {
		return true
	}
	c.recheck(i)
	return false
}

// errUnchecked is the error of a node whose connection has not been
// checked for a restart yet.
var errUnchecked = errors.New("redlock: node not checked for a restart yet (new connection); counted once checked")

// notCounted reports whether err is restart safety's reason not to count
// a node (ErrNodeRestarted, errUnchecked). It is only given to a node
// that granted (nodeCall.Receive).
func notCounted(err error) bool {
	return errors.Is(err, ErrNodeRestarted) || errors.Is(err, errUnchecked)
}

// unchecked returns node i's error while it is not checked: errUnchecked,
// with why its last check failed when one did (a user without the
// permissions the check needs, for example).
func (c *Client) unchecked(i int) error {
	if e := c.rs.lastErr[i].Load(); e != nil {
		return &uncheckedError{last: *e}
	}
	return errUnchecked
}

// uncheckedWaiting is unchecked for a node whose check is under way: the
// grant was not counted because the check had not answered by the time
// its round was decided.
func (c *Client) uncheckedWaiting(i int) error {
	e := &uncheckedError{waiting: true}
	if last := c.rs.lastErr[i].Load(); last != nil {
		e.last = *last
	}
	return e
}

// uncheckedError is errUnchecked with the last check's error, and
// whether a check was under way.
type uncheckedError struct {
	last    error
	waiting bool
}

func (e *uncheckedError) Error() string {
	msg := errUnchecked.Error()
	if e.waiting {
		msg += "; its check had not answered yet"
	}
	if e.last != nil {
		msg += "; the last check failed: " + e.last.Error()
	}
	return msg
}

func (e *uncheckedError) Unwrap() []error {
	if e.last == nil {
		return []error{errUnchecked}
	}
	return []error{errUnchecked, e.last}
}

// restartedError is the error of a node restart safety does not count.
type restartedError struct {
	left time.Duration
	why  string
}

func (e *restartedError) Error() string {
	return fmt.Sprintf("%v, or may have: %s; not counted toward a quorum for another %v (restart safety, WithRestartSafety; see docs/operations.md#restarts-and-upgrades)",
		ErrNodeRestarted, e.why, e.left.Round(time.Millisecond))
}

func (e *restartedError) Unwrap() error { return ErrNodeRestarted }
