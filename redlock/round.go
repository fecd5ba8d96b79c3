package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// request is what a round sends to every node, and how a reply is read.
type request struct {
	cmd    string       // a command, or
	script *pool.Script // a script
	args   []any
	// status reads a node's reply: NodeOK, NodeRefused, or NodeFailed
	// with the node's error.
	status func(addr string, reply any, err error) (NodeStatus, error)
	// after are the rounds the command must not overtake (the lock's
	// acquisition): on a node that one of them has not settled on, the
	// command waits until they have.
	after pending
	// keep makes the round record each node's raw reply (in replies) as
	// of its decision; the fenced acquisition reads the counters there.
	keep bool
	// gate makes a node's NodeOK count only while restart safety counts
	// the node (restart.go); otherwise the node is NodeFailed with why.
	gate bool
	// always sends the command even when the caller's context has ended:
	// a release must go out whatever the caller's context says.
	always bool
	// all makes the round wait for every node's reply (or the node
	// timeout), not only for its outcome: a release returns once every
	// node that answered in time has released (done when returned).
	all bool
	// choice, when set, makes the round a choice (among a semaphore's
	// slots): a reply counts toward the quorum of the choice it took. A
	// choice round keeps its replies (keep).
	choice *choice
	// tx, when set, is a transaction sent to every node (all are
	// txStarters) instead of a command: a waiting call's first round,
	// which queues it (wire.QueueTx); its reply is read as the
	// acquisition script's (txReply).
	tx *queueTx
}

// outcome is one node's reply to a round.
type outcome struct {
	i      int
	status NodeStatus
	err    error
	reply  any           // the raw reply, only when the request keeps replies (a choice round does)
	after  time.Duration // when it arrived, from the round's start; with an Observer only
}

// inlineNodes is how many nodes a round keeps inside its own allocation;
// more take slices of their own.
const inlineNodes = 7

// round is one quorum round: a command sent to every node at once.
type round struct {
	c        *Client
	req      request
	start    time.Time    // read before the first command was sent
	nodes    []NodeResult // outcomes known when the round was decided
	replies  []any        // with req.keep: the raw replies known at the decision
	calls    []nodeCall   // one receiver per node
	ok       bool         // a quorum did what was asked
	cause    error        // the caller's context error, when it ended the round
	pending  int          // nodes that had not replied at the decision
	okCount  int          // replies read before the decision that did what was asked (on a choice round: the most that took one choice)
	tally    *tally       // a choice round's count; nil on any other
	badCount int          // replies read before the decision that refused or failed
	sent     bool         // the command went out (not when ctx had ended before)
	late     chan int     // the node of every reply lands here; the decided round leaves the late ones
	left     atomic.Int32 // nodes yet to reply
	ctx      context.Context
	cancel   context.CancelFunc // ends ctx once every node has replied

	smu     sync.Mutex
	settled chan struct{} // made by await; closed when every node has replied

	// lmu orders the late replies of a release round (req.always) with oweLate: a
	// reply filed before it lands on late, one filed after is looked at
	// at once (lateCtx and lateBound are the release's, for what it owes).
	lmu       sync.Mutex
	lateOwe   bool
	lateCtx   context.Context
	lateBound time.Duration

	nodeBuf [inlineNodes]NodeResult
	callBuf [inlineNodes]nodeCall
}

// nodeCall receives node i's reply of a round.
type nodeCall struct {
	r       *round
	i       int
	wrapped bool    // the grant was asked with the identity of the dataset that makes it (wire.Sharded)
	out     outcome // filed before i is sent on the round's late channel
	// graceUntil, when not 0, is how long after the round's start the
	// round waits for the node: its first connection was still to be
	// opened when the round was sent (unopened), and was being opened when
	// the node timeout passed or opened since (graceLeft).
	graceUntil atomic.Int64
	unopened   atomic.Bool // set as the command is sent (send may run beside decide)
	opened     bool        // graceLeft saw the connection opened (decide's goroutine only)
}

