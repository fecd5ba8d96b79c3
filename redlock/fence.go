package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/pool"
)

// WithFencing makes TryLock and Lock mint a fencing token with the lock
// (Lock.Fence): one more than the largest fence counter of the key among
// the nodes that granted it, written back to a quorum before the call
// returns (a second round, rarely more). While the nodes keep their
// counters, a fenced lock taken after another got a strictly larger
// fence. Every holder of a key that writes to the fenced resource must use
// it. When no write-back reaches a quorum the lock is released and the
// call fails with ErrNotAcquired (Op "fence"). See docs/fencing.md.
func WithFencing() LockOption {
	return lockOption(func(c *lockConfig) { c.fencing = true })
}

// Fence returns the lock's fencing token: 0 unless it was acquired with
// WithFencing (a restored lock has none); for a multi-key lock, its first
// key's (Fences has them all). Extend keeps it. Pass it with
// every write to the resource the lock protects, and have the resource
// refuse a write whose fence is lower than the highest it has accepted.
func (l *Lock) Fence() uint64 { return l.fence }

// fenceReply is what a node that granted a fenced acquisition returned:
// its fence counter for the key and its epoch.
type fenceReply struct {
	counter uint64
	epoch   string
}

// parseFenceReply reads {1, counter, epoch}.
func parseFenceReply(reply any) (fenceReply, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 3 {
		return fenceReply{}, fmt.Errorf("unexpected reply %v", reply)
	}
	cs, ok1 := replyString(vs[1])
	es, ok2 := replyString(vs[2])
	if !ok1 || !ok2 {
		return fenceReply{}, fmt.Errorf("unexpected reply %v", reply)
	}
	n, err := strconv.ParseUint(cs, 10, 64)
	if err != nil {
		return fenceReply{}, fmt.Errorf("fence counter %q: %w", cs, err)
	}
	return fenceReply{counter: n, epoch: es}, nil
}

// fenceOf returns max(counter)+1 over the nodes that granted the lock by
// the round's decision, and checks their epochs. Equal counters need no
// tie-break: the fence is a number, not a (number, node) pair, and only
// the largest counter matters. This is only the first proposal: some of
// the counters may have been read before an earlier lock's write-back,
// and the write-back's refusals (storeFence) are what make the fence
// larger than that lock's. Nodes that granted after the decision are not
// read.
func (c *Client) fenceOf(key string, r *round) uint64 {
	var top uint64
	for i, n := range r.nodes {
		if n.Status != NodeOK {
			continue
		}
		fr, err := parseFenceReply(r.replies[i])
		if err != nil {
			continue // acquireStatus made such a node NodeFailed
		}
		top = max(top, fr.counter)
		c.seeEpoch(i, keyslot.Slot(key), fr.epoch)
	}
	return top + 1
}

// seeEpoch remembers node i's epoch for a hash slot and reports a change.
func (c *Client) seeEpoch(i int, slot uint16, epoch string) {
	c.epochMu.Lock()
	if c.epochs == nil {
		c.epochs = make([]map[uint16]string, len(c.pools))
	}
	if c.epochs[i] == nil {
		c.epochs[i] = map[uint16]string{}
	}
	old := c.epochs[i][slot]
	c.epochs[i][slot] = epoch
	c.epochMu.Unlock()
	if old != "" && old != epoch {
		c.nodeReset(i, errEpochChanged)
	}
}

// nodeReset counts that node i lost its data (its fence counters among
// them), and logs why (WithLogger).
func (c *Client) nodeReset(i int, why error) {
	c.epochMu.Lock()
	c.resets++
	c.epochMu.Unlock()
	c.warnNode(c.pools[i].Addr(), "node lost its data", why)
	if c.observing() {
		c.emit(Event{Kind: EventNodeReset, Node: c.pools[i].Addr(), Err: why})
	}
}

