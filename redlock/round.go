package redlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/pool"
)

// nodeFunc is node i's part in a round: it returns NodeOK, NodeRefused,
// or NodeFailed with the node's error.
type nodeFunc func(ctx context.Context, i int, p pool.Pool) (NodeStatus, error)

type outcome struct {
	i      int
	status NodeStatus
	err    error
}

// round is one quorum round: a command sent to every node at once.
type round struct {
	start   time.Time     // read before the first command was sent
	nodes   []NodeResult  // outcomes known when the round was decided
	ok      bool          // a quorum did what was asked
	cause   error         // the caller's context error, when it ended the round
	pending int           // nodes that had not replied at the decision
	late    chan outcome  // their replies, as they come
	settled chan struct{} // closed when every node call has returned
}

// waitSettled waits, when node i had not replied by the decision, until
// every node call of the round has returned. A command that follows up on
// the round (the release of an acquired lock) must not overtake the
// round's own command on that node: it would find nothing, and the late
// command would then land and stay.
// It reports whether it waited.
func (r *round) waitSettled(i int) bool {
	if r != nil && r.nodes[i].Status == NodePending {
		<-r.settled
		return true
	}
	return false
}

// run sends do to every node in parallel and returns as soon as the outcome
// is decided: a quorum did what was asked, or so many nodes refused or
// failed that no quorum is possible, or the node timeout passed, or ctx
// ended. When ctx has already ended, nothing is sent unless always is set
// (a release must go out whatever the caller's context says). Node calls
// never see ctx's cancellation: each one runs until it
// has a reply or the node timeout, so that a command already sent is never
// abandoned half-way. Replies after the decision arrive on r.late; the
// goroutines that wait for them are counted in c.bg, so Close waits for
// them.
func (c *Client) run(ctx context.Context, always bool, do nodeFunc) (*round, error) {
	n := len(c.pools)
	r := &round{nodes: make([]NodeResult, n), late: make(chan outcome, n), settled: make(chan struct{})}
	for i, p := range c.pools {
		r.nodes[i].Addr = p.Addr()
	}
	if err := ctx.Err(); err != nil && !always {
		r.cause = err
		r.start = c.cfg.clock.Now()
		return r, nil
	}
	if !c.begin(n) {
		return nil, ErrClosed
	}
	r.start = c.cfg.clock.Now()
	nodeCtx, cancel := c.nodeContext(ctx)
	var left atomic.Int32
	left.Store(int32(n))
	for i, p := range c.pools {
		go func() {
			defer c.bg.Done()
			status, err := do(nodeCtx, i, p)
			r.late <- outcome{i: i, status: status, err: err}
			if left.Add(-1) == 0 {
				cancel()
				close(r.settled)
			}
		}()
	}

	timer := c.cfg.clock.NewTimer(c.cfg.nodeTimeout)
	defer timer.Stop()
	okCount, badCount := 0, 0
	r.pending = n
	for okCount < c.quorum && badCount <= n-c.quorum && r.pending > 0 {
		select {
		case o := <-r.late:
			r.pending--
			r.nodes[o.i].Status, r.nodes[o.i].Err = o.status, o.err
			if o.status == NodeOK {
				okCount++
			} else {
				badCount++
			}
		case <-timer.C():
			r.drain()
			return r, nil
		case <-ctx.Done():
			r.cause = ctx.Err()
			return r, nil
		}
	}
	r.ok = okCount >= c.quorum
	return r, nil
}

// drain records the replies that are already in when the node timeout
// fires, so that the error does not call a node that answered silent.
func (r *round) drain() {
	for r.pending > 0 {
		select {
		case o := <-r.late:
			r.pending--
			r.nodes[o.i].Status, r.nodes[o.i].Err = o.status, o.err
		default:
			return
		}
	}
}

// afterLate calls f for each reply that arrives after the decision, in a
// goroutine that Close waits for.
func (c *Client) afterLate(r *round, f func(outcome)) {
	if r.pending == 0 {
		return
	}
	// A node goroutine that has not sent its outcome yet is still counted
	// in c.bg, so the count is above zero here and Close cannot have
	// finished waiting.
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for range r.pending {
			f(<-r.late)
		}
	}()
}

func (c *Client) quorumError(op, key string, r *round, sentinel error, validity time.Duration) *QuorumError {
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

// nodeContext bounds a follow-up command (a release after a failed
// acquisition) by the node timeout, keeping ctx's values but not its
// cancellation.
func (c *Client) nodeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.nodeTimeout)
}
