package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/wire"
)

// Restart safety on a node that is a Redis Cluster (docs/safety.md,
// "Nodes that are Redis Clusters").
//
// The check of MarkerKey reaches one shard of such a node: the one that
// serves the marker's slot. Any other shard may restart empty or fail over
// to a replica that missed a lock, unseen by that check. So once a check
// says that node i runs in cluster mode, each grant it makes is asked
// with its shard's identity (wire.Sharded: the dataset's replication id),
// and counts only when the node's check, or a check of that shard (the
// restart check on the grant's slot's marker, wire.ShardMarkerKey), has
// counted that identity. A shard is counted as a node is: when its slot's
// marker names it; when it has run on its dataset for the maximum TTL
// (for a dataset copied from elsewhere, such as a promoted replica's,
// since a check first saw it); or, for this Client, when it already ran
// at a moment when the Client found the whole deployment new and node i
// unmarked (no lock could have been granted on it before then). Then its
// slot's marker is written, so that other Clients count it at once.
//
// Hand-offs heard on the pub/sub connection do not say which shard made
// them: on a cluster node they do not count, and the waiter asks with a
// round, whose grant does.

// shards is what a Client knows of the shards of node i, when it is a
// cluster.
type shards struct {
	mu       sync.Mutex
	views    map[string]*shardView // by identity (wire.ShardOf)
	checking map[uint16]bool       // slots whose check is under way
	freshAt  time.Time             // when the Client found the deployment new with node i unmarked; zero: never
	born     string                // the shards that ran when the deployment was new (wire.BornOf), as node i's check read them
}

// shardView is what a check found of one shard's process and dataset.
type shardView struct {
	runID, lineage string
	slot           uint16    // the slot whose marker the check read
	from           time.Time // when it counts; zero: now
	why            string    // while from is ahead: what the check found
}

// errNoShard is why a grant of a cluster node does not count when it came
// without its shard's identity: it was sent before the Client knew the
// node for a cluster.
var errNoShard = errors.New("redlock: cluster node: the grant came without its shard's identity (sent before the node was known to be a cluster); counted when asked again")

// uncheckedShardError is why a grant of a shard not checked yet does not
// count.
type uncheckedShardError struct{ slot uint16 }

func (e *uncheckedShardError) Error() string {
	return fmt.Sprintf("redlock: cluster node: the shard that serves slot %d not checked for a restart or failover yet; counted once checked", e.slot)
}

func (e *uncheckedShardError) Unwrap() error { return errUnchecked }

// clustered reports whether restart safety checks node i shard by shard:
// it is on, and a check found the node in cluster mode.
func (c *Client) clustered(i int) bool {
	return c.cfg.maxTTL > 0 && c.rs.clusters[i].Load()
}

// wrapGrant reports whether a grant to node i is asked with the identity
// of the dataset that makes it: the node is a cluster (the identity is
// its shard's), or it has not been checked on the connections the pool
// has now (the first grant, which goes out beside the first check, on a
// pool of several connections; any grant after the pool reconnected):
// the identity proves the grant was made by the process the check
// counted (countProved), with no round trip of its own.
func (c *Client) wrapGrant(i int) bool {
	if c.cfg.maxTTL == 0 {
		return false
	}
	if c.cfg.verified {
		return true // every grant (WithVerifiedGrants)
	}
	if v := c.rs.views[i].Load(); v != nil {
		return c.rs.clusters[i].Load() || c.generation(i) > v.gen
	}
	return !c.rs.oneConn[i]
}

// noteFresh records that the Client found the deployment new, with node
// i unmarked, by a check sent at began.
func (c *Client) noteFresh(i int, began time.Time) {
	s := &c.rs.shards[i]
	s.mu.Lock()
	if s.freshAt.IsZero() {
		s.freshAt = began
	}
	s.mu.Unlock()
}

// shardCounts reports whether node i's grant on key, made by the shard
// whose identity is shard (wrapped: the grant was asked for it), counts:
// err is nil when it does, otherwise why not. When the shard is not
// known, start starts its check (unless one of key's slot is under way),
// and wait says a check under way may still make the grant count
// (awaitShard). It never blocks.
func (c *Client) shardCounts(i int, shard string, wrapped bool, key string, start bool) (wait bool, err error) {
	if !c.clustered(i) {
		return false, nil
	}
	if !wrapped {
		return false, errNoShard
	}
	if v := c.rs.views[i].Load(); v != nil && wire.ShardOf(v.runID, v.lineage) == shard {
		return false, nil // the shard the node's own check counted
	}
	slot := keyslot.Slot(key)
	s := &c.rs.shards[i]
	s.mu.Lock()
	v := s.views[shard]
	if v == nil {
		under := s.checking[slot]
		if start && !under {
			s.checking[slot] = true
		}
		s.mu.Unlock()
		if start && !under {
			under = c.checkShard(i, slot)
		}
		return under, &uncheckedShardError{slot: slot}
	}
	if v.from.IsZero() {
		s.mu.Unlock()
		return false, nil
	}
	if now := c.cfg.clock.Now(); now.Before(v.from) {
		s.mu.Unlock()
		return false, &restartedError{left: v.from.Sub(now), why: v.why}
	}
	// The wait is over: mark the shard's slot, so that other clients
	// count it at once too.
	s.views[shard] = &shardView{runID: v.runID, lineage: v.lineage, slot: v.slot}
	s.mu.Unlock()
	c.bg.goTracked(func() { _, _ = c.shardCheck(i, v.slot, wire.MarkerOf(v.runID, v.lineage)) })
	return false, nil
}

