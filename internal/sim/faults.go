package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/simnode"
	"github.com/quorumlock/redlock/internal/wire"
)

// The faults the schedule draws. In model: at most N - quorum nodes are
// faulty at once (down, paused, cut off, slow, or restarted and not yet
// waited out), node clocks stay within the drift allowance, and a node
// that lost data is counted only after every lock it may have held ran
// out (restart safety, or a downtime longer than every TTL used).
const (
	fKill = iota // down, then back with its data (or empty after the longest TTL)
	fRestartEmpty
	fRestartKept
	fRestartSaved
	fPause
	fCut
	fCutReplies
	fDelay
	fDropConn
	fScriptFlush
	fRate
	fSave
	fRecordLost
	fStall
	fFailover // a replica that lagged promoted behind the node's address
	fSlotMove // on a cluster node, a slot moves to another shard with its keys
	nFaults
)

var faultNames = [nFaults]string{"kill", "restart-empty", "restart-kept", "restart-saved", "pause", "cut", "cut-replies", "delay", "drop-conn", "script-flush", "clock-rate", "save", "record-lost", "client-stall", "failover", "slot-move"}

// schedule injects faults until the quiet window, then heals every node.
func (w *world) schedule(ctx context.Context) {
	qctx, cancel := context.WithDeadline(ctx, w.quiet)
	defer cancel()
	var pending []func() // waits for the undo of a fault
	for qctx.Err() == nil {
		sleep(qctx, time.Duration(w.rng.ExpFloat64()*float64(20*time.Millisecond)))
		if qctx.Err() != nil {
			break
		}
		if undo := w.inject(); undo != nil {
			pending = append(pending, undo)
		}
	}
	for _, wait := range pending {
		wait()
	}
	for i := range w.nodes {
		for _, n := range w.shardsOf(i) {
			if !n.Up() {
				w.startNode(i, n, simnode.Kept)
			}
		}
	}
	w.mu.Lock()
	longest := max(w.longestTTL, w.set.maxTTL)
	w.mu.Unlock()
	settled := time.Now().Add(longest + 3*time.Second)
	if w.opt.OutOfModel {
		settled = w.end // no liveness checks
	}
	w.mu.Lock()
	w.settled = settled
	w.mu.Unlock()
	w.trace.add(w.now(), fmt.Sprintf("quiet: faults healed; liveness checked from %v", settled.Sub(w.start)))
}

// settledNow reports whether the quiet window has settled: every node
// up and counted, so every waiting call must be served.
func (w *world) settledNow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.settled.IsZero() && time.Now().After(w.settled)
}

// faultyLocked counts the nodes faulty now.
func (w *world) faultyLocked() int {
	now, k := time.Now(), 0
	for _, u := range w.faultyUntil {
		if now.Before(u) {
			k++
		}
	}
	return k
}

