package redlock

// Restart safety: the check of one node (node.lua), its answer, and what
// the Client makes of it (verdict.go decides).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// checkPatience is the least time a restart check waits for its node's
// answer (the node timeout when that is longer). It runs in the
// background: a grant waits for it only until its own round is decided.
const checkPatience = 5 * time.Second

// nodeFacts is a node's answer to the restart check.
type nodeFacts struct {
	runID   string
	lineage string        // the dataset's replication id
	uptime  time.Duration // at most the true uptime (uptimeFloor), or the time since a copied dataset was first seen
	copied  bool          // the dataset came from another process or lineage (uptime is since it was first seen)
	cluster bool          // the node runs in cluster mode: the marker is one slot's (shards.go)
	born    string        // the shards that ran when the deployment was new (wire.BornOf)
	own     bool          // the lineage began in this process
	kept    bool          // the mark says the node kept its data (wire.MarkKept)
	marker  string        // the run id when marked; "~": another process's or lineage's marker; "+": a marker of a later form; "": none
	gen     uint64
	subs    uint64    // restarts.subs when the check began
	at      time.Time // when the answer came, on the Client's clock
}

// checkFailed notes why node i's restart check failed, err, and returns
// it as the Client reports it; a node that refused the check is logged
// and reported to the observers, as it is counted toward no quorum.
func (c *Client) checkFailed(i int, err error) error {
	err = explainDenied(err)
	c.rs.lastErr[i].Store(&err)
	if replied(err) {
		c.warnNode(c.pools[i].Addr(), "node refused the restart check: it is not counted toward any quorum", err)
		if c.observing() {
			c.emit(Event{Kind: EventNodeExcluded, Node: c.pools[i].Addr(), Err: err})
		}
	}
	return err
}

// checkBound is how long a check in the background waits for its node:
// the node timeout, or checkPatience when that is longer.
func (c *Client) checkBound() time.Duration { return max(c.cfg.nodeTimeout, checkPatience) }

// checkNode runs the restart check on node i, marking it with mark first
// when that is its run id ("" to only read), for at most bound, and no
// longer than until Close. The answer vouches for the pool's connections
// (its gen) only when they were open throughout: no connection was
// opened while it ran, or the pool had none before and opened exactly
// one, the check's (a fresh pool's first command); otherwise its gen is
// 0. A check that failed without the node's answer (a broken connection)
// asks once more.
func (c *Client) checkNode(ctx context.Context, i int, mark, born, how string, bound time.Duration) (nodeFacts, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	c.cancelOnClose(ctx, cancel)
	var err error
	retried := false
	for range 2 {
		var f nodeFacts
		g := c.rs.gens[i]
		var before uint64
		if g != nil {
			before = g.Generation()
		}
		subs := c.rs.subs.Load()
		var reply any
		reply, err = c.pools[i].Eval(ctx, wire.NodeCheck, wire.NodeCheckArgs(mark, born, how)...)
		if err != nil {
			if !replied(err) {
				c.suspect(i)
				if !retried && ctx.Err() == nil {
					// The connection broke (the node restarted, and the
					// pool's idle connection died with it): the pool dials
					// anew for the next command. Ask once more.
					retried = true
					continue
				}
			}
			return f, c.checkFailed(i, err)
		}
		if f, err = parseFacts(reply); err != nil {
			err = &pool.NodeError{Addr: c.pools[i].Addr(), Op: "EVALSHA", Err: err}
			c.rs.lastErr[i].Store(&err)
			return f, err
		}
		c.noteFacts(i, f)
		f.at, f.subs = c.cfg.clock.Now(), subs
		if g == nil {
			return f, nil
		}
		f.gen = c.vouched(i, before, g.Generation())
		return f, nil
	}
	return nodeFacts{}, err
}

// noteFacts notes what node i's check f tells beside its process: that
// the node is a cluster (its grants then count shard by shard), that its
// lineage is unknown (logged), and that the check succeeded.
func (c *Client) noteFacts(i int, f nodeFacts) {
	if f.cluster {
		c.rs.clusters[i].Store(true)
		c.noteBorn(i, f.born)
	}
	if f.lineage == wire.UnknownLineage {
		c.warnNode(c.pools[i].Addr(), "restart safety cannot see a failover on this node", errNoLineage)
	}
	c.rs.lastErr[i].Store(nil)
}

