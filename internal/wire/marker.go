package wire

import (
	"strconv"
	"strings"
)

// Marker is a value of MarkerKey (or of a ShardMarkerKey), or of a key
// beside it (FactKey), as the restart check (node.lua) reads and writes them.
// Every version reads every form, and ignores fields after those it knows,
// which later versions may add; a value whose first field is of no form
// here is no marker at all (a check neither reads it as another process's
// nor overwrites it). The forms:
//
//   - "<run id>": the node is marked; MarkerKey has this form once this
//     version marked it, as every earlier version reads it. The lineage
//     that goes with it is beside it, in FactKey(FactMark): "<run id>
//     <replication id>".
//   - "<run id> <replication id>": the node is marked (the form of the
//     versions that kept the lineage in MarkerKey). Restart safety counts
//     it while INFO server's run_id and INFO replication's master_replid
//     are those. A replication id of "0" was written by a Client that may
//     not read INFO replication: it names any lineage of a process that
//     was never a replica since it started.
//   - "~ <run id> <replication id> <uptime seconds>": a sighting (in
//     FactKey(FactSeen); earlier versions wrote it in MarkerKey): the
//     node's data came from another process or lineage (a promoted
//     replica, a restart from a snapshot or an append-only file) and it
//     had a marker before. A check first saw this process with this
//     lineage when the process had been up for that many seconds. Clients
//     count the node once their maximum TTL has passed since; with
//     WithDurableNodes, at once. The earliest sighting counts.
//   - "? <run id> <replication id> <uptime seconds>": the same, for a node
//     that had no marker (a dataset that continues another one's).
type Marker struct {
	RunID   string // the process's run id; "" when the value is none of the forms
	Lineage string // the dataset's replication id; "" when the value does not say
	Pending string // "" for a mark; "~" or "?" for a sighting
	Seen    int64  // for a sighting, the uptime in seconds when it was made; 0 otherwise
}

// UnknownLineage is the lineage the restart check reports when the node
// refused it INFO replication (an ACL without +info|replication): it
// cannot tell a promoted replica from its master then.
const UnknownLineage = "0"

// MarkKept is the third field of FactKey(FactMark) when a Client marked
// the node at once because it kept its data (a Client that declares the
// nodes durable): the only mark a durable Client trusts on a node younger
// than its bound, whatever the bound of the Client that wrote it.
const MarkKept = "kept"

// UnknownMarker is what the restart check reports for a marker of a form
// this version does not know, on a dataset of its own: the deployment is
// in use, and the node counts by its uptime, as one without a marker.
const UnknownMarker = "+"

// MarkerOf is the marker that names a node's process and lineage.
func MarkerOf(runID, lineage string) string { return runID + " " + lineage }

// ParseMarker reads a value of MarkerKey or of FactKey(FactMark) or
// FactKey(FactSeen), ignoring fields after those of its form. A value of none of the
// forms (Marker says which) gives the zero Marker.
func ParseMarker(v string) Marker {
	f := strings.Fields(v)
	switch {
	case len(f) >= 1 && isHex(f[0]):
		m := Marker{RunID: f[0]}
		if len(f) >= 2 && isHex(f[1]) {
			m.Lineage = f[1]
		}
		return m
	case len(f) >= 4 && (f[0] == "~" || f[0] == "?") && isHex(f[1]) && isHex(f[2]) && isDigits(f[3]):
		seen, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return Marker{}
		}
		return Marker{RunID: f[1], Lineage: f[2], Pending: f[0], Seen: seen}
	}
	return Marker{}
}

// Valid reports whether m is one of the forms of a marker.
func (m Marker) Valid() bool { return m.RunID != "" }

// Marks reports whether m counts the node now that it runs the process
// runID on lineage; own says the lineage began in this process (INFO
// replication's master_replid2 is all zeros). A mark of the run id counts
// when its lineage is this one, or when one side does not know it (a
// Client without +info|replication wrote it, or asks: UnknownLineage) and
// the process was never a replica since it started.
func (m Marker) Marks(runID, lineage string, own bool) bool {
	return m.Valid() && m.Pending == "" && m.RunID == runID && SameLineage(m.Lineage, lineage, own)
}

// SameLineage reports whether lineage recorded, written with a mark or a
// sighting of a process, is the lineage now of that process (own as in
// Marks), as node.lua's lineageIs decides.
func SameLineage(recorded, now string, own bool) bool {
	if recorded == now || now == UnknownLineage {
		return true
	}
	return (recorded == "" || recorded == UnknownLineage) && own
}

// BornOf lists the shards (the run id and lineage of each) that ran when
// a deployment was new, as FactKey(FactBorn) keeps them; an empty run id
// (a shard that did not answer) is left out.
func BornOf(runIDs, lineages []string) string {
	var parts []string
	for k, id := range runIDs {
		if id != "" {
			parts = append(parts, id+":"+lineages[k])
		}
	}
	return strings.Join(parts, " ")
}

// BornHas reports whether born (BornOf) lists the process runID on
// lineage, by SameLineage's rule for a lineage one side does not know.
func BornHas(born, runID, lineage string, own bool) bool {
	for _, p := range strings.Fields(born) {
		id, l, ok := strings.Cut(p, ":")
		if ok && id == runID && SameLineage(l, lineage, own) {
			return true
		}
	}
	return false
}

// String is the value of MarkerKey that m was read from ("" for the zero
// Marker).
func (m Marker) String() string {
	switch {
	case !m.Valid():
		return ""
	case m.Pending != "":
		return m.Pending + " " + MarkerOf(m.RunID, m.Lineage) + " " + strconv.FormatInt(m.Seen, 10)
	case m.Lineage == "":
		return m.RunID
	}
	return MarkerOf(m.RunID, m.Lineage)
}

// isHex reports whether s is a run or replication id as node.lua reads
// them from INFO (%x+): one or more hexadecimal digits.
func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// isDigits reports whether s is one or more decimal digits (%d+).
func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