// Why nodeReset is called: the signs of a node that lost its data.
var (
	errEpochChanged = errors.New("its fence epoch changed: fences stay monotonic only while fewer than a quorum of nodes lose their last counter (docs/fencing.md)")
	errRunIDChanged = errors.New("it came back under a new run id, from a snapshot or an append-only file (docs/safety.md)")
)

// fenceRounds bounds the write-back rounds of one fenced acquisition: a
// node refuses a fence that is not above its counter, and the next round
// proposes more than every refusing counter, so a second round is enough
// unless write-backs of other acquisitions keep landing meanwhile.
const fenceRounds = 3

// storeFence writes back the fence of the fenced acquisition round r (of
// key, with token, valid until until) and returns it once a quorum of
// nodes took it: each of them held a lower counter, which makes the fence
// larger than any fence an earlier acquisition returned (docs/fencing.md).
// A round that falls short of a quorum with refusals among its replies is
// followed by one that proposes one more than the largest refusing
// counter, up to fenceRounds rounds and while more than minValidity is
// left. When that fails, it releases the nodes r took and returns the
// error: the last round's *QuorumError with Op "fence", matching
// ErrNotAcquired.
func (c *Client) storeFence(ctx context.Context, key, token string, r *round, until time.Time, ttl, minValidity time.Duration) (uint64, error) {
	fence, err := c.writeBackFence(ctx, key, c.fenceOf(key, r), until, ttl, minValidity)
	if err != nil {
		c.releaseFailed(ctx, key, token, r, ttl)
	}
	return fence, err
}

// writeBackFence writes back key's fence, proposing a larger one after
// refusals (see storeFence), and returns the fence a quorum took, or the
// last round's error. It releases nothing.
func (c *Client) writeBackFence(ctx context.Context, key string, fence uint64, until time.Time, ttl, minValidity time.Duration) (uint64, error) {
	for n := 1; ; n++ {
		w, err := c.run(ctx, false, op{script: fenceStoreScript, args: fenceStoreArgs(key, fence),
			status: fenceStatus, keep: true})
		if err == nil {
			c.observeRound(opFence, key, w, until.Sub(c.cfg.clock.Now()), c.drift(ttl))
		}
		if err == nil && w.ok {
			return fence, nil
		}
		if err == nil {
			err = c.quorumError(opFence, key, w, ErrNotAcquired, 0)
			top, refused := refusedCounter(w)
			if refused && n < fenceRounds && until.Sub(c.cfg.clock.Now()) > minValidity {
				fence = top + 1 // a refusing counter is the fence or more
				continue
			}
		}
		return 0, err
	}
}

// fenceStatus reads the write-back's reply: 1 when the node took the
// fence, {0, counter} when it refused it.
func fenceStatus(addr string, reply any, err error) (NodeStatus, error) {
	if err != nil {
		return NodeFailed, err
	}
	if n, ok := reply.(int64); ok && n == 1 {
		return NodeOK, nil
	}
	if _, ok := refusal(reply); ok {
		return NodeRefused, nil
	}
	return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf("unexpected reply %v", reply)}
}

// refusal reads a write-back's refusal {0, counter}.
func refusal(reply any) (uint64, bool) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 2 {
		return 0, false
	}
	if code, ok := vs[0].(int64); !ok || code != 0 {
		return 0, false
	}
	s, ok := replyString(vs[1])
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// refusedCounter returns the largest counter among the nodes that refused
// write-back round w, and whether any did.
func refusedCounter(w *round) (top uint64, refused bool) {
	for i, n := range w.nodes {
		if n.Status != NodeRefused {
			continue
		}
		if v, ok := refusal(w.replies[i]); ok {
			top, refused = max(top, v), true
		}
	}
	return top, refused
}

// fenceState is the Client's view of the nodes' epochs.
type fenceState struct {
	epochMu sync.Mutex
	epochs  []map[uint16]string // per node and hash slot, the last epoch seen (at most 16384 a node)
	resets  uint64              // epoch changes seen (nodeReset)
}