// Receive implements async.Receiver: it files the reply and, with the last
// one, marks the round settled.
func (nc *nodeCall) Receive(reply any, err error) {
	r := nc.r
	if r.req.tx != nil {
		reply, err = r.txReply(nc.i, reply, err)
	}
	var shard string
	if nc.wrapped && err == nil {
		if shard, reply, err = wire.ShardReply(reply); err != nil {
			err = &pool.NodeError{Addr: r.nodes[nc.i].Addr, Op: "EVALSHA", Err: err}
		}
	}
	if err != nil {
		if !replied(err) {
			r.c.suspect(nc.i) // the pool may reconnect (restart.go)
		} else if isReadOnly(err) {
			r.c.roleChanged(nc.i)
		}
		err = explainDenied(err)
	}
	status, err := r.req.status(r.nodes[nc.i].Addr, reply, err)
	if status == NodeOK && r.req.gate {
		nc.gate(reply, shard)
		return
	}
	nc.file(reply, status, err)
}

// gate files node i's grant (reply, made by the shard whose identity is
// shard on a cluster node) once restart safety says whether it counts:
// at once, or, when a check under way (the first acquisition's goes out
// beside it) may settle it, once that check says so, if it does before
// the round's node timeout (restart.go, shards.go).
func (nc *nodeCall) gate(reply any, shard string) {
	r := nc.r
	gen := r.c.generation(nc.i) // read with the reply: what a check must have seen
	proof := ""
	if nc.wrapped {
		proof = shard // the identity of the dataset that granted
	}
	wait, err := r.c.countProved(nc.i, gen, proof, true)
	swait := false
	if !wait && err == nil && r.c.clustered(nc.i) {
		swait, err = r.c.shardCounts(nc.i, shard, nc.wrapped, r.slotKey(), true)
	}
	if !wait && !swait {
		if err != nil {
			nc.file(reply, NodeFailed, err)
		} else {
			nc.file(reply, NodeOK, nil)
		}
		return
	}
	deadline := r.start.Add(r.c.cfg.nodeTimeout)
	if nc.graceUntil.Load() != 0 {
		// The round waited for the node's connection: its grant gets as
		// long from now as an answer would (answerGrace), and the round
		// waits as long.
		now := r.c.cfg.clock.Now()
		deadline = now.Add(r.answerGrace(now.Sub(r.start)))
		nc.graceUntil.Store(int64(deadline.Sub(r.start)))
	}
	go func() {
		var err error
		if wait {
			err = r.c.awaitCheck(nc.i, gen, proof, deadline)
		}
		if err == nil {
			err = r.c.awaitShard(nc.i, shard, nc.wrapped, r.slotKey(), deadline)
		}
		if err != nil {
			nc.file(reply, NodeFailed, err)
		} else {
			nc.file(reply, NodeOK, nil)
		}
	}()
}

// file hands node i's outcome to the round and, with the last one, marks
// the round settled.
func (nc *nodeCall) file(reply any, status NodeStatus, err error) {
	r := nc.r
	nc.out = outcome{i: nc.i, status: status, err: err}
	if r.req.keep {
		nc.out.reply = reply
	}
	if r.c.observing() {
		nc.out.after = r.c.cfg.clock.Now().Sub(r.start)
	}
	if !r.req.always { // only a release round (Unlock) owes late: no lock on an acquisition's replies
		r.late <- nc.i
		r.replied()
		r.c.bg.replied()
		return
	}
	r.lmu.Lock()
	owe := r.lateOwe
	if !owe {
		r.late <- nc.i
	}
	r.lmu.Unlock()
	if owe {
		r.c.oweUnanswered(r, nc.out, true) // still counted in c.bg: it may start background work
	}
	r.replied()
	r.c.bg.replied()
}

// oweLate makes the replies of the decided release round r that come
// after its decision, those already in included, owe the release when
// they failed without an answer (Client.oweUnanswered), for at most
// bound. It takes the place of next, with no goroutine of its own.
func (r *round) oweLate(ctx context.Context, bound time.Duration) {
	var buf [inlineNodes]outcome
	in := buf[:0]
	r.lmu.Lock()
	r.lateOwe, r.lateCtx, r.lateBound = true, ctx, bound
	for ; r.pending > 0; r.pending-- {
		select {
		case i := <-r.late:
			in = append(in, r.calls[i].out)
			continue
		default:
		}
		break
	}
	r.lmu.Unlock()
	for _, o := range in {
		r.c.oweUnanswered(r, o, false)
	}
}

