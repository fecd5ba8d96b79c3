package redlock

import (
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
)

// The verdict of restart safety on one node, or one shard of a cluster
// node: a pure function of what its check found and what the Client
// knows, so that every rule of docs/operations.md ("What restart safety
// excludes") is one case of verdictOf, and one row of its table test.

// checked is what the verdict is made of.
type checked struct {
	f nodeFacts // the check's answer
	// prev is what the Client knew of the node's process before this
	// check: its run id and lineage, and until when it waited it out (zero
	// time: it counted). Zero runID: nothing (the first check, or a shard).
	prev struct {
		runID, lineage string
		from           time.Time
	}
	fresh   bool // the deployment is new, as this Client's first check found it
	listed  bool // a shard that ran when the deployment was new (wire.BornHas), or one that ran when this Client found it new
	durable bool // WithDurableNodes
	shared  time.Duration
	longest time.Duration // this Client's maximum TTL (shared, or a longer TTL it used)
	shard   uint16        // the slot checked, for a shard; 0 with node
	node    bool          // a node's own check, not a shard's
}

// verdict is what restart safety does with a checked node.
type verdict struct {
	wait  time.Duration // how long it is not counted from the check on; 0: it counts now
	mark  bool          // its marker is to be written (it counts, and no marker names it)
	reset bool          // it lost its data: logged, and its fence counters are gone
	how   string        // with mark: wire.MarkKept when it is marked at once for keeping its data
	why   string        // while it waits, what the check found
}

// verdictOf decides on the checked node c.
func verdictOf(c checked) verdict {
	f := c.f
	var v verdict
	keptMarker := c.durable && f.marker != ""
	newProcess := c.prev.runID != "" && (c.prev.runID != f.runID || c.prev.lineage != f.lineage)
	v.reset = c.node && (newProcess || f.marker != "" && f.marker != f.runID && f.marker != wire.UnknownMarker) && !keptMarker
	switch {
	case f.marker == f.runID && !c.markedTooSoon():
	case c.fresh, c.listed:
		v.mark = true
	case keptMarker && f.marker != f.runID:
		v.mark, v.how = true, wire.MarkKept
	default:
		if v.wait = c.longest - f.uptime; v.wait > 0 {
			v.why = c.why()
		} else {
			v.wait, v.mark = 0, true
		}
	}
	return v
}

// markedTooSoon reports whether a mark (the marker is the node's run id)
// must not make the node count for this Client yet. Other Clients mark a
// restarted node once it has been up for the bound they share
// (WithRestartSafety); a lock of this Client's with a longer TTL may still
// be one the node forgot, so their mark does not make the node count for
// this Client before that TTL has passed too. That holds on every check
// of the node until then: the first one after its restart (prev is an
// earlier process), and any later one of the same process that this
// Client still waits out (its connection was dialled again meanwhile). A
// Client that declares the nodes durable trusts a mark that says the node
// kept its data (wire.MarkKept: marked at once for it); any other mark on
// a young node may have been written by a Client with a shorter bound
// once it waited a restart out.
func (c checked) markedTooSoon() bool {
	newSince := c.prev.runID != "" && (c.prev.runID != c.f.runID || !c.prev.from.IsZero() && c.f.at.Before(c.prev.from))
	keptData := c.durable && c.f.kept
	return newSince && !keptData && c.f.uptime < c.longest && c.longest > c.shared
}

// why says why a node that waits is not counted.
func (c checked) why() string {
	f := c.f
	if !c.node {
		if f.copied {
			return fmt.Sprintf("a shard of this cluster node (slot %d) whose data came from another process or lineage (a replica promoted, or a restart from a snapshot), first seen so %v ago", c.shard, f.uptime)
		}
		return fmt.Sprintf("a shard of this cluster node (slot %d) up for %v with no marker in that slot", c.shard, f.uptime)
	}
	switch {
	case f.marker == f.runID:
		return fmt.Sprintf("up for %v under a new run id, marked by Clients whose maximum TTL is shorter than this Client's longest (%v)", f.uptime, c.longest)
	case f.marker == wire.UnknownMarker:
		return fmt.Sprintf("up for %v with a marker of a form this version does not know (written by a later version)", f.uptime)
	case f.copied:
		return fmt.Sprintf("its data came from another process or lineage (a restart from a snapshot or an append-only file under a new run id, not declared durable, or a replica promoted), first seen so %v ago", f.uptime)
	case f.marker != "":
		return fmt.Sprintf("up for %v under a new run id (restored from a snapshot or an append-only file, not declared durable)", f.uptime)
	}
	return fmt.Sprintf("up for %v with no marker, while other nodes have one", f.uptime)
}
