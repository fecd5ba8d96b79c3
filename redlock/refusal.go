package redlock

import (
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/redlock/pool"
)

// Codes of the acquisition script's reply (acquire.lua).
const (
	codeHeld     = 0 // the key is held by another owner
	codeAcquired = 1
	codeReserved = 2 // the key is free but kept for another waiter
)

// acqReply is one node's answer to the acquisition script.
type acqReply struct {
	code int64
	pttl int64 // refused: ms left on the key or the reservation; -1 none
}

// parseAcquire reads 1, {1, counter, epoch}, or {code, pttl}.
func parseAcquire(reply any) (acqReply, bool) {
	if n, ok := reply.(int64); ok {
		return acqReply{code: n}, n == codeAcquired
	}
	vs, ok := reply.([]any)
	if !ok || len(vs) == 0 {
		return acqReply{}, false
	}
	code, ok := vs[0].(int64)
	switch {
	case !ok:
		return acqReply{}, false
	case code == codeAcquired:
		return acqReply{code: code}, len(vs) == 3
	case code != codeHeld && code != codeReserved || len(vs) != 2:
		return acqReply{}, false
	}
	pttl, ok := vs[1].(int64)
	return acqReply{code: code, pttl: pttl}, ok
}

// acquireStatus reads a node's answer to the acquisition script.
func acquireStatus(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		return NodeFailed, err
	}
	a, ok := parseAcquire(reply)
	switch {
	case !ok:
		return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf("unexpected reply %v", reply)}
	case a.code == codeAcquired:
		if _, fenced := reply.([]any); fenced {
			if _, err := parseFenceReply(reply); err != nil {
				return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: err}
			}
		}
		return NodeOK, nil
	}
	return NodeRefused, nil
}

// replyString reads a bulk or status reply as a string.
func replyString(v any) (string, bool) {
	switch v := v.(type) {
	case []byte:
		return string(v), true
	case string:
		return v, true
	}
	return "", false
}

// readRefusals fills in, from the replies of acquisition round r, what
// each refusing node said of the key (NodeResult.TTL, Reserved) and the
// error's RetryAfter.
func (c *Client) readRefusals(e *QuorumError, r *round) {
	for i := range e.Nodes {
		n := &e.Nodes[i]
		if n.Status != NodeRefused {
			continue
		}
		n.TTL = -1 // a plain SET NX does not say
		if r.replies == nil {
			continue
		}
		if a, ok := parseAcquire(r.replies[i]); ok {
			n.Reserved = a.code == codeReserved
			if a.pttl >= 0 {
				n.TTL = time.Duration(a.pttl) * time.Millisecond
			}
		}
	}
	e.RetryAfter, e.retryKnown = retryAfter(e.Nodes, c.quorum)
}

// retryAfter is how long until enough of the refusing nodes' keys (or
// reservations) run out that a quorum could grant, counting the nodes that
// failed or had no reply in time as if they could grant at once: the
// earliest time a round can succeed without a release. ok is false when it
// cannot be told (a refusing node did not say, or the key has no TTL), or
// when the refusals alone do not rule a quorum out.
func retryAfter(nodes []NodeResult, quorum int) (d time.Duration, ok bool) {
	var ttls []time.Duration
	for _, n := range nodes {
		if n.Status == NodeRefused {
			if n.TTL < 0 {
				return 0, false
			}
			ttls = append(ttls, n.TTL)
		}
	}
	need := quorum - (len(nodes) - len(ttls)) // refusing nodes that must run out
	if need <= 0 {
		return 0, false
	}
	slices.Sort(ttls)
	return ttls[need-1], true
}

// windowMs is the reservation window in whole milliseconds (rounded up).
func (c *Client) windowMs() int64 {
	return int64((c.cfg.window + time.Millisecond - 1) / time.Millisecond)
}

// refresh is the longest a waiter sleeps between rounds, even with
// announcements: each round renews its queue entries, so an entry left by
// a waiter that vanished runs out soon.
func (c *Client) refresh() time.Duration {
	return max(time.Second, 5*c.cfg.nodeTimeout)
}

// entrySlack is how long a waiter's queue entry outlives the time it was
// told to come back: it comes back by then, unless it is gone. A waiter
// that left without saying so is dropped from the queues that much later.
func (c *Client) entrySlack() time.Duration {
	return c.cfg.nodeTimeout + 100*time.Millisecond
}