// replied counts a reply; with the last one the round has settled.
func (r *round) replied() {
	if r.left.Add(-1) != 0 {
		return
	}
	if r.cancel != nil {
		r.cancel()
	}
	r.smu.Lock()
	if r.settled != nil {
		close(r.settled)
	}
	r.smu.Unlock()
}

// next returns the outcome of the next reply, waiting for it.
func (r *round) next() outcome { return r.calls[<-r.late].out }

// unsettled reports whether node i had not answered r when it was decided
// and r has not settled since. A command that follows up on the round (the
// release of an acquired lock) must not overtake the round's own command
// on that node: it would find nothing, and the late command would then
// land and stay. It cannot when r sent a plain command (SET NX) or a
// transaction to a async.Starter, which keeps the order of the commands
// started on one key:
// the follow-up goes right behind it, without waiting. (A script may be
// sent again after NOSCRIPT, behind later commands: its round is waited
// for.)
func (r *round) unsettled(i int) bool {
	return r != nil && r.sent && r.nodes[i].Status == NodePending && !r.ordered(i) && !r.settledAll()
}

// ordered reports whether no later command on r's key can overtake r's
// command on node i (see unsettled).
func (r *round) ordered(i int) bool {
	return r.c.starters[i] != nil && r.req.script == nil
}

// ignoreReply is the receiver of a command whose reply nobody needs.
type ignoreReply struct{}

// Receive implements async.Receiver.
func (ignoreReply) Receive(any, error) {}

// keyToken returns the key and token a plain round (SET NX) sent, boxed:
// its release reuses them. nil for other rounds.
func (r *round) keyToken() []any {
	if r.req.cmd != "SET" {
		return nil
	}
	return r.req.args[:2:2]
}

// settledAll reports whether every node has answered r (or it was not
// sent).
func (r *round) settledAll() bool { return !r.sent || r.left.Load() == 0 }

// await waits until every node has answered r, when it was sent: each
// node call is bounded by the node timeout.
func (r *round) await() {
	if r == nil || !r.sent {
		return
	}
	r.smu.Lock()
	if r.left.Load() == 0 {
		r.smu.Unlock()
		return
	}
	if r.settled == nil {
		r.settled = make(chan struct{})
	}
	ch := r.settled
	r.smu.Unlock()
	<-ch
}

// run sends o to every node at once and returns as soon as the outcome is
// decided: a quorum did what was asked, or so many nodes refused or failed
// that no quorum is possible, or the node timeout passed, or ctx ended.
// When ctx has already ended, nothing is sent unless req.always is set.
//
// Node calls never see ctx's cancellation: each one runs until it has a
// reply or times out, so that a command already sent is never abandoned
// half-way. Pools that implement async.Starter take the command without a
// goroutine; others get one goroutine per call, bounded by the node
// timeout. Replies after the decision arrive on r.late; every call is
// counted in c.bg, so Close waits for them.
func (c *Client) run(ctx context.Context, req request) (*round, error) {
	r := c.newRound(req)
	if err := ctx.Err(); err != nil && !req.always {
		r.cause, r.start = err, c.cfg.clock.Now()
		return r, nil
	}
	if !c.bg.expect(len(c.pools)) {
		return nil, ErrClosed
	}
	r.sendAll(ctx)
	r.decide(ctx)
	if c.cfg.logger != nil {
		c.warnFailures(r)
	}
	return r, nil
}

// newRound returns a round of req, not sent yet.
func (c *Client) newRound(req request) *round {
	n := len(c.pools)
	r := &round{c: c, req: req, late: make(chan int, n)}
	if n <= inlineNodes {
		r.nodes, r.calls = r.nodeBuf[:n:n], r.callBuf[:n:n]
	} else {
		r.nodes, r.calls = make([]NodeResult, n), make([]nodeCall, n)
	}
	if req.choice != nil {
		r.req.keep = true // the replies say what each node took
	}
	if r.req.keep {
		r.replies = make([]any, n)
	}
	if req.choice != nil {
		r.tally = newTally(req.choice.n, n)
	}
	for i, p := range c.pools {
		r.nodes[i].Addr = p.Addr()
		r.calls[i] = nodeCall{r: r, i: i}
	}
	return r
}

