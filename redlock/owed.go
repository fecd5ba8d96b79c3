package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/pool"
)

// Owed releases. A node that may hold a token nobody will use (a failed
// acquisition's, or a lock's whose Unlock did not reach it) owes a
// release. One attempt bounded by the node timeout is not enough: a node
// stalled past it keeps the token for the whole TTL, and enough such
// nodes refuse every other client. So a release owed to a node is tried
// again, with a growing pause, until the node has answered it, and for a
// failed acquisition that the node never answered, until the node has
// answered two releases one after the other (the second sent after the
// first was answered: by then the node has read everything sent to it
// before, on any connection). The effort is bounded by the lock's TTL and
// stops when the Client closes, after the attempt under way (a node that
// grants after that still gets one release: debt.settle); a waiting Lock
// call's earlier rounds stop once a later round owes the node
// (superseder).

// Pauses between the attempts of an owed release.
const (
	owedPauseMin = 10 * time.Millisecond
	owedPauseMax = time.Second
)

// debt is the releases owed for one round.
type debt struct {
	c      *Client
	ctx    context.Context // the caller's values, without its cancellation
	script *pool.Script
	args   []any
	until  time.Time   // no attempt starts after this
	by     *superseder // the waiting call whose round this is, nil for none
	seq    int64       // the round's number among by's
	// answered, when not nil, gets a value as each node's first attempt
	// ends, answered or not: its caller waits for them (awaitFirst).
	// firsts is how many it waits for.
	answered chan struct{}
	firsts   atomic.Int32
}

// waited makes the caller of d able to wait for the first attempts
// (awaitFirst).
func (d *debt) waited() *debt {
	d.answered = make(chan struct{}, len(d.c.pools))
	return d
}

// firstEnded notes that a first attempt ended, for awaitFirst.
func (d *debt) firstEnded() {
	if d.answered != nil {
		d.answered <- struct{}{}
	}
}

// awaitFirst waits until the first attempts that the waited debt d
// counts (firsts: those its caller sent, not those of nodes that
// answered the round after its decision) have ended, or bound has
// passed: the caller returns once every node it owes answered, or was
// given a node timeout to (done when returned). A node that did not
// answer is still owed, in the background. Once only: what it waited
// for is consumed. It stops early when ctx ends.
func (d *debt) awaitFirst(ctx context.Context, bound time.Duration) {
	n := d.firsts.Swap(0)
	if n <= 0 {
		return
	}
	t := d.c.timer(bound)
	defer d.c.putTimer(t)
	for ; n > 0; n-- {
		select {
		case <-d.answered:
		case <-t.C():
			return
		case <-ctx.Done():
			return
		}
	}
}

// superseder is a waiting Lock call's record, per node, of its latest
// round that owes the node a release. A debt of an earlier round stops
// trying once a later one owes the node: while a node stalls, a call that
// waits keeps one release going to it, not one per round it made. What
// the earlier round may have left there is the call's own token: a later
// round of the call takes it over (its value names the earlier round:
// acquire.lua), or is refused as late, and the later round's release
// undoes both. Should the later round's command be lost on the way (a
// broken connection), the earlier token stays, but only until the call
// ends: its last release (waiter.end), or the Unlock of the lock it got,
// gives up every value that starts with its hand-off token, rounds'
// tokens included, on every node.
type superseder struct{ latest []atomic.Int64 }

func newSuperseder(nodes int) *superseder {
	return &superseder{latest: make([]atomic.Int64, nodes)}
}

// owes notes that the round numbered seq owes node i a release.
func (s *superseder) owes(i int, seq int64) {
	for {
		cur := s.latest[i].Load()
		if cur >= seq || s.latest[i].CompareAndSwap(cur, seq) {
			return
		}
	}
}

// note records, for a waiting call's round, that d owes node i.
func (d *debt) note(i int) {
	if d.by != nil {
		d.by.owes(i, d.seq)
	}
}

// superseded reports whether d's release to node i is undone by a later
// round's.
func (d *debt) superseded(i int) bool { return d.by != nil && d.by.latest[i].Load() > d.seq }

