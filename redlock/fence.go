package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/wire"
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

// mintFences returns the fence of every key of g's fenced round r: the
// first key's, and for a multi-key lock every key's in the order of its
// keys (nil for one key). It releases nothing: a caller whose fence
// failed undoes r.
func (c *Client) mintFences(ctx context.Context, g *grab, r *round, until time.Time) (first uint64, all []uint64, err error) {
	ks := g.kind.keys()
	if ks == nil {
		first, err = c.mintFence(ctx, g, r, until, g.key, 1, 0)
		return first, nil, err
	}
	all = make([]uint64, len(ks))
	for k, key := range ks {
		if all[k], err = c.mintFence(ctx, g, r, until, key, len(ks), k); err != nil {
			return 0, nil, err
		}
	}
	return all[0], all, nil
}

// mintFence returns the fence of key, the k-th of g's n keys, of its
// fenced round r: one more
// than the largest counter of the key among the nodes that granted r by
// its decision, written back to a quorum (writeBackFence), and it checks
// their epochs. Equal counters need no tie-break: the fence is a number,
// not a (number, node) pair, and only the largest counter matters. That
// is only the first proposal: some of the counters may have been read
// before an earlier lock's write-back, and the write-back's refusals are
// what make the fence larger than that lock's. Nodes that granted after
// the decision are not read.
func (c *Client) mintFence(ctx context.Context, g *grab, r *round, until time.Time, key string, n, k int) (uint64, error) {
	var top uint64
	won := r.won()
	for i, node := range r.nodes {
		if node.Status != NodeOK || r.pick(i) != won {
			continue // a choice round's nodes that took another choice hold no part of the lock
		}
		f, err := g.kind.fenceAt(r.replies[i], n, k)
		if err != nil {
			continue // grantStatus made such a node NodeFailed
		}
		top = max(top, f.Counter)
		c.seeEpoch(i, keyslot.Slot(key), f.Epoch)
	}
	return c.writeBackFence(ctx, g.name, key, top+1, until, g.ttl, g.cfg.minValidity)
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
		c.suspect(i)
		c.nodeReset(i, errEpochChanged)
	}
}

// fenceRounds bounds the write-back rounds of one fenced acquisition: a
// node refuses a fence that is not above its counter, and the next round
// proposes more than every refusing counter, so a second round is enough
// unless write-backs of other acquisitions keep landing meanwhile.
const fenceRounds = 3

// writeBackFence writes back key's fence and returns it once a quorum of
// nodes took it: each of them held a lower counter, which makes the fence
// larger than any fence an earlier acquisition returned (docs/fencing.md).
// A round that falls short of a quorum with refusals among its replies is
// followed by one that proposes one more than the largest refusing
// counter, up to fenceRounds rounds and while more than minValidity is
// left (the lock is valid until until). Otherwise it returns the last
// round's *QuorumError with Op "fence", matching ErrNotAcquired. It
// releases nothing. Observers and errors call the rounds name: the lock's
// (kind.name).
func (c *Client) writeBackFence(ctx context.Context, name, key string, fence uint64, until time.Time, ttl, minValidity time.Duration) (uint64, error) {
	for n := 1; ; n++ {
		w, err := c.run(ctx, request{script: wire.FenceStore, args: wire.FenceStoreArgs(key, fence, ttl.Milliseconds()),
			status: fenceStatus, keep: true})
		if err == nil {
			c.observeRound(OpFence, name, w, until.Sub(c.cfg.clock.Now()), c.drift(ttl))
		}
		if err == nil && w.ok {
			return fence, nil
		}
		if err == nil {
			err = c.quorumError(OpFence, name, w, ErrNotAcquired, 0)
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
	if _, ok := wire.ParseFenceRefusal(reply); ok {
		return NodeRefused, nil
	}
	return NodeFailed, &pool.NodeError{Addr: addr, Op: "EVALSHA", Err: fmt.Errorf("unexpected reply %v", reply)}
}

// refusedCounter returns the largest counter among the nodes that refused
// write-back round w, and whether any did.
func refusedCounter(w *round) (top uint64, refused bool) {
	for i, n := range w.nodes {
		if n.Status != NodeRefused {
			continue
		}
		if v, ok := wire.ParseFenceRefusal(w.replies[i]); ok {
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