// sendAll sends the round's command to every node, each counted in the
// Client's background work until its reply: a command that follows
// rounds not settled on its node waits for them in a goroutine of its own.
func (r *round) sendAll(ctx context.Context) {
	c := r.c
	r.left.Store(int32(len(c.pools)))
	r.sent = true
	if !c.allStart {
		r.ctx, r.cancel = c.nodeContext(ctx)
	}
	r.start = c.cfg.clock.Now()
	for i := range c.pools {
		if r.req.after.on(i) {
			go func() {
				r.req.after.await()
				// A node timeout from now: the round waits for it that
				// long (graceLeft).
				r.calls[i].graceUntil.Store(int64(c.cfg.clock.Since(r.start) + c.cfg.nodeTimeout))
				r.send(i, sendAfterWait)
			}()
			continue
		}
		r.send(i, sendNow)
	}
}

// decide reads replies until the outcome is decided (see run), the node
// timeout passes, or ctx ends; with req.all, a decided round then reads
// the rest (finish).
func (r *round) decide(ctx context.Context) {
	r.pending = len(r.nodes)
	if !r.read(ctx, r.c.cfg.nodeTimeout, false) {
		return
	}
	r.ok = r.okCount >= r.c.quorum
	if r.req.all {
		// Once a quorum released, the rest is read whatever ctx says:
		// bounded by the node timeout, and Unlock's nil means done.
		r.finish(context.Background())
	}
}

// finish reads the replies of the decided round r still to come, until
// every node has replied or the node timeout has passed since the
// round's start (longer for a node whose command waited for earlier
// rounds, or whose connection was being opened: graceLeft), or ctx ends
// (r.cause): a release, or a refused call that gives its round up,
// returns once it knows every node that answered in time. r.ok stays as
// decided.
func (r *round) finish(ctx context.Context) {
	if !r.sent || r.pending == 0 {
		return
	}
	r.read(ctx, max(r.c.cfg.nodeTimeout-r.c.cfg.clock.Since(r.start), 0), true)
}

// read reads replies until they decide the round (decided), or with all
// until every node replied, until wait has passed (then the replies that
// are in count, and the nodes still silent are marked timed out), or
// until ctx ends (r.cause is set). It reports whether ctx did not end it.
func (r *round) read(ctx context.Context, wait time.Duration, all bool) bool {
	timer := r.c.timer(wait)
	defer r.c.putTimer(timer)
	for r.pending > 0 && (all || !r.decided()) {
		select {
		case i := <-r.late:
			r.take(r.calls[i].out)
		case <-timer.C():
			if left := r.graceLeft(); left > 0 {
				timer.Reset(left)
				continue
			}
			// Replies that are in already count, even when the timer won
			// the race to be read: the validity is counted from the
			// round's start whenever they arrived. Nodes still silent
			// are marked as timed out.
			r.drain()
			r.timedOut()
			return true
		case <-ctx.Done():
			r.cause = ctx.Err()
			return false
		}
	}
	return true
}

// graceLeft is how much longer the round waits, once its node timeout
// passed, for nodes whose first connection had yet to be opened when the
// round was sent (async.Connecting): while it still has, then
// answerGrace from when graceLeft saw it opened, or from when its grant
// came and waits for a restart check (gate), or for a node whose command
// waited for earlier rounds and went out since (sendAll), a node timeout
// from then. 0: none. The pool's dial timeout
// bounds a dial, and maxDialWait the whole wait, should a dialler not
// stop. The lock's validity is still counted from the round's start.
func (r *round) graceLeft() time.Duration {
	now := r.c.cfg.clock.Since(r.start)
	limit := max(maxDialWait, 2*r.c.cfg.nodeTimeout) // a command sent after earlier rounds: within a node timeout, and its own
	if now >= limit {
		return 0
	}
	var until time.Duration
	for i := range r.nodes {
		if r.nodes[i].Status != NodePending {
			continue
		}
		nc := &r.calls[i]
		switch {
		case !nc.unopened.Load() || nc.opened:
		case r.c.connectors[i].Connecting():
			nc.graceUntil.Store(int64(now + r.c.cfg.nodeTimeout))
		default:
			// Opened since (or its dial failed, which answers the
			// round): time from now to answer, once.
			nc.opened = true
			nc.graceUntil.Store(max(nc.graceUntil.Load(), int64(now+r.answerGrace(now))))
		}
		until = max(until, time.Duration(nc.graceUntil.Load()))
	}
	return min(until, limit) - now
}

