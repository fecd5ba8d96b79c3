package wire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Codes of the acquisition scripts' replies (acquire.lua,
// multi_acquire.lua).
const (
	CodeHeld     = 0 // the key is held by another owner
	CodeAcquired = 1
	CodeReserved = 2 // the key is free but kept for another waiter
	CodeSize     = 3 // a semaphore of another size (sem_acquire.lua)
	CodeKind     = 4 // the name is held by another kind of lock (rw_*.lua)
)

// String reads a bulk or status reply as a string.
func String(v any) (string, bool) {
	switch v := v.(type) {
	case []byte:
		return string(v), true
	case string:
		return v, true
	}
	return "", false
}

// Acquisition is one node's answer to an acquisition script.
type Acquisition struct {
	Code int64 // CodeHeld, CodeAcquired or CodeReserved
	PTTL int64 // refused: ms left on the key or the reservation; -1 none
}

// ParseAcquire reads 1, {1, counter, epoch}, or {code, pttl}; ok is false
// for anything else. A fenced grant's counters are read by FenceAt.
func ParseAcquire(reply any) (a Acquisition, ok bool) {
	if n, ok := reply.(int64); ok {
		return Acquisition{Code: n}, n == CodeAcquired
	}
	vs, ok := reply.([]any)
	if !ok || len(vs) == 0 {
		return Acquisition{}, false
	}
	code, ok := vs[0].(int64)
	switch {
	case !ok:
		return Acquisition{}, false
	case code == CodeAcquired:
		return Acquisition{Code: code}, len(vs)%2 == 1 && len(vs) >= 3
	case code != CodeHeld && code != CodeReserved || len(vs) != 2:
		return Acquisition{}, false
	}
	pttl, ok := vs[1].(int64)
	return Acquisition{Code: code, PTTL: pttl}, ok
}

// Fence is a fenced grant's counter and epoch for one key, as one node
// holds them.
type Fence struct {
	Counter uint64
	Epoch   string
}

// FenceAt reads key k's counter and epoch (from 0) in a fenced grant of n
// keys, without allocating.
func FenceAt(reply any, n, k int) (Fence, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 1+2*n || k < 0 || k >= n {
		return Fence{}, fmt.Errorf("unexpected reply %v", reply)
	}
	if code, ok := vs[0].(int64); !ok || code != CodeAcquired {
		return Fence{}, fmt.Errorf("unexpected reply %v", reply)
	}
	return parseFence(vs[1+2*k], vs[2+2*k])
}

// MaxFence is the largest fence counter the Client takes from a node: the
// scripts compare counters as Lua numbers (doubles), exact up to 2^53.
// A node that reports more did not count there by the Client's fences
// (its data was changed by hand, or it lies).
const MaxFence = 1<<53 - 1

// parseCounter reads a fence counter.
func parseCounter(s string) (uint64, error) {
	c, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("fence counter %q: %w", s, err)
	case c > MaxFence:
		return 0, fmt.Errorf("fence counter %q is above %d, the largest the scripts compare exactly", s, uint64(MaxFence))
	}
	return c, nil
}

// parseFence reads a fence counter and an epoch from a reply.
func parseFence(counter, epoch any) (Fence, error) {
	cs, ok1 := String(counter)
	es, ok2 := String(epoch)
	if !ok1 || !ok2 {
		return Fence{}, fmt.Errorf("unexpected fence %v, epoch %v", counter, epoch)
	}
	c, err := parseCounter(cs)
	if err != nil {
		return Fence{}, err
	}
	return Fence{Counter: c, Epoch: es}, nil
}

// ParseFenceRefusal reads a fence write-back's refusal {0, counter}: the
// node's counter, not below the fence proposed; false for a counter that
// is not one (parseCounter).
func ParseFenceRefusal(reply any) (uint64, bool) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 2 {
		return 0, false
	}
	if code, ok := vs[0].(int64); !ok || code != 0 {
		return 0, false
	}
	s, ok := String(vs[1])
	if !ok {
		return 0, false
	}
	n, err := parseCounter(s)
	return n, err == nil
}

