package wire

import (
	"strconv"
	"strings"
)

// Marker is a value of MarkerKey, as the restart check (node.lua) reads
// and writes it. It has one of four forms:
//
//   - "<run id> <replication id>" (MarkerOf): the node is marked. Restart
//     safety counts it while INFO server's run_id and INFO replication's
//     master_replid are those.
//   - "<run id>": an older marker, of the run id alone. It counts the node
//     while the node runs that process; the next check rewrites it with
//     the lineage.
//   - "~ <run id> <replication id> <uptime seconds>": the node's data came
//     from another process or lineage (a promoted replica, a restart from
//     a snapshot or an append-only file) and it had a marker before. A
//     check first saw this process with this lineage when the process had
//     been up for that many seconds. Clients count the node once their
//     maximum TTL has passed since; with WithDurableNodes, at once.
//   - "? <run id> <replication id> <uptime seconds>": the same, for a node
//     that had no marker (a dataset that continues another one's).
type Marker struct {
	RunID   string // the process's run id; "" when the value is none of the forms
	Lineage string // the dataset's replication id; "" in an older marker
	Pending string // "" for a mark; "~" or "?" for a record of data from elsewhere
	Seen    int64  // for a "~" or "?" record, the uptime in seconds at the first sighting; 0 otherwise
}

// UnknownLineage is the lineage the restart check reports when the node
// refused it INFO replication (an ACL without +info|replication): it
// cannot tell a promoted replica from its master then.
const UnknownLineage = "0"

// MarkerOf is the marker that names a node's process and lineage.
func MarkerOf(runID, lineage string) string { return runID + " " + lineage }

// ParseMarker reads a value of MarkerKey. A value of none of the forms
// (Marker says which) gives the zero Marker: a check takes it for the
// marker of another process.
func ParseMarker(v string) Marker {
	f := strings.Split(v, " ")
	switch {
	case len(f) == 1 && isHex(f[0]):
		return Marker{RunID: f[0]}
	case len(f) == 2 && isHex(f[0]) && isHex(f[1]):
		return Marker{RunID: f[0], Lineage: f[1]}
	case len(f) == 4 && (f[0] == "~" || f[0] == "?") && isHex(f[1]) && isHex(f[2]) && isDigits(f[3]):
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
// runID on the lineage: a mark of both, or an older marker of the run id.
func (m Marker) Marks(runID, lineage string) bool {
	return m.Valid() && m.Pending == "" && m.RunID == runID && (m.Lineage == "" || m.Lineage == lineage)
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
