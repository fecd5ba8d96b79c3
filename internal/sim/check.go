package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/internal/wire"
)

// The checkers.
//
// Mutual exclusion is checked on validity windows (faults.Checker): each
// hold is [the acquisition's return, the earlier of its release and the
// end of its validity, in real time], and no two windows of one key may
// intersect unless both are readers'; a semaphore's never more than its
// permits. A linearizability checker with a mutex model does not fit: a
// lease ends by itself when its TTL runs out, so a history in which a
// holder never released and another took the lock later is legal, and a
// model in which only Unlock frees the mutex reports it as a violation
// (a model that frees it at expiry needs the expiry as an operation,
// which no call returns).
//
// Where a sequential model does fit, porcupine checks it: fences (a
// fenced mutex's, an election's terms) are a counter that every
// acquisition moves strictly up, so in some order consistent with real
// time each acquisition's fence is above the last one's. That holds while
// fewer than a quorum of nodes ever lost their counters (docs/fencing.md);
// runs in which more did are not held to it.

// fencedOp is one fenced acquisition: [call, return] and the fence.
type fencedOp struct {
	key       string
	call, ret time.Duration
	fence     uint64
}

// leaderAnswer is one Election.Leader call.
type leaderAnswer struct {
	client    int
	call, ret time.Duration
	term      uint64
	value     string
	err       error
	onQuorum  string // for ErrNoLeader: the leader whose key a quorum of healthy nodes held meanwhile
}

// leaderHold is a leader's hold, for the checks of Leader's answers.
type leaderHold struct {
	token  string
	called time.Duration
	h      *holding
}

// fenceModel: every acquisition's fence is above the one before it.
var fenceModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, _, out any) (bool, any) {
		f := out.(uint64)
		return f > state.(uint64), f
	},
	DescribeOperation: func(_, out any) string { return fmt.Sprintf("acquire -> fence %d", out) },
}

// noteLeader records a leader's hold.
func (w *world) noteLeader(token string, h *holding) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leaderHolds == nil {
		w.leaderHolds = map[string]*leaderHold{}
	}
	w.leaderHolds[token] = &leaderHold{token: token, called: h.called, h: h}
}

// leaderOnQuorum looks at the nodes directly, the moment a Leader call of
// said there is none: it returns the leader whose election key a
// quorum of nodes that were healthy all along holds, while its lock is
// valid with room to spare and its campaign had returned before the call
// began, and whose record at least one of those nodes still holds; ""
// when there is none. Such a leader should have been named (the record
// is repaired where it is missing). A leader whose record none of them
// holds (record-lost faults took it from four nodes, and the fifth is
// down) cannot be named by anyone but itself: its next extension writes
// the record back.
func (w *world) leaderOnQuorum(call time.Duration) string {
	key := wire.ElectionKey(electionName)
	counts := map[string]int{}
	known := map[string]bool{} // a healthy node with the key holds its record
	w.mu.Lock()
	now := time.Now()
	healthy := make([]bool, len(w.nodes))
	for i, u := range w.healthyFrom {
		healthy[i] = !now.Before(u)
	}
	w.mu.Unlock()
	var seen []string // what each node holds, for the report
	for i := range w.nodes {
		n := w.at(i, key)
		v, err := n.Do("GET", key)
		rec, _ := n.Do("HGET", wire.LeaderKey(electionName), "token")
		tok, _ := v.(string)
		r, _ := rec.(string)
		seen = append(seen, fmt.Sprintf("node %d: healthy=%v key=%s record=%s err=%v", i+1, healthy[i], tokenTail(tok), tokenTail(r), err))
		if healthy[i] && tok != "" {
			counts[tok]++
			known[tok] = known[tok] || r == tok
		}
	}
	quorum := len(w.nodes)/2 + 1
	for tok, k := range counts {
		if k < quorum || !known[tok] {
			continue
		}
		w.mu.Lock()
		lh := w.leaderHolds[tok]
		w.mu.Unlock()
		if lh != nil && lh.h.start < call && w.now() < lh.h.end-w.set.nodeTimeout*4 {
			return fmt.Sprintf("%s (key on %d healthy nodes, valid until %v; %s)", tokenTail(tok), k, lh.h.end, strings.Join(seen, "; "))
		}
	}
	return ""
}

// holdOf is a checker's hold.
func holdOf(o op, worker, key string, start, end time.Duration, fence uint64) faults.Hold {
	return faults.Hold{Key: o.kind0() + ":" + key, Kind: o.kind, Worker: worker, Shared: o.shared,
		Permits: o.permits, Start: start, End: end, Fence: fence}
}