// Done is a node's answer to an extension or a release.
type Done struct {
	OK bool // the key held the token and was extended or given up
	// Unannounced is the node's error when it gave the key up but
	// refused to announce it (no permission to PUBLISH); "" otherwise.
	Unannounced string
}

// ParseDone reads 1 or 0 (extensions, releases), or {1, error}: given
// up, but not announced. Any other reply is an error: a node that
// answers so did not run the script the Client sent.
func ParseDone(reply any) (Done, error) {
	switch r := reply.(type) {
	case int64:
		if r == 0 || r == 1 {
			return Done{OK: r == 1}, nil
		}
	case []any:
		if len(r) != 2 {
			break
		}
		if n, ok := r[0].(int64); ok && n == 1 {
			msg, _ := String(r[1])
			if msg == "" {
				msg = "PUBLISH refused"
			}
			return Done{OK: true, Unannounced: msg}, nil
		}
	}
	return Done{}, fmt.Errorf("unexpected reply %v", reply)
}

// Inspection is a node's answer to the inspection script.
type Inspection struct {
	Value  string // the key's value (a token or a reservation); "" when absent
	Held   bool   // the key exists
	PTTL   int64  // ms left; -1 without TTL
	Queued int64  // entries in the queue
	Fence  uint64 // the largest fence written back for the key (its counter's, or its slot's floor's); 0 for none
}

// ParseInspect reads {value or nil, pttl, queued, fence or nil}.
func ParseInspect(reply any) (Inspection, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 4 {
		return Inspection{}, fmt.Errorf("unexpected inspection reply %T", reply)
	}
	pttl, ok1 := vs[1].(int64)
	queued, ok2 := vs[2].(int64)
	if !ok1 || !ok2 {
		return Inspection{}, errors.New("unexpected inspection reply")
	}
	in := Inspection{PTTL: pttl, Queued: queued}
	in.Value, in.Held = String(vs[0])
	if f, ok := String(vs[3]); ok {
		fence, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return Inspection{}, fmt.Errorf("fence counter %q: %w", f, err)
		}
		in.Fence = fence
	}
	return in, nil
}

// NodeFacts is a node's answer to the restart check (node.lua).
type NodeFacts struct {
	RunID   string
	Uptime  int64  // uptime_in_seconds as INFO says
	Marked  string // the run id when marked; "~": another process's or lineage's marker; "+": a marker of a later form (UnknownMarker); "": none
	Lineage string // the dataset's replication id (master_replid)
	Sighted int64  // -1, or the seconds since this process and lineage were first seen unmarked
	Cluster bool   // the node runs in cluster mode: the marker read is one slot's
	Born    string // the shards that ran when the deployment was new (BornOf); "" when none are known
	Own     bool   // the lineage began in this process: it was never a replica since it started
	Kept    bool   // the mark says the node kept its data and was marked at once for it (MarkKept)
}

// ParseNodeCheck reads {run id, uptime, marked, replication id, sighted,
// cluster, born, own, kept}.
func ParseNodeCheck(reply any) (NodeFacts, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 9 {
		return NodeFacts{}, fmt.Errorf("restart check: unexpected reply %v", reply)
	}
	id, ok1 := String(vs[0])
	up, ok2 := vs[1].(int64)
	marked, ok3 := String(vs[2])
	lineage, ok4 := String(vs[3])
	sighted, ok5 := vs[4].(int64)
	cluster, ok6 := vs[5].(int64)
	born, ok7 := String(vs[6])
	own, ok8 := vs[7].(int64)
	kept, ok9 := vs[8].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 || !ok9 || own&^1 != 0 || kept&^1 != 0 || id == "" || up < 0 || lineage == "" || sighted < -1 || cluster&^1 != 0 {
		return NodeFacts{}, fmt.Errorf("restart check: unexpected reply %v", reply)
	}
	return NodeFacts{RunID: id, Uptime: up, Marked: marked, Lineage: lineage, Sighted: sighted, Cluster: cluster == 1, Born: born, Own: own == 1, Kept: kept == 1}, nil
}

