package redlock

import (
	"cmp"
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// The inspection of semaphores, read-write locks and elections: each
// kind's handle asks every node at once, as Client.Inspect does for a
// lock key, and says what each node holds and what a quorum agrees on.

// Hold is one hold that an inspection saw on a node: a permit, a reader,
// a writer, a waiting writer's intent or an election's lock. The token is
// never reported (it is the holder's secret), but the inspection tells
// the same hold on different nodes apart from others by it.
type Hold struct {
	// Holder is the ID of the Client that took it (Client.ID); "" when it
	// cannot be told (a token from an older version).
	Holder string
	// TTL is how long it has left on the node's clock; -1 when it has no
	// TTL. In what a quorum agrees on, the least of those nodes'.
	TTL time.Duration
	// Slot is a semaphore permit's slot, from 0; 0 for other holds.
	Slot int
	id   uint64 // a hash of the token (or the waiter id of an intent)
}

// holdID and self are how onQuorum reads a Hold.
func holdID(h *Hold) uint64 { return h.id }
func self(h *Hold) *Hold    { return h }

// newHold returns the hold of token, with pttl ms left (-1: no TTL).
func newHold(token, holder string, pttl int64) Hold {
	h := fnv.New64a()
	_, _ = h.Write([]byte(token))
	ttl := time.Duration(pttl) * time.Millisecond
	if pttl < 0 {
		ttl = -1
	}
	return Hold{Holder: holder, TTL: ttl, id: h.Sum64()}
}

// onQuorum returns the items of items (every node's, at most one of each
// key per node) that a quorum of nodes report, in the order first seen,
// each with the least TTL of those nodes.
func onQuorum[K comparable, T any](quorum int, items []T, key func(*T) K, hold func(*T) *Hold) []T {
	at := map[K]int{}
	var out []T
	var count []int
	for _, it := range items {
		k := key(&it)
		j, seen := at[k]
		if !seen {
			at[k], out, count = len(out), append(out, it), append(count, 1)
			continue
		}
		count[j]++
		if h := hold(&it); h.TTL >= 0 && (hold(&out[j]).TTL < 0 || h.TTL < hold(&out[j]).TTL) {
			hold(&out[j]).TTL = h.TTL
		}
	}
	agreed := out[:0]
	for j, it := range out {
		if count[j] >= quorum {
			agreed = append(agreed, it)
		}
	}
	return agreed
}

// SemaphoreInspection is what every node holds for a semaphore
// (Semaphore.Inspect).
type SemaphoreInspection struct {
	Name    string
	Permits int // the permits the Semaphore was made with: the slots read
	Quorum  int // nodes a permit needs
	Nodes   []SemaphoreNode
}

// SemaphoreNode is what one node holds for a semaphore.
type SemaphoreNode struct {
	Addr string
	Err  error // the node did not answer (a *pool.NodeError); the fields below are then zero
	// Size is the number of permits the node keeps for the name, as the
	// first acquisition set it; 0 when none did. A Size other than
	// Permits makes every acquisition fail on the node.
	Size    int
	Permits []Permit // the slots held or reserved on the node, by slot
	// Queued is the Acquire calls queued on the node, including some that
	// left without saying so (until their entry lapses).
	Queued int
}

// Permit is a semaphore's slot held on a node (its Hold's Slot).
type Permit struct {
	Hold
	Reserved bool // kept free for a waiting call rather than held
}

// Holders returns the permits in use: each slot held by one holder on a
// quorum of nodes, by slot (Hold.Slot). A permit held on fewer nodes
// (being taken or released, or a split round's) is not among them.
func (in *SemaphoreInspection) Holders() []Hold {
	var all []Hold
	for _, n := range in.Nodes {
		for _, p := range n.Permits {
			if !p.Reserved {
				all = append(all, p.Hold)
			}
		}
	}
	type key struct {
		slot int
		id   uint64
	}
	held := onQuorum(in.Quorum, all, func(h *Hold) key { return key{h.Slot, h.id} }, self)
	slices.SortStableFunc(held, func(a, b Hold) int { return cmp.Compare(a.Slot, b.Slot) })
	return held
}

// Inspect asks every node at once what it holds for the semaphore: its
// size, each held slot's holder and TTL, and the queued Acquire calls.
// It reads and writes nothing else, takes no permit, and is bounded as
// Client.Inspect is. A node that does not answer has its Err set; Inspect
// itself fails only on a bad semaphore (name or permits), a nil ctx, or
// a closed Client (ErrClosed). See docs/operations.md.
func (s *Semaphore) Inspect(ctx context.Context) (*SemaphoreInspection, error) {
	switch {
	case ctx == nil:
		return nil, errNilContext
	case s.err != nil:
		return nil, s.err
	}
	c := s.c
	in := &SemaphoreInspection{Name: s.name, Permits: s.permits, Quorum: c.quorum, Nodes: make([]SemaphoreNode, len(c.pools))}
	err := c.askEvery(ctx, wire.InspectSemaphore, wire.SemInspectArgs(s.name, s.permits), func(i int, reply any, err error) {
		n := &in.Nodes[i]
		n.Addr = c.pools[i].Addr()
		var w wire.SemInspection
		if err == nil {
			if w, err = wire.ParseSemInspect(reply, s.permits); err != nil {
				err = &pool.NodeError{Addr: n.Addr, Op: "EVALSHA", Err: err}
			}
		}
		if err != nil {
			*n = SemaphoreNode{Addr: n.Addr, Err: explainDenied(err)}
			return
		}
		n.Size, n.Queued = w.Size, int(w.Queued)
		for slot, sl := range w.Slots {
			if sl.Held {
				h, reserved := slotHold(sl)
				h.Slot = slot
				n.Permits = append(n.Permits, Permit{Hold: h, Reserved: reserved})
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// slotHold returns the hold of a key that a node holds, and whether it is
// a reservation for a waiter (its Holder is then the waiter's Client).
func slotHold(sl wire.Slot) (Hold, bool) {
	if id, ok := strings.CutPrefix(sl.Value, wire.ReservedPrefix); ok {
		return newHold(sl.Value, waiterClient(id), sl.PTTL), true
	}
	return newHold(sl.Value, tokenClient(sl.Value), sl.PTTL), false
}

// waiterClient returns the Client ID of a waiter id ("<client id>.<n>").
func waiterClient(id string) string {
	cid, _, _ := strings.Cut(id, ".")
	return cid
}