// awaitShard waits for a check that may make node i's grant on key, by
// shard, count (shardCounts said wait, or the node was just found to be
// a cluster), until deadline or Close, and returns why the grant does not
// count, or nil when it does.
func (c *Client) awaitShard(i int, shard string, wrapped bool, key string, deadline time.Time) error {
	t := c.cfg.clock.NewTimer(max(deadline.Sub(c.cfg.clock.Now()), 0))
	defer t.Stop()
	start := true
	for range awaitWakes {
		ended := c.checkEvent()
		wait, err := c.shardCounts(i, shard, wrapped, key, start)
		if !wait {
			return err
		}
		start = false
		select {
		case <-ended:
		case <-t.C():
			return err
		case <-c.bg.closing():
			return err
		}
	}
	_, err := c.shardCounts(i, shard, wrapped, key, false)
	return err
}

// checkShard checks the shard of node i that serves slot in the
// background, and reports whether it started (not after Close).
func (c *Client) checkShard(i int, slot uint16) bool {
	done := func() {
		s := &c.rs.shards[i]
		s.mu.Lock()
		delete(s.checking, slot)
		s.mu.Unlock()
		c.checkEnded()
	}
	ok := c.bg.goTracked(func() {
		f, err := c.shardCheck(i, slot, "")
		mark := err == nil && c.adoptShard(i, slot, f)
		done() // the grants that wait count now: the mark is for other Clients
		if mark {
			_, _ = c.shardCheck(i, slot, wire.MarkerOf(f.runID, f.lineage))
		}
	})
	if !ok {
		done()
	}
	return ok
}

// shardCheck runs the restart check on the shard of node i that serves
// slot, marking the slot first with mark when that names the shard's
// process and lineage ("" to only read), for at most the check's bound.
func (c *Client) shardCheck(i int, slot uint16, mark string) (nodeFacts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.checkBound())
	defer cancel()
	c.cancelOnClose(ctx, cancel)
	reply, err := c.pools[i].Eval(ctx, wire.NodeCheck, wire.ShardCheckArgs(slot, mark)...)
	if err != nil {
		err = explainDenied(err)
		if replied(err) {
			c.warnNode(c.pools[i].Addr(), fmt.Sprintf("a shard (slot %d) refused the restart check: its grants are not counted", slot), err)
		}
		return nodeFacts{}, err
	}
	f, err := parseFacts(reply)
	f.at = c.cfg.clock.Now()
	return f, err
}

// adoptShard turns the check of the shard of node i that serves slot
// into the Client's view of it, and reports whether the slot is to be
// marked (the shard counts now and its marker does not name it).
func (c *Client) adoptShard(i int, slot uint16, f nodeFacts) (mark bool) {
	s := &c.rs.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	id := wire.ShardOf(f.runID, f.lineage)
	if old := s.views[id]; old != nil && old.from.IsZero() {
		return false // counted already
	}
	v := &shardView{runID: f.runID, lineage: f.lineage, slot: slot}
	started := f.at.Add(-f.uptime) // no earlier than the process's start (uptimeFloor)
	d := verdictOf(checked{f: f, durable: c.cfg.durable, shared: c.cfg.maxTTL, longest: c.maxTTL(), shard: slot,
		listed: !f.copied && !s.freshAt.IsZero() && !started.After(s.freshAt) || wire.BornHas(s.born, f.runID, f.lineage, f.own)})
	if d.wait > 0 {
		v.from, v.why = f.at.Add(d.wait), d.why
	}
	mark = d.mark
	s.views[id] = v
	if v.why != "" && c.observing() {
		c.emit(Event{Kind: EventNodeExcluded, Node: c.pools[i].Addr(), Duration: v.from.Sub(f.at), Err: errors.New(v.why)})
	}
	return mark
}

// noteBorn keeps born, the shards of node i that ran when the deployment
// was new, as its check read them (wire.BornOf; "" leaves what was known).
func (c *Client) noteBorn(i int, born string) {
	if born == "" {
		return
	}
	s := &c.rs.shards[i]
	s.mu.Lock()
	s.born = born
	s.mu.Unlock()
}

// shardsNow lists the shards of cluster node i as they are now
// (wire.BornOf), for the mark that finds a deployment new: a shard that
// ran then held no lock, and it counts, for every Client, for as long as
// it runs that process on that lineage (adoptShard). It asks the node for
// its slots (CLUSTER SLOTS) and each master for its process, and leaves
// out those that did not answer; "" when the slots were refused.
func (c *Client) shardsNow(i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), c.checkBound())
	defer cancel()
	c.cancelOnClose(ctx, cancel)
	reply, err := c.pools[i].Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		c.warnNode(c.pools[i].Addr(), "CLUSTER SLOTS failed: the shards of this new deployment count for other Clients only once marked or up for the maximum TTL", err)
		return ""
	}
	slots := wire.FirstSlots(reply)
	ids, lineages := make([]string, len(slots)), make([]string, len(slots))
	var g errgroup.Group
	for k, slot := range slots {
		g.Go(func() error {
			if f, err := c.shardCheck(i, slot, ""); err == nil {
				ids[k], lineages[k] = f.runID, f.lineage
			}
			return nil
		})
	}
	_ = g.Wait()
	return wire.BornOf(ids, lineages) // those that did not answer ("") are left out
}
