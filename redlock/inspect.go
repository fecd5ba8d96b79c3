package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// Inspection is what every node holds for a lock key (Client.Inspect).
type Inspection struct {
	Key    string
	Quorum int              // nodes a lock needs
	Nodes  []NodeInspection // every node, in the order the Client was given them
}

// NodeInspection is what one node holds for a lock key. The token itself
// is never reported: it is the holder's secret.
type NodeInspection struct {
	Addr string
	Err  error // the node did not answer (a *pool.NodeError); the fields below are then zero
	// Held: the key holds an owner's token (a lock, or a hand-off to a
	// waiting Lock call).
	Held bool
	// Reserved: the key is kept free for a waiting fenced Lock call
	// (WithHandoffWindow).
	Reserved bool
	// TTL is how long the key has left: -1 when it has no TTL, 0 when it
	// is absent.
	TTL time.Duration
	// Holder is the ID of the Client whose token the key holds ("" when it
	// cannot be told: a token from an older version, or none).
	Holder string
	Queued int    // Lock calls queued for the key, including some that left without saying so (gone within about a second)
	Fence  uint64 // the key's fence counter; 0 when it was never fenced on this node
}

// Holders returns who holds the key now: the hold of the Client whose
// token the key holds on a quorum of nodes (one at most), with the least
// TTL of those nodes; none when no Client holds it on a quorum (free, a
// lock being taken or released, or a split). Every Inspect result has
// this method.
func (in *Inspection) Holders() []Hold {
	var all []Hold
	for _, n := range in.Nodes {
		if n.Held {
			h := newHold(n.Holder, n.Holder, 0)
			h.TTL = n.TTL
			all = append(all, h)
		}
	}
	return onQuorum(in.Quorum, all, holdID, self)
}

// ID returns the Client's random ID. Inspect reports it as the holder of
// the locks this Client took (NodeInspection.Holder), and it names the
// Client's hand-off channels (docs/operations.md).
func (c *Client) ID() string { return c.id }

// Inspect asks every node at once what it holds for key: whether the key
// is held and by which Client, its remaining TTL, the queued Lock calls,
// and the fence counter. It reads and writes nothing else, takes no lock,
// and each node's answer is bounded by ctx and by the node timeout, at
// least 1s (an operator's call, not a lock's round). A node
// that does not answer has its Err set; Inspect itself fails only on bad
// arguments or a closed Client. The answer is a snapshot: it may change at
// once. See docs/operations.md.
func (c *Client) Inspect(ctx context.Context, key string) (*Inspection, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	if key == "" {
		return nil, errEmptyName
	}
	in := &Inspection{Key: key, Quorum: c.quorum, Nodes: make([]NodeInspection, len(c.pools))}
	err := c.askEvery(ctx, wire.Inspect, wire.InspectArgs(key), func(i int, reply any, err error) {
		n := &in.Nodes[i]
		n.Addr = c.pools[i].Addr()
		if err == nil {
			err = readInspection(n, reply)
		}
		if err != nil {
			*n = NodeInspection{Addr: n.Addr, Err: explainDenied(err)}
		}
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// askEvery runs script with args on every node at once, each bounded by
// ctx and operatorTimeout, as background work that Close waits for, and
// hands each node's answer to read (called concurrently, once per node).
// It returns ErrClosed on a closed Client.
func (c *Client) askEvery(ctx context.Context, script *pool.Script, args []any, read func(i int, reply any, err error)) error {
	ran := c.bg.do(func() {
		var g errgroup.Group
		for i, p := range c.pools {
			g.Go(func() error {
				nctx, cancel := context.WithTimeout(ctx, c.operatorTimeout())
				defer cancel()
				reply, err := p.Eval(nctx, script, args...)
				read(i, reply, err)
				return nil
			})
		}
		_ = g.Wait()
	})
	if !ran {
		return ErrClosed
	}
	return nil
}

// readInspection fills n from the inspection script's reply.
func readInspection(n *NodeInspection, reply any) error {
	in, err := wire.ParseInspect(reply)
	if err != nil {
		return &pool.NodeError{Addr: n.Addr, Op: "EVALSHA", Err: err}
	}
	if in.Held {
		if strings.HasPrefix(in.Value, wire.ReservedPrefix) {
			n.Reserved = true
		} else {
			n.Held, n.Holder = true, tokenClient(in.Value)
		}
		n.TTL = time.Duration(in.PTTL) * time.Millisecond
		if in.PTTL < 0 {
			n.TTL = -1
		}
	}
	n.Queued, n.Fence = int(in.Queued), in.Fence
	return nil
}

// ForceRelease gives up key on every node whatever it holds, as if its
// holder had released it: the longest waiting Lock call gets the key, or
// it is left free and announced. It is for operators, and dangerous: the
// holder is not told, and goes on believing it holds the lock until its
// next extension fails with ErrLockLost (its context then ends), or until
// its validity runs out; meanwhile a new holder may run beside it. Use it
// only for a holder known to be gone or stuck, and prefer fencing
// (WithFencing) where the protected resource can check. It returns an
// error naming every node that did not answer (the key may still be held
// there until its TTL); nil when every node did. Each node's answer is
// bounded as Inspect's. See docs/operations.md.
func (c *Client) ForceRelease(ctx context.Context, key string) error {
	if ctx == nil {
		return errNilContext
	}
	if key == "" {
		return errEmptyName
	}
	errs := make([]error, len(c.pools))
	err := c.askEvery(ctx, wire.ForceRelease, c.queue.ForceArgs(key), func(i int, reply any, err error) {
		if err == nil {
			_, err = doneStatus(c.pools[i].Addr(), reply, nil)
		}
		errs[i] = err
	})
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redlock: force release of %q: not every node answered (the key may stay held there until its TTL): %w", key, err)
	}
	return nil
}

// operatorTimeout bounds each node's answer to Inspect and ForceRelease:
// the node timeout, but at least a second, since they are not rounds of
// a lock that a slow node must not hold up.
func (c *Client) operatorTimeout() time.Duration { return max(c.cfg.nodeTimeout, time.Second) }