// oweRelease undoes a failed acquisition round r: script with args, its
// release, goes to every node that granted it, or failed in a way that
// may have let the command land, and to every node that grants it after
// the decision. It returns once the first attempts are sent: the
// releases go on in the background (Close waits for them), retried as the
// package comment above says, for at most ttl; on a closed Client, once
// the first attempts are answered. Nodes that refused are never released: they hold another
// owner's key.
//
// On a choice round that was won, keep is the choice won (-1 otherwise):
// a node that took it is part of the lock and owes nothing; the others
// give up what they took, and the release script keeps that choice.
//
// It returns the debt, nil when nothing is owed: the caller of a call
// that does not wait (g.final) waits for its first attempts
// (awaitFirst); for a won choice, a debt says that the lock is split
// (Lock.split).
func (c *Client) oweRelease(ctx context.Context, g *grab, r *round, keep int) *debt {
	script, args := g.kind.undo(c, g.key, g.token, g.plain(), keep)
	d := &debt{c: c, ctx: context.WithoutCancel(ctx), script: script, args: args, until: c.cfg.clock.Now().Add(g.ttl),
		by: g.owedBy, seq: g.seq}
	owed := d.owedBy(r, keep)
	if len(owed) == 0 && r.pending == 0 {
		return nil
	}
	if g.final {
		d.waited()
		d.firsts.Store(int32(len(owed)))
	}
	// The first attempts go out now, in the caller's goroutine: on a
	// pipelined node they are queued ahead of the caller's next round.
	first := make([]chan result, len(owed))
	for k, i := range owed {
		first[k] = d.start(i)
	}
	// Each node is settled in a goroutine of its own, started by this
	// one while it holds its count, so Close waits for them all.
	settle := func(i int, m settleMode, first chan result, counted bool) {
		c.bg.goHeld(func() { d.settle(i, m, first, counted) })
	}
	if c.bg.goTracked(func() {
		for k, i := range owed {
			settle(i, modeAfter(r.nodes[i].Status, r.nodes[i].Err), first[k], true)
		}
		for range r.pending {
			if o := r.next(); owes(o.status, o.err, r.choiceOf(o), keep) {
				d.note(o.i)
				settle(o.i, modeAfter(o.status, o.err), nil, false)
			}
		}
	}) {
		return d
	}
	// A closed Client: the first attempts are all there will be.
	for _, ch := range first {
		<-ch
	}
	for range r.pending {
		if o := r.next(); owes(o.status, o.err, r.choiceOf(o), keep) {
			<-d.start(o.i)
		}
	}
	return nil
}

// owedBy returns the nodes whose replies to r, read by its decision, owe
// d's release (owes), and notes each (note).
func (d *debt) owedBy(r *round, keep int) []int {
	var owed []int
	for i, n := range r.nodes {
		if owes(n.Status, n.Err, r.pick(i), keep) {
			owed = append(owed, i)
			d.note(i)
		}
	}
	return owed
}

// owes reports whether a node whose reply to an acquisition had status
// and err (NodePending: none by the decision) may hold what the round
// took, beyond the choice kept (-1 for none): it granted, or failed in a
// way that may have let the command land. A node that refused holds
// another owner's key.
func owes(status NodeStatus, err error, choice, keep int) bool {
	switch status {
	case NodeOK:
		return keep < 0 || choice != keep
	case NodeFailed:
		return maySent(err)
	}
	return false
}

// releaseUnanswered goes on releasing, in the background, the nodes of
// release round r (an Unlock) that did not answer it, for at most bound:
// their key would otherwise stay for its TTL. A release that may not have
// been sent (no connection) is owed as much as one that timed out: the
// node still holds the key. The nodes not awaited by the decision are
// looked at when they answer or fail (round.oweLate).
func (c *Client) releaseUnanswered(ctx context.Context, r *round, bound time.Duration) {
	r.oweLate(ctx, bound)
	for i, n := range r.nodes {
		c.oweUnanswered(r, outcome{i: i, status: n.Status, err: n.Err}, false)
	}
}

// oweUnanswered releases node o.i again in the background, as round r
// did, when o says it failed without an answer, for at most r.lateBound.
// held says whether the caller is counted background work (a late reply).
func (c *Client) oweUnanswered(r *round, o outcome, held bool) {
	if o.status != NodeFailed || answered(o.err) {
		return
	}
	d := &debt{c: c, ctx: context.WithoutCancel(r.lateCtx), script: r.req.script, args: r.req.args,
		until: c.cfg.clock.Now().Add(r.lateBound)}
	if held {
		c.bg.goHeld(func() { d.settle(o.i, settleRetry, nil, false) })
		return
	}
	c.bg.goTracked(func() { d.settle(o.i, settleRetry, nil, false) })
}

// oweAfter owes every node d (owe), but a node where one of the rounds
// after (nil for none) has not settled only once they have: sent before,
// the command could reach the node first (pools with several connections
// a node), and the late round then undo it, putting a call that left its
// queue back in it. The caller holds a ticket (Close waits for it). It
// returns how long, from now, a waited debt's caller waits (awaitFirst):
// a node timeout, two when a node waits for earlier rounds (each bounded
// by one).
func (d *debt) oweAfter(after *pending) time.Duration {
	if d.answered != nil {
		d.firsts.Store(int32(len(d.c.pools)))
	}
	bound := d.c.cfg.nodeTimeout
	for i := range d.c.pools {
		if after == nil || !after.on(i) {
			d.owe(i)
			continue
		}
		bound = 2 * d.c.cfg.nodeTimeout
		d.c.bg.goHeld(func() {
			after.await()
			d.owe(i)
		})
	}
	return bound
}

