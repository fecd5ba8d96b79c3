package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// nodeState is what the nodes command learned of one node: what the
// restart check of a Client (node.lua) reads, without writing anything.
type nodeState struct {
	addr    string
	runID   string
	up      int64             // uptime_in_seconds, as reported
	role    string            // INFO replication's role: master, or slave for a replica
	lineage string            // master_replid: the dataset's replication id
	copied  bool              // master_replid2 is not all zeros: the dataset continues another
	marker  string            // the value of the marker key
	hasMark bool              // the marker key exists
	facts   map[string]string // the keys beside it (wire.FactKey): mark and seen
	err     error
}

// readNode asks node p for its run id and uptime (INFO server), its role
// and lineage (INFO replication) and its restart-safety marker.
func readNode(ctx context.Context, p pool.Pool) nodeState {
	s := nodeState{addr: p.Addr()}
	server, err := redis.String(p.Do(ctx, "INFO", "server"))
	if err != nil {
		s.err = err
		return s
	}
	f := infoFields(server)
	s.runID = f["run_id"]
	up, err := strconv.ParseInt(f["uptime_in_seconds"], 10, 64)
	if s.runID == "" || err != nil || up < 0 {
		s.err = fmt.Errorf("node %s: INFO server has no run_id or uptime_in_seconds", p.Addr())
		return s
	}
	s.up = up
	repl, err := redis.String(p.Do(ctx, "INFO", "replication"))
	if err != nil {
		s.err = err
		return s
	}
	f = infoFields(repl)
	s.role, s.lineage = f["role"], f["master_replid"]
	s.copied = strings.Trim(f["master_replid2"], "0") != ""
	if s.role == "" || s.lineage == "" {
		s.err = fmt.Errorf("node %s: INFO replication has no role or master_replid", p.Addr())
		return s
	}
	s.marker, err = redis.String(p.Do(ctx, "GET", wire.MarkerKey))
	switch {
	case err == nil:
		s.hasMark = true
	case err != redis.ErrNil:
		s.err = err
		return s
	}
	s.facts = map[string]string{}
	for _, f := range []string{wire.FactMark, wire.FactSeen} {
		v, err := redis.String(p.Do(ctx, "GET", wire.FactKey(wire.MarkerKey, f)))
		switch {
		case err == nil:
			s.facts[f] = v
		case err != redis.ErrNil:
			s.err = err
			return s
		}
	}
	return s
}

// infoFields reads the "field:value" lines of an INFO reply.
func infoFields(info string) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// replica reports whether the node is not a master: its check fails, and
// it counts toward no quorum.
func (s nodeState) replica() bool { return s.role != "master" && s.role != "primary" }

// marked reports whether the marker counts the node's process and
// lineage as they are: a mark of both, or an older marker of the run id.
func (s nodeState) marked() bool {
	m := wire.ParseMarker(s.marker)
	if side := wire.ParseMarker(s.facts["mark"]); (m.Lineage == "" || m.Lineage == wire.UnknownLineage) && side.RunID == m.RunID {
		m.Lineage = side.Lineage
	}
	return s.hasMark && m.Marks(s.runID, s.lineage, !s.copied)
}

// usesDeployment reports whether the node tells a Client that the
// deployment is not new: its check reports a marker, which it does for
// a mark and for any other value but a "?" record (a "~" record, or a
// marker the check turns into one).
func (s nodeState) usesDeployment() bool {
	return s.err == nil && !s.replica() && s.hasMark && !strings.HasPrefix(s.marker, "?")
}

// pending returns the node's "~" or "?" record of its process and
// lineage, if the marker is one.
// The earliest of the two counts: the record in the marker (as earlier
// versions wrote it) and the one in the hash beside it.
func (s nodeState) pending() (found wire.Marker, ok bool) {
	for _, v := range []string{s.marker, s.facts["seen"]} {
		m := wire.ParseMarker(v)
		if m.Pending != "" && m.RunID == s.runID && wire.SameLineage(m.Lineage, s.lineage, !s.copied) && (!ok || m.Seen < found.Seen) {
			found, ok = m, true
		}
	}
	return found, ok
}

// durableNote is said of a node whose marker survived from another
// process or lineage: Clients with WithDurableNodes count it at once.
const durableNote = " (counted at once by Clients with WithDurableNodes, if it keeps every write)"

// verdict says whether restart safety counts the node, with a deployment
// in which some node has a marker (used) or none (new), for Clients whose
// maximum TTL is maxTTL; counted is false while the node is kept out. It
// follows node.lua's reply and the Client's reading of it.
func (s nodeState) verdict(used bool, maxTTL time.Duration) (counted bool, why string) {
	switch {
	case s.replica():
		return false, fmt.Sprintf("not counted: a replica (role:%s)", s.role)
	case s.marked():
		return true, "counted (marked: run id and lineage)"
	case !used:
		return true, "counted at once: no node has a marker (a new deployment)"
	}
	if m, ok := s.pending(); ok {
		return s.sightedVerdict(m, maxTTL)
	}
	if (!s.hasMark || !wire.ParseMarker(s.marker).Valid()) && !s.copied {
		// No marker, or one of a later form (node.lua reports it as "+").
		// A Client counts the reported uptime less a second (Redis rounds it).
		left := maxTTL - upFloor(s.up)
		if left <= 0 {
			return true, "counted at its next use (up for the maximum TTL), then marked"
		}
		return false, fmt.Sprintf("not counted for another %v: no marker while other nodes have one (restarted without its data, or new)", left)
	}
	why = "not counted for the maximum TTL after the next check: its data came from another process or lineage and no check has seen it yet"
	if s.usesDeployment() && wire.ParseMarker(s.marker).Valid() {
		why += durableNote
	}
	return false, why
}

// sightedVerdict is the verdict on a node whose data a check first saw
// come from another process or lineage, as record m says.
func (s nodeState) sightedVerdict(m wire.Marker, maxTTL time.Duration) (counted bool, why string) {
	since := max(s.up-m.Seen, 0)
	// As for the uptime, a Client counts the seconds since less one.
	left := maxTTL - upFloor(since)
	if left <= 0 {
		return true, "counted at its next use (the maximum TTL has passed since its data was first seen from another lineage), then marked"
	}
	why = fmt.Sprintf("not counted for another %v: its data came from another process or lineage (a promoted replica, or a restart from a snapshot), first seen %v ago", left, time.Duration(since)*time.Second)
	if m.Pending == "~" {
		why += durableNote
	}
	return false, why
}

// upFloor is the least time a node that reports up seconds has run: a
// Client counts a second less (Redis rounds both ends to the second).
func upFloor(up int64) time.Duration { return time.Duration(max(up-1, 0)) * time.Second }

// printNodes writes, node by node, whether restart safety counts it, and
// how many nodes it counts.
func printNodes(w io.Writer, states []nodeState, quorum int, maxTTL time.Duration) error {
	used := false
	for _, s := range states {
		used = used || s.usesDeployment()
	}
	counted := 0
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRUN ID\tUP\tMARKED\tRESTART SAFETY")
	for _, s := range states {
		if s.err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%v\n", s.addr, s.err)
			continue
		}
		ok, why := s.verdict(used, maxTTL)
		if ok {
			counted++
		}
		marked := map[bool]string{true: "yes", false: "no"}[s.marked()]
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", s.addr, s.runID, time.Duration(s.up)*time.Second, marked, why)
	}
	fmt.Fprintf(w, "%d of %d nodes counted by restart safety (quorum %d; maximum TTL %v)\n", counted, len(states), quorum, maxTTL)
	return tw.Flush()
}