// answerGrace is how long a node whose first connection opened by now
// (time since the round's start) is given to answer: a node timeout, or
// as long as the round has waited, when that is longer. A connection
// that took long to open says the machine or the node is slow right now,
// and its first reply is as slow: the burst of new Clients that made the
// dial slow also makes the node's first answers slow.
func (r *round) answerGrace(now time.Duration) time.Duration {
	return max(r.c.cfg.nodeTimeout, now)
}

// maxDialWait bounds how long after its start a round waits for nodes
// whose first connection is being opened (graceLeft), or whose command
// waited for earlier rounds (those get two node timeouts when that is
// longer).
const maxDialWait = 5 * time.Second

// decided reports whether the replies read so far decide the round: a
// quorum did what was asked, so many refused or failed that no quorum is
// possible, or every node replied.
func (r *round) decided() bool {
	n, q := len(r.nodes), r.c.quorum
	if r.tally != nil && r.okCount+r.pending < q {
		return true // no choice can reach a quorum any more
	}
	return r.okCount >= q || r.badCount > n-q || r.pending == 0
}

// take files a reply read before the decision. On a choice round a reply
// counts toward the quorum of the choice it took; the round is lost once
// no choice can reach a quorum.
func (r *round) take(o outcome) {
	r.pending--
	r.record(o)
	switch {
	case o.status != NodeOK:
		r.badCount++
	case r.tally == nil:
		r.okCount++
	default:
		r.tallied(o)
	}
}

// timedOut marks the nodes that had not replied when the node timeout
// passed, as opposed to nodes that the round stopped waiting for because
// the outcome was decided without them.
func (r *round) timedOut() {
	for i := range r.nodes {
		if r.nodes[i].Status == NodePending {
			r.nodes[i].Err = noReply(r.c.pools[i])
		}
	}
}

// sendTime says when a round's command goes to a node: at once, or after
// the earlier rounds it must not overtake settled there (in a goroutine
// of its own, with a fresh node timeout).
type sendTime bool

const (
	sendNow       sendTime = false
	sendAfterWait sendTime = true
)

// send sends the round's command to node i. A command that waited for an
// earlier round gets a fresh node timeout.
func (r *round) send(i int, when sendTime) {
	waited := when == sendAfterWait
	p, rcv := r.c.pools[i], &r.calls[i]
	if cn := r.c.connectors[i]; cn != nil {
		rcv.unopened.Store(cn.Connecting()) // before the command may start the dial
	}
	if r.req.tx != nil {
		r.c.txStarters[i].StartTx(rcv, r.req.tx.key, r.req.tx.cmds)
		return
	}
	script := r.req.script
	if r.req.gate && r.c.wrapGrant(i) {
		if script == nil {
			script = wire.CommandScript(r.req.cmd) // the plain SET NX PX GET
		}
		script, rcv.wrapped = wire.Sharded(script), true
	}
	if s := r.c.starters[i]; s != nil {
		if script != nil {
			s.StartEval(rcv, script, r.req.args...)
		} else {
			s.Start(rcv, r.req.cmd, r.req.args...)
		}
		return
	}
	do := func() {
		ctx, cancel := r.ctx, context.CancelFunc(func() {})
		if waited {
			ctx, cancel = r.c.nodeContext(ctx)
		}
		defer cancel()
		var reply any
		var err error
		if script != nil {
			reply, err = p.Eval(ctx, script, r.req.args...)
		} else {
			reply, err = p.Do(ctx, r.req.cmd, r.req.args...)
		}
		rcv.Receive(reply, err)
	}
	if waited {
		do() // already in its own goroutine
		return
	}
	go do()
}