// inject draws one fault and starts it; it returns the fault's undo when
// it lasts (run when it ends or at the quiet window).
func (w *world) inject() func() {
	i := w.rng.Intn(len(w.nodes))
	n := w.nodes[i]
	if sh := w.shardsOf(i); len(sh) > 1 {
		n = sh[w.rng.Intn(len(sh))] // a fault of one shard of a cluster node
	}
	kind := w.rng.Intn(nFaults + 3)
	switch {
	case kind == nFaults+2:
		// Twice as often as each other fault: a failover misses only
		// the writes of its lag.
		kind = fFailover
	case kind >= nFaults:
		kind = fStall // three times as often as each other fault: it costs no node
	}
	dur := time.Duration(20+w.rng.Intn(600)) * time.Millisecond
	w.mu.Lock()
	busy := time.Now().Before(w.faultyUntil[i])
	limit := len(w.nodes) - (len(w.nodes)/2 + 1)
	if w.opt.OutOfModel {
		limit = len(w.nodes)
	}
	tooMany := !busy && w.faultyLocked() >= limit
	longest := max(w.longestTTL, w.set.maxTTL)
	w.mu.Unlock()
	switch kind {
	case fDropConn, fScriptFlush, fSave, fRate, fRecordLost, fStall, fSlotMove:
		// Harmless to the quorum: any node, any time (a stall is a
		// client's).
	case fRestartEmpty, fRestartSaved, fFailover:
		// With restart safety, nodes that lose their data are in model in
		// any number: each is excluded until what it forgot ran out. So a
		// quorum may restart empty, or fail over, under a held lock, now
		// and then (while it is excluded, nothing is granted).
		if busy || tooMany && (w.set.maxTTL == 0 || w.rng.Intn(4) > 0) {
			return nil
		}
	default:
		if busy || tooMany {
			return nil
		}
	}
	var replica *simnode.Replica
	if kind == fFailover {
		if replica = n.Replica(); replica == nil {
			return nil
		}
	}
	if kind == fSlotMove {
		return w.moveSlot(i) // counted there, when a slot moves
	}
	w.count(i, kind, dur)
	switch kind {
	case fFailover:
		return w.failover(i, n, replica, longest, dur)
	case fKill:
		n.Kill()
		down := dur
		data := simnode.Kept
		if w.rng.Intn(2) == 0 && !w.opt.OutOfModel {
			// Back empty, after every lock it held ran out.
			down, data = longest+dur, simnode.Empty
		}
		w.markFaulty(i, down)
		if data == simnode.Kept {
			return w.after(down, func() { w.startNode(i, n, data) })
		}
		return w.after(down, w.startOutlived(i, n, data, time.Now(), dur))
	case fRestartEmpty, fRestartKept, fRestartSaved:
		data := simnode.Data(kind - fRestartEmpty)
		if !w.restartInModel(data) && !w.opt.OutOfModel {
			n.Kill()
			w.markFaulty(i, longest+dur)
			return w.after(longest+dur, w.startOutlived(i, n, data, time.Now(), dur))
		}
		n.Kill()
		w.startNode(i, n, data)
		if w.opt.OutOfModel && data == simnode.Empty {
			// A quorum restarted empty at once, without restart safety.
			for k := 1; k < len(w.nodes)/2+1; k++ {
				j := (i + k) % len(w.nodes)
				w.nodes[j].Restart(simnode.Empty)
				w.newProcess(j, w.nodes[j])
				w.lostData(j)
			}
		}
		return nil
	case fPause:
		n.Pause()
		w.markFaulty(i, dur)
		return w.after(dur, n.Resume)
	case fCut, fCutReplies:
		c := w.clients[w.rng.Intn(len(w.clients))].name
		n.Cut(c, kind == fCutReplies)
		w.markFaulty(i, dur)
		return w.after(dur, func() { n.Heal(c) })
	case fDelay:
		n.SetDelay(time.Duration(1+w.rng.Intn(int(2*w.set.nodeTimeout/time.Millisecond))) * time.Millisecond)
		w.markFaulty(i, dur)
		return w.after(dur, func() { n.SetDelay(0) })
	case fDropConn:
		if n.DropConn(w.rng.Intn(64)) {
			// Its client reconnects: the node is not to be counted on by
			// the checks of Leader's answers meanwhile.
			w.markUnhealthy(i, 0)
		}
	case fScriptFlush:
		_, _ = n.Do("SCRIPT", "FLUSH")
	case fRecordLost:
		w.loseRecord(i)
	case fStall:
		// A client stalls (a long garbage collection, a starved process):
		// every node's replies to it wait, up to twice the node timeout,
		// so that a round's quorum can come back after the validity it
		// gives has run out.
		ci := w.rng.Intn(len(w.clients))
		c := w.clients[ci].name
		d := w.set.nodeTimeout/2 + time.Duration(w.rng.Intn(int(2*w.set.nodeTimeout/time.Millisecond)))*time.Millisecond
		w.mu.Lock()
		if until := time.Now().Add(dur + d + 2*time.Second); until.After(w.unstalledFrom[ci]) {
			w.unstalledFrom[ci] = until
		}
		w.mu.Unlock()
		w.trace.add(w.now(), fmt.Sprintf("client %s stalls: replies %v late", c, d))
		for _, m := range w.nodes {
			m.SetClientDelay(c, d)
		}
		return w.after(dur, func() {
			for _, m := range w.nodes {
				m.SetClientDelay(c, 0)
			}
		})
	case fSave:
		n.Save()
	case fRate:
		rate := 1 + (w.rng.Float64()-0.5)*0.009
		if w.opt.OutOfModel {
			n.Jump(time.Duration(w.rng.Intn(2000)) * time.Millisecond)
		} else {
			n.SetRate(rate)
		}
	}
	return nil
}

