package sim

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"math/rand"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/simnode"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Availability: restart safety excludes a node only when data it
// acknowledged may be gone (docs/operations.md, "What restart safety
// excludes"). Every exclusion a Client reports (EventNodeExcluded) is
// checked against the world's history of the node: one that lasts longer
// than a node timeout plus a round is a false exclusion when the node
// still runs the process it started with (it lost nothing), or when it
// lasts past the longest TTL (and Redis's second of rounding, and the
// round that first sees it) after the node's latest process started.

// exclusion is one EventNodeExcluded, as a Client reported it.
type exclusion struct {
	at    time.Duration // virtual time of the report
	ci    int           // the Client
	node  int
	shard *simnode.Node // the node, or on a cluster node the shard excluded
	dur   time.Duration // how long the node is out, on the Client's clock
	why   string
}

// exclusionLog is a Client's observer that notes its exclusions.
type exclusionLog struct {
	w  *world
	ci int
}

func (e *exclusionLog) Round(*redlock.RoundInfo) {}

func (e *exclusionLog) Event(ev redlock.Event) {
	if ev.Kind != redlock.EventNodeExcluded || ev.Duration <= 0 {
		return
	}
	w := e.w
	node := -1
	for i, n := range w.nodes {
		if n.Addr() == ev.Node {
			node = i
		}
	}
	x := exclusion{at: w.now(), ci: e.ci, node: node, dur: ev.Duration}
	if ev.Err != nil {
		x.why = ev.Err.Error()
	}
	if node >= 0 {
		x.shard = w.nodes[node]
		if cl := w.clusters[node]; cl != nil {
			// A shard's exclusion names the slot checked; the node's own,
			// the marker's shard.
			slot := keyslot.Slot(wire.MarkerKey)
			if m := slotOf.FindStringSubmatch(x.why); m != nil {
				n, _ := strconv.Atoi(m[1])
				slot = uint16(n)
			}
			x.shard = cl.shards[cl.serving(slot)]
		}
	}
	w.mu.Lock()
	w.exclusions = append(w.exclusions, x)
	w.mu.Unlock()
	w.trace.add(x.at, fmt.Sprintf("c%d excludes node %d for %v: %s", e.ci+1, node+1, x.dur, x.why))
}

// slotOf finds the slot a shard's exclusion names.
var slotOf = regexp.MustCompile(`\(slot (\d+)\)`)

// checkAvailability reports every false exclusion as a violation, and
// returns how many there were.
func (w *world) checkAvailability() int {
	w.mu.Lock()
	xs := append([]exclusion(nil), w.exclusions...)
	started := maps.Clone(w.procStarts)
	longest := max(w.longestTTL, w.set.maxTTL)
	w.mu.Unlock()
	bound := 2*w.set.nodeTimeout + 10*time.Millisecond // a node timeout and a round
	sort.Slice(xs, func(a, b int) bool { return xs[a].at < xs[b].at })
	// A Client's wait for a process runs from its first exclusion of it
	// (its first check that saw it: one of a Client without INFO
	// replication may come sooner, and is not one it can take), for the
	// longest TTL, two seconds of rounding (uptime_in_seconds, and the
	// seconds since a sighting, are each up to two seconds short after
	// restart safety's allowance) and a round.
	type since struct {
		ci    int
		shard *simnode.Node
		last  time.Duration
	}
	first := map[since]time.Duration{}
	n := 0
	for _, x := range xs {
		if x.dur <= bound || x.shard == nil {
			continue
		}
		last := time.Duration(-1)
		for _, s := range started[x.shard] {
			if s <= x.at {
				last = s
			}
		}
		if last < 0 {
			n++
			w.violateAt(x.at, "false exclusion: c%d excluded node %d at %v for %v, though it still runs the process it started with: %s", x.ci+1, x.node+1, x.at, x.dur, x.why)
			continue
		}
		k := since{x.ci, x.shard, last}
		f, seen := first[k]
		if !seen {
			f, first[k] = x.at, x.at
		}
		if x.at+x.dur > f+longest+2*time.Second+bound {
			n++
			w.violateAt(x.at, "false exclusion: c%d excluded node %d at %v until %v, more than the longest TTL (%v) after it first excluded the process that started at %v (at %v): %s", x.ci+1, x.node+1, x.at, x.at+x.dur, longest, last, f, x.why)
		}
	}
	return n
}

// nodePrevious is the restart check of the previous version of the
// library: its marker forms are what legacyChecks writes.
//
//go:embed node_previous.lua
var nodePrevious string

var previousCheck = pool.NewScript(1, nodePrevious)

// legacyChecks plays a Client of the previous version beside the others,
// until ctx ends: now and then it runs that version's restart check on a
// node, which rewrites a mark in its own form, and marks a node once it
// has waited it out, as that version does (after the shortest of the
// Clients' bounds, since its process or its copied data was first seen).
func (w *world) legacyChecks(ctx context.Context) {
	rng := rand.New(rand.NewSource(w.opt.Seed*1000 + 777))
	pools := make([]*pool.Node, len(w.nodes))
	for i, n := range w.nodes {
		if w.clusters[i] != nil {
			continue // the previous version checks a cluster node as any: its marker's shard only
		}
		p := w.newPool(n, "legacy")
		defer p.Close()
		pools[i] = p
	}
	bound := w.set.maxTTL
	for _, t := range w.set.clientMaxTTL {
		bound = min(bound, t)
	}
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(50+rng.Intn(450))*time.Millisecond)
		i := rng.Intn(len(pools))
		if pools[i] == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, w.set.nodeTimeout*4)
		reply, err := pools[i].Eval(cctx, previousCheck, wire.MarkerKey, "")
		if f, ok := previousFacts(reply, err); ok && f.mark != "" && f.waited >= bound+time.Second {
			_, _ = pools[i].Eval(cctx, previousCheck, wire.MarkerKey, f.mark)
			w.trace.add(w.now(), fmt.Sprintf("legacy marks node %d (%s)", i+1, f.mark))
		}
		cancel()
	}
}

// legacyFacts is what the previous check told: the mark to write once the
// node has been waited out ("" when it is marked), and how long it has
// been waited out.
type legacyFacts struct {
	mark   string
	waited time.Duration
}

// previousFacts reads the previous check's reply {run id, uptime, marked,
// replication id, sighted, cluster}.
func previousFacts(reply any, err error) (legacyFacts, bool) {
	vs, ok := reply.([]any)
	if err != nil || !ok || len(vs) != 6 {
		return legacyFacts{}, false
	}
	id, _ := wire.String(vs[0])
	up, _ := vs[1].(int64)
	marked, _ := wire.String(vs[2])
	lineage, _ := wire.String(vs[3])
	sighted, _ := vs[4].(int64)
	if marked == id {
		return legacyFacts{}, true
	}
	waited := up
	if sighted >= 0 {
		waited = sighted
	}
	return legacyFacts{mark: wire.MarkerOf(id, lineage), waited: time.Duration(waited) * time.Second}, true
}