// cancelOnClose calls cancel, which ends a check's ctx, once the Client
// has been closing for the node timeout. A check under way when Close is
// called is given that long to end: the mark it may be writing lands, so
// that a Client closed right after its first lock on a new deployment
// does not leave a node unmarked, which every other Client would then
// wait out for the maximum TTL. Close waits no longer for a stalled node.
func (c *Client) cancelOnClose(ctx context.Context, cancel context.CancelFunc) {
	go func() {
		select {
		case <-c.bg.closing():
		case <-ctx.Done():
			return
		}
		t := c.cfg.clock.NewTimer(c.cfg.nodeTimeout)
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
}

// vouched is the connection generation a check of node i that began at
// generation before and answered at after vouches for: after, when no
// connection was opened on the way (or the check's was the pool's
// first); otherwise 0, none (a grant that went out beside the check may
// have opened one): only grants that prove their dataset count
// (countProved) until a check on connections that stay, which such a
// grant starts in the background.
func (c *Client) vouched(i int, before, after uint64) uint64 {
	if after == before || c.firstConnection(i, before, after) {
		return after
	}
	return 0
}

// firstConnection reports whether a check of node i that began at
// connection generation before and answered at after ran on the only
// connection its pool ever opened: a pool.Reconnector that had opened
// none opened exactly one, so the check's reply came on it. A generation
// the Client keeps itself (suspectGen) counts signs, not connections: it
// says no such thing.
func (c *Client) firstConnection(i int, before, after uint64) bool {
	if _, own := c.rs.gens[i].(*suspectGen); own {
		return false
	}
	return before == 0 && after == 1
}

// uptimeFloor is the least true uptime of a node that reports up seconds.
// Redis reports the difference of two times each cut to a whole second,
// the start and the present, which exceeds the true uptime by up to a
// second (started at 9.9s, asked at 10.0s: 1s). Counted from the report
// alone, a restarted node would count up to a second early.
func uptimeFloor(up int64) time.Duration {
	return max(time.Duration(up-1)*time.Second, 0)
}

// parseFacts reads {run id, uptime, marker}.
func parseFacts(reply any) (nodeFacts, error) {
	w, err := wire.ParseNodeCheck(reply)
	if err != nil {
		return nodeFacts{}, err
	}
	f := nodeFacts{runID: w.RunID, uptime: uptimeFloor(w.Uptime), marker: w.Marked, lineage: w.Lineage, cluster: w.Cluster, born: w.Born, own: w.Own, kept: w.Kept}
	if w.Sighted >= 0 {
		// A dataset that came from elsewhere (a promoted replica, a
		// restart from a snapshot): what it missed is counted from when
		// it was first seen so, which a process's start may long precede.
		f.uptime = min(f.uptime, uptimeFloor(w.Sighted))
		f.copied = true
	}
	return f, nil
}

// recheck checks node i in the background, unless a check is under way.
func (c *Client) recheck(i int) {
	if !c.rs.settled.Load() {
		// No check of all nodes has had a quorum answer yet (they were
		// down when the Client started): check them all again.
		if c.rs.allBusy.CompareAndSwap(false, true) {
			if !c.bg.goTracked(func() {
				c.checkAll(context.Background())
				c.rs.allBusy.Store(false) // before the poke: a waiter it wakes may ask again
				c.checkEnded()
				c.notify.poke()
			}) {
				c.rs.allBusy.Store(false)
			}
		}
		return
	}
	if !c.rs.checking[i].CompareAndSwap(false, true) {
		return
	}
	if !c.bg.goTracked(func() {
		f, err := c.checkNode(context.Background(), i, "", "", "", c.checkBound())
		if err == nil {
			if mark, how := c.adopt(i, f, false); mark {
				c.mark(i, f.runID, f.lineage, "", how)
			}
		}
		// Done before the poke: a waiter it wakes that still needs a check
		// (a hand-off heard on a pub/sub connection opened after this check
		// began) starts one.
		c.rs.checking[i].Store(false)
		c.checkEnded()
		if err == nil {
			c.notify.poke() // a hand-off from the node may count now
		}
	}) {
		c.rs.checking[i].Store(false)
	}
}

// adopt turns node i's check into the Client's view of it; fresh says
// the deployment is new. It reports whether the node is to be marked.
func (c *Client) adopt(i int, f nodeFacts, fresh bool) (mark bool, how string) {
	v := &nodeView{gen: f.gen, runID: f.runID, lineage: f.lineage, subs: f.subs}
	in := checked{f: f, fresh: fresh, durable: c.cfg.durable, shared: c.cfg.maxTTL, longest: c.maxTTL(), node: true}
	if old := c.rs.views[i].Load(); old != nil {
		in.prev.runID, in.prev.lineage, in.prev.from = old.runID, old.lineage, old.from
	}
	d := verdictOf(in)
	if d.wait > 0 {
		v.from, v.why = f.at.Add(d.wait), d.why
	}
	// On a new deployment a node is counted only once it is marked (mark,
	// then count), so that a Client that checks meanwhile does not take
	// the deployment for new when a lock may already be held on it. A
	// node marked for another reason (it waited out the maximum TTL, or
	// kept its data on durable nodes) counts at once.
	v.marking = d.mark && fresh
	c.rs.views[i].Store(v)
	if d.reset {
		c.nodeReset(i, errRunIDChanged)
	}
	if v.why != "" && c.observing() {
		c.emit(Event{Kind: EventNodeExcluded, Node: c.pools[i].Addr(), Duration: d.wait, Err: errors.New(v.why)})
	}
	return d.mark, d.how
}

// restartedSince checks the nodes of failed in round r (an extension of
// a lock) that failed without an answer, at once: those that now run
// another process than the one the Client counted, and did not keep
// their data, are marked NodeRefused with why. It reports whether any was.
func (c *Client) restartedSince(ctx context.Context, r *round) bool {
	if c.cfg.maxTTL == 0 {
		return false
	}
	var mu sync.Mutex
	var g errgroup.Group
	found := false
	for i, n := range r.nodes {
		if n.Status != NodeFailed || replied(n.Err) {
			continue
		}
		old := c.rs.views[i].Load()
		if old == nil {
			continue
		}
		g.Go(func() error {
			f, err := c.checkNode(ctx, i, "", "", "", c.cfg.nodeTimeout)
			if err != nil || f.runID == old.runID {
				return nil
			}
			kept := c.cfg.durable && f.marker != ""
			c.adopt(i, f, false)
			if kept {
				return nil
			}
			mu.Lock()
			r.nodes[i].Status = NodeRefused
			r.nodes[i].Err = fmt.Errorf("%w %v ago: the lock is gone from it", ErrNodeRestarted, f.uptime)
			found = true
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return found
}