// check runs every checker on the run's history.
func (w *world) check() {
	for _, o := range w.chk.Overlaps() {
		w.violateAt(max(o.A.Start, o.B.Start), "mutual exclusion: %s", o)
	}
	for _, c := range w.chk.Crowds() {
		w.violateAt(c.At, "semaphore: %s", c)
	}
	for _, l := range w.store.lost() {
		w.violate("lost update: %s", l)
	}
	w.mu.Lock()
	durableFences := len(w.dataLost) <= len(w.nodes)-(len(w.nodes)/2+1)
	ops := append([]fencedOp(nil), w.fencedOps...)
	answers := append([]leaderAnswer(nil), w.leaders...)
	refused := append([]string(nil), w.fenceRefusals...)
	back := append([]string(nil), w.observeBack...)
	w.mu.Unlock()
	if durableFences {
		for _, o := range w.chk.TermsHeldTwice() {
			w.violate("fence or term held twice: %s", o)
		}
		for _, o := range w.chk.FenceInversions() {
			w.violate("fences out of order: %s (fences %d, %d)", o, o.A.Fence, o.B.Fence)
		}
		for _, r := range refused {
			w.violate("%s", r)
		}
		for _, b := range back {
			w.violate("%s", b)
		}
		w.checkFences(ops)
	}
	w.checkLeaders(answers, durableFences)
	w.checkFenceSteps(ops)
	w.falseExclusions = w.checkAvailability()
}

// checkFenceSteps checks, per key, that the fence only grows from one
// holder to the next (in the order the acquisitions returned) while no
// node lost data between the first's call and the second's return: the
// earlier write-back's quorum then still meets every later quorum
// (docs/fencing.md). Unlike checkFences, it does not need the whole run
// to have lost fewer than a quorum of counters, which few runs with
// restarts do.
func (w *world) checkFenceSteps(ops []fencedOp) {
	w.mu.Lock()
	var losses []time.Duration
	for _, l := range w.losses {
		losses = append(losses, l...)
	}
	w.mu.Unlock()
	lostBetween := func(a, b time.Duration) bool {
		for _, t := range losses {
			if a <= t && t <= b {
				return true
			}
		}
		return false
	}
	byKey := map[string][]fencedOp{}
	for _, o := range ops {
		byKey[o.key] = append(byKey[o.key], o)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		os := byKey[k]
		sort.SliceStable(os, func(a, b int) bool { return os[a].ret < os[b].ret })
		for j := 1; j < len(os); j++ {
			a, b := os[j-1], os[j]
			if b.fence <= a.fence && !lostBetween(a.call, b.ret) {
				w.violateAt(b.ret, "fence of %s went from %d (returned at %v) to %d (returned at %v) with no node losing data between", k, a.fence, a.ret, b.fence, b.ret)
			}
		}
	}
}

// checkFences checks, per key, that fences rise in an order consistent
// with real time (porcupine).
func (w *world) checkFences(ops []fencedOp) {
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		byKey[o.key] = append(byKey[o.key], porcupine.Operation{Call: int64(o.call), Return: int64(o.ret), Output: o.fence})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !porcupine.CheckOperations(fenceModel, byKey[k]) {
			w.violate("fences of %s do not rise in real-time order (%d fenced acquisitions)", k, len(byKey[k]))
		}
	}
}

// checkLeaders checks every answer of Leader: a leader it names held the
// term during the call (its campaign had begun, and its validity had not
// ended a TTL before the call began: the key may outlive a release that
// did not reach every node), and none is missed while a quorum of healthy
// nodes held a valid leader's key. Terms name one leader only while fewer
// than a quorum of nodes ever lost their counters (uniqueTerms).
func (w *world) checkLeaders(answers []leaderAnswer, uniqueTerms bool) {
	w.mu.Lock()
	holds := make([]*leaderHold, 0, len(w.leaderHolds))
	for _, lh := range w.leaderHolds {
		holds = append(holds, lh)
	}
	w.mu.Unlock()
	byTerm := map[uint64][]*holding{} // more than one when a quorum lost its counters
	for _, lh := range holds {
		byTerm[lh.h.fence] = append(byTerm[lh.h.fence], lh.h)
	}
	for _, a := range answers {
		if a.err == nil && a.term == 0 {
			w.violate("Leader (client %d, %v-%v) named term 0 (%q): terms start at 1", a.client+1, a.call, a.ret, a.value)
			continue
		}
		if a.err == nil && !uniqueTerms {
			continue // a quorum lost its counters: terms repeat, and name no one leader
		}
		if a.err == nil {
			// A term no Campaign returned is a candidate's that won the
			// lock but not the record round (or whose call ended): it held
			// the key on a quorum, and then released it. Its window is not
			// known, so only the terms of leaders are checked.
			hs := byTerm[a.term]
			if len(hs) == 0 {
				// A candidate won the lock after every leader that had
				// ended: its term is above theirs.
				for _, lh := range holds {
					if h := lh.h; h.fence >= a.term && h.end < a.call {
						w.violate("Leader (client %d, %v-%v) named term %d (%q), not above the term %d of a leader that ended at %v", a.client+1, a.call, a.ret, a.term, a.value, h.fence, h.end)
						break
					}
				}
				continue
			}
			ok := false
			for _, h := range hs {
				ok = ok || h.called <= a.ret && a.call <= h.end+h.o.ttl
			}
			if !ok {
				w.violateAt(a.call, "Leader (client %d, %v-%v) named term %d (%q), whose leader held from %v to %v", a.client+1, a.call, a.ret, a.term, a.value, hs[0].start, hs[0].end)
			}
			continue
		}
		if a.onQuorum != "" {
			w.violateAt(a.call, "Leader (client %d, %v-%v) found no leader while leader %s held on a quorum of healthy nodes: %v", a.client+1, a.call, a.ret, a.onQuorum, a.err)
		}
	}
}