// owe sends the release to node i now, and when that attempt fails
// without the node's answer, settles the node in the background. The
// caller holds a ticket (Close waits for it). A pipelined node takes the
// first attempt without a goroutine.
func (d *debt) owe(i int) {
	c := d.c
	if s := c.starters[i]; s != nil {
		s.StartEval(owedAttempt{d: d, i: i, t: c.bg.claimHeld()}, d.script, d.args...)
		return
	}
	c.bg.goHeld(func() { d.settle(i, settleAnswered, nil, true) })
}

// owedAttempt is the first attempt of an owed release (debt.owe): a
// failure without the node's answer starts the retries.
type owedAttempt struct {
	d *debt
	i int
	t ticket // counts the attempt until its reply
}

// Receive implements async.Receiver.
func (o owedAttempt) Receive(_ any, err error) {
	if err != nil && !replied(err) && !errors.Is(err, ErrClosed) {
		o.d.c.bg.goHeld(func() { o.d.settle(o.i, settleRetry, nil, false) }) // o.t still counts
	}
	o.d.firstEnded()
	o.t.done()
}

// start sends one release attempt to node i; its result arrives on the
// channel.
func (d *debt) start(i int) chan result {
	ch := make(chan result, 1)
	p := d.c.pools[i]
	if s := d.c.starters[i]; s != nil {
		s.StartEval(resultTo(ch), d.script, d.args...)
		return ch
	}
	go func() {
		ctx, cancel := d.c.nodeContext(d.ctx)
		defer cancel()
		reply, err := p.Eval(ctx, d.script, d.args...)
		ch <- result{reply, err}
	}()
	return ch
}

// settleMode is how settle releases a node: what the node did with the
// command the release undoes, and whether the release is a retry.
type settleMode uint8

const (
	// settleAnswered: the node answered the command (a grant, counted by
	// restart safety or not, holds the key for its TTL), and nothing was
	// sent to it yet. Settled once it answers a release; the first
	// attempt goes out even while the Client closes.
	settleAnswered settleMode = iota
	// settleRetry: as settleAnswered, but an attempt has failed without
	// an answer already: every attempt is a retry, and none starts once
	// the Client is closing (Close does not wait another I/O timeout).
	settleRetry
	// settleUnanswered: the command failed without the node's answer: it
	// may hold nothing, or the command may land yet. Settled once the
	// node has answered two releases in a row, or said that one gave the
	// token up; no attempt starts once the Client is closing.
	settleUnanswered
)

// modeAfter is how a node whose reply to the command had status and err
// is settled.
func modeAfter(status NodeStatus, err error) settleMode {
	if status == NodeOK || answered(err) {
		return settleAnswered
	}
	return settleUnanswered
}

// settle releases node i until the node has answered as the package
// comment above and m say. first, when not nil, carries the result of an
// attempt already sent. No attempt starts once a later round of the same
// waiting call owes the node (superseded). counted says that the debt's
// awaitFirst counts this node's first attempt: its end is noted.
func (d *debt) settle(i int, m settleMode, first chan result, counted bool) {
	clk := d.c.cfg.clock
	acqAnswered, optional := m != settleUnanswered, m != settleAnswered
	firstEnds := counted
	pause, answers := owedPauseMin, 0
	for {
		if first == nil {
			if optional && d.c.bg.isClosing() || d.superseded(i) {
				if firstEnds {
					d.firstEnded()
				}
				return
			}
			first = d.start(i)
		}
		res := <-first
		if firstEnds {
			d.firstEnded()
			firstEnds = false
		}
		optional = true
		first = nil
		if res.err == nil || replied(res.err) {
			if n, ok := res.reply.(int64); acqAnswered || res.err != nil || !ok || n == 1 {
				return // given up, or not ours: nothing can land after this
			}
			if answers++; answers >= 2 {
				return
			}
			continue // at once: this one went out after the node answered
		}
		if errors.Is(res.err, ErrClosed) || !clk.Now().Before(d.until) {
			return
		}
		t := clk.NewTimer(pause)
		select {
		case <-t.C():
		case <-d.c.bg.closing():
			t.Stop()
			return
		}
		pause = min(2*pause, owedPauseMax)
	}
}

// result is one reply of a node, or its error.
type result struct {
	reply any
	err   error
}

// resultTo is an async.Receiver that hands the reply to a channel with room
// for it.
type resultTo chan result

func (r resultTo) Receive(reply any, err error) { r <- result{reply, err} }