// loseRecord deletes the leader record on as many nodes as may fail, from
// node i on, as a record round that reached only a quorum leaves it: the
// election key stays. A pause or a cut of one of the others then leaves
// the record on fewer than a quorum of the nodes that answer, while the
// leader's key is on a quorum.
func (w *world) loseRecord(i int) {
	for k := range len(w.nodes) - (len(w.nodes)/2 + 1) {
		j := (i + k) % len(w.nodes)
		_, _ = w.at(j, wire.LeaderKey(electionName)).Do("DEL", wire.LeaderKey(electionName))
	}
}

// startOutlived returns what starts n (node i, or a shard of it), killed
// at killed, with data it may have forgotten locks from: once every TTL
// used up to the start has run out since the kill (a lock extended while
// the node was down may have grown longer than the longest TTL at the
// kill).
func (w *world) startOutlived(i int, n *simnode.Node, data simnode.Data, killed time.Time, slack time.Duration) func() {
	return w.outlived(i, killed, slack, func() { w.startNode(i, n, data) })
}

// outlived returns what runs start, which starts node i, killed at killed,
// once every TTL used up to the start has run out since the kill.
func (w *world) outlived(i int, killed time.Time, slack time.Duration, start func()) func() {
	return func() {
		for {
			w.mu.Lock()
			longest := max(w.longestTTL, w.set.maxTTL)
			w.mu.Unlock()
			left := time.Until(killed.Add(longest + slack))
			if left <= 0 {
				break
			}
			w.markFaulty(i, left)
			time.Sleep(left)
		}
		start()
	}
}

// failover fails node i over to replica, a copy of its data taken now:
// the promotion comes up to 500ms later, so the replica misses the writes
// made meanwhile, as one that lagged that long does. With restart safety
// on nodes not declared durable, the promoted replica comes up at once
// and is in model as a restart from a snapshot is: its data continues
// another lineage, and restart safety waits out the maximum TTL from when
// a check first saw it. Otherwise (restart safety off, or durable nodes,
// which are declared to keep every write and count a node that carries a
// marker at once) the node is down until every lock it may have missed
// ran out, unless the run is out of model.
func (w *world) failover(i int, n *simnode.Node, replica *simnode.Replica, longest, dur time.Duration) func() {
	lag := time.Duration(w.rng.Intn(500)) * time.Millisecond
	if !w.restartInModel(simnode.Saved) && !w.opt.OutOfModel {
		n.Kill()
		w.markFaulty(i, longest+dur)
		promote := func() { w.promoteNode(i, n, replica) }
		return w.after(longest+dur, w.outlived(i, time.Now(), dur, promote))
	}
	w.markFaulty(i, lag)
	return w.after(lag, func() { w.promoteNode(i, n, replica) })
}

// promoteNode fails n (node i, or a shard of it) over to replica and marks
// node i faulty while restart safety may exclude it.
func (w *world) promoteNode(i int, n *simnode.Node, replica *simnode.Replica) {
	n.Promote(replica)
	w.newProcess(i, n)
	w.lostData(i)
	w.mu.Lock()
	longest := max(w.longestTTL, w.set.maxTTL)
	w.mu.Unlock()
	w.markFaulty(i, longest+time.Second)
	w.trace.add(w.now(), fmt.Sprintf("node %d failed over to a replica (up %v, %s)", i+1, simnode.PromotedUptime, n.Addr()))
}

// restartInModel reports whether a node may restart at once with data.
func (w *world) restartInModel(data simnode.Data) bool {
	switch data {
	case simnode.Kept:
		return true // every write was kept: nothing forgotten
	case simnode.Saved:
		// An older snapshot under a marker of its own run id: restart
		// safety waits it out unless the nodes are declared durable (they
		// are not, if they lose writes).
		return w.set.maxTTL > 0 && !w.set.durable
	}
	return w.set.maxTTL > 0
}