// Announcement is a release's message on a key's channels: "" when the
// key was left free for anyone; "<waiter id>" when it is kept for that
// waiter (a reservation); "<waiter id> <round>" when it was handed to
// that waiter after the given round of it ran on the node.
type Announcement struct {
	To      string // the waiter named; "" for none
	Round   int    // the round a hand-off followed; 0 otherwise
	Handoff bool   // the key now holds the waiter's hand-off token
}

// ParseAnnouncement reads a release's message. A hand-off whose round is
// not a number has Round 0, which names no round.
func ParseAnnouncement(msg string) Announcement {
	id, round, handoff := strings.Cut(msg, " ")
	a := Announcement{To: id, Handoff: handoff}
	if handoff {
		a.Round, _ = strconv.Atoi(round)
	}
	return a
}

// Permit is one node's answer to the semaphore acquisition.
type Permit struct {
	Code  int64 // CodeAcquired, CodeHeld, or CodeSize
	Slot  int   // CodeAcquired: the slot taken, from 0
	PTTL  int64 // CodeHeld: the least ms a slot has left; -1 unknown
	Size  int64 // CodeSize: the semaphore's size on the node
	Fence Fence // CodeAcquired, fenced: the slot's counter and the node's epoch
}

// ParsePermit reads slot + 1 (a grant), {slot + 1, counter, epoch} (a
// fenced grant), {0, pttl} or {3, size}.
func ParsePermit(reply any) (Permit, bool) {
	if n, ok := reply.(int64); ok {
		return Permit{Code: CodeAcquired, Slot: int(n - 1)}, n >= 1
	}
	vs, ok := reply.([]any)
	if !ok || len(vs) < 2 {
		return Permit{}, false
	}
	code, ok := vs[0].(int64)
	switch {
	case !ok:
		return Permit{}, false
	case len(vs) == 3 && code >= 1:
		f, err := parseFence(vs[1], vs[2])
		return Permit{Code: CodeAcquired, Slot: int(code - 1), Fence: f}, err == nil
	case len(vs) != 2:
		return Permit{}, false
	case code == CodeHeld:
		pttl, ok := vs[1].(int64)
		return Permit{Code: code, PTTL: pttl}, ok
	case code == CodeSize:
		s, ok := String(vs[1])
		n, err := strconv.ParseInt(s, 10, 64)
		return Permit{Code: code, Size: n}, ok && err == nil
	}
	return Permit{}, false
}

// LeaderRecord is one node's answer to the leader read.
type LeaderRecord struct {
	Token  string // what the election key holds; "" when absent
	Record string // the token the record names; "" without a record
	Value  string
	Term   uint64
	Client string
}

// Current reports whether the record is the current holder's: the
// election key holds the token the record names.
func (r LeaderRecord) Current() bool { return r.Token != "" && r.Token == r.Record }

// ParseLeaderRead reads {token or nil, record token, value, term, client},
// the record's fields nil without a record.
func ParseLeaderRead(reply any) (LeaderRecord, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 5 {
		return LeaderRecord{}, fmt.Errorf("unexpected leader reply %v", reply)
	}
	var r LeaderRecord
	r.Token, _ = String(vs[0])
	r.Record, _ = String(vs[1])
	r.Value, _ = String(vs[2])
	r.Client, _ = String(vs[4])
	if t, ok := String(vs[3]); ok {
		term, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return LeaderRecord{}, fmt.Errorf("leader term %q: %w", t, err)
		}
		r.Term = term
	}
	return r, nil
}