// record files outcome o of a reply read before the decision.
func (r *round) record(o outcome) {
	r.nodes[o.i].Status, r.nodes[o.i].Err = o.status, o.err
	r.nodes[o.i].Latency = o.after
	if r.replies != nil {
		r.replies[o.i] = o.reply
	}
}

// drain files the replies that are already in when the node timeout
// fires: they count as if read before it.
func (r *round) drain() {
	for r.pending > 0 {
		select {
		case i := <-r.late:
			r.take(r.calls[i].out)
		default:
			return
		}
	}
}

func (c *Client) quorumError(op Op, key string, r *round, sentinel error, validity time.Duration) *QuorumError {
	return &QuorumError{
		Op:       op,
		Key:      key,
		Quorum:   c.quorum,
		Nodes:    r.nodes,
		Validity: validity,
		Err:      sentinel,
		Cause:    r.cause,
	}
}

// timer returns a timer that fires after d, from the Client's spares: a
// round costs no new timer.
func (c *Client) timer(d time.Duration) clock.Timer {
	if t, ok := c.timers.Get().(clock.Timer); ok {
		t.Reset(d)
		return t
	}
	return c.cfg.clock.NewTimer(d)
}

// putTimer stops t and keeps it as a spare; nothing may read its channel
// after this.
func (c *Client) putTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C(): // fired and not read: drained for its next use
		default:
		}
	}
	c.timers.Put(t)
}

// nodeContext bounds a node call by the node timeout, keeping ctx's values
// but not its cancellation.
func (c *Client) nodeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.nodeTimeout)
}

// doneStatus reads the answer of the extension and release scripts: done
// (NodeOK), not ours (NodeRefused), or a release done but not announced:
// NodeOK with the node's refusal to PUBLISH as its error. Any other
// answer fails the node: it is no answer of those scripts.
func doneStatus(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		return NodeFailed, err
	}
	d, err := wire.ParseDone(reply)
	switch {
	case err != nil:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: err}
	case !d.OK:
		return NodeRefused, nil
	case d.Unannounced != "":
		return NodeOK, &pool.NodeError{Addr: addr, Op: "PUBLISH", Err: &notAnnounced{d.Unannounced}}
	}
	return NodeOK, nil
}

// notAnnounced is the error of a node that released a key but refused to
// announce it.
type notAnnounced struct{ msg string }

func (e *notAnnounced) Error() string {
	return "the release was not announced: the user lacks the PUBLISH permission for the channel (NOPERM); the node said: " + e.msg
}

// setStatus reads the answer to SET NX GET: nil when it took the key,
// the holder's value when the key exists (failed when that is a
// read-write lock's marker: a name is one kind of lock). A status reply
// OK (a Go string, where a holder's value is a bulk string) is not what
// Redis answers to SET with GET: such a node failed, with the reply
// named, rather than being taken for one held by another owner.
func setStatus(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		return NodeFailed, err
	}
	if reply == nil {
		return NodeOK, nil
	}
	if s, ok := reply.(string); ok && s == "OK" {
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "SET", Err: errSetOK}
	}
	switch v, ok := wire.String(reply); {
	case !ok:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "SET", Err: fmt.Errorf("unexpected reply %v to SET NX GET (Redis answers nil when it took the key, or the holder's value)", reply)}
	case v == wire.RWMarker:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "SET", Err: errHeldAsRW}
	}
	return NodeRefused, nil
}

// errSetOK is the error of a node that answered SET key token NX PX ttl
// GET with +OK.
var errSetOK = errors.New(`unexpected reply "OK" to SET NX GET: Redis answers nil when it took the key, or the holder's value; a node that answers OK ignored GET (not Redis 7.0 or later, or a proxy that rewrites replies): not counted`)

// slotKey returns a key of the round's request: every key a request
// names is in one hash slot.
func (r *round) slotKey() string {
	switch {
	case r.req.tx != nil:
		return r.req.tx.key
	case r.req.script == nil:
		if len(r.req.args) == 0 {
			return ""
		}
		key, _ := r.req.args[0].(string) // a command's first argument is its key
		return key
	}
	keys, _, err := r.req.script.Split(r.req.args)
	if err != nil || len(keys) == 0 {
		return ""
	}
	return keys[0]
}