// startNode starts n (node i, or a shard of it) with data and marks node
// i faulty while restart safety may exclude it.
func (w *world) startNode(i int, n *simnode.Node, data simnode.Data) {
	n.Start(data)
	w.newProcess(i, n)
	if data != simnode.Kept {
		w.lostData(i)
	}
	w.mu.Lock()
	longest := max(w.longestTTL, w.set.maxTTL)
	w.mu.Unlock()
	w.markFaulty(i, longest+time.Second)
	w.trace.add(w.now(), fmt.Sprintf("node %d started (%v, %s)", i+1, data, n.Addr()))
}

func (w *world) lostData(i int) {
	w.mu.Lock()
	w.dataLost[i] = true
	w.losses[i] = append(w.losses[i], w.now())
	w.mu.Unlock()
}

// newProcess notes that n (node i, or a shard of it) runs a new process
// from now on (a start, a restart, a promoted replica).
func (w *world) newProcess(i int, n *simnode.Node) {
	w.mu.Lock()
	w.started[i] = append(w.started[i], w.now())
	if w.procStarts == nil {
		w.procStarts = map[*simnode.Node][]time.Duration{}
	}
	w.procStarts[n] = append(w.procStarts[n], w.now())
	w.mu.Unlock()
}

// markFaulty counts node i faulty for d (no other fault starts on it
// meanwhile, and it counts toward the faulty nodes' limit), and unhealthy
// for 2s more (markUnhealthy).
func (w *world) markFaulty(i int, d time.Duration) {
	w.mu.Lock()
	if until := time.Now().Add(d); until.After(w.faultyUntil[i]) {
		w.faultyUntil[i] = until
	}
	w.mu.Unlock()
	w.markUnhealthy(i, d)
}

// markUnhealthy counts node i unhealthy for d and 2s more, while the
// clients' connections to it may still be reconnecting: the checks of
// Leader's answers do not count on it meanwhile.
func (w *world) markUnhealthy(i int, d time.Duration) {
	w.mu.Lock()
	if until := time.Now().Add(d + 2*time.Second); until.After(w.healthyFrom[i]) {
		w.healthyFrom[i] = until
	}
	w.mu.Unlock()
}

func (w *world) count(i, kind int, dur time.Duration) {
	w.mu.Lock()
	w.faults++
	w.faultKinds[faultNames[kind]]++
	w.mu.Unlock()
	w.trace.add(w.now(), fmt.Sprintf("FAULT node %d %s (%v)", i+1, faultNames[kind], dur))
}

// after runs undo once d passed; the returned function waits for it.
func (w *world) after(d time.Duration, undo func()) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		undo()
	}()
	return func() { <-done }
}

// shardsOf returns the simulated nodes of node i: its shards, or itself.
func (w *world) shardsOf(i int) []*simnode.Node {
	if cl := w.clusters[i]; cl != nil {
		return cl.shards
	}
	return []*simnode.Node{w.nodes[i]}
}

// clusterNames are the names whose slots a slot move moves: those the
// workers lock (their helper keys share their slots).
var clusterNames = append(append([]string{semName, rwName, electionName}, mutexKeys...), longKeys...)

// moveSlot moves the slot of a name the workers lock, on cluster node i,
// to another shard, with its keys, as resharding does; nothing when node
// i is not a cluster or a shard it needs is down.
func (w *world) moveSlot(i int) func() {
	cl := w.clusters[i]
	if cl == nil {
		return nil
	}
	slot := keyslot.Slot(clusterNames[w.rng.Intn(len(clusterNames))])
	from, to := cl.serving(slot), w.rng.Intn(len(cl.shards))
	if from == to || !cl.shards[from].Up() || !cl.shards[to].Up() {
		return nil
	}
	w.count(i, fSlotMove, 0)
	_, keys := cl.move(slot, to)
	w.trace.add(w.now(), fmt.Sprintf("node %d: slot %d moved from %s to %s with %d keys", i+1, slot, cl.shards[from].Addr(), cl.shards[to].Addr(), keys))
	return nil
}
