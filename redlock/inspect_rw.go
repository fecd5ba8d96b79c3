package redlock

import (
	"context"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// RWMode is what a read-write lock is held as.
type RWMode uint8

// The modes of a read-write lock.
const (
	RWFree  RWMode = iota // no reader and no writer
	RWRead                // one reader or more
	RWWrite               // a writer
)

// String returns "free", "read" or "write".
func (m RWMode) String() string {
	switch m {
	case RWRead:
		return "read"
	case RWWrite:
		return "write"
	}
	return "free"
}

// RWInspection is what every node holds for a read-write lock
// (RWLock.Inspect).
type RWInspection struct {
	Name   string
	Quorum int // nodes a hold needs
	Nodes  []RWNode
}

// RWNode is what one node holds for a read-write lock.
type RWNode struct {
	Addr string
	Err  error  // the node did not answer (a *pool.NodeError); the fields below are then zero
	Mode RWMode // on this node: write while a writer holds it, read while a live reader does
	// Writer is the writer's hold; nil when none.
	Writer *Hold
	// Readers are the live readers' holds (their hold has not ended on
	// the node's clock).
	Readers []Hold
	// Expired is the readers whose hold ended but whose entry the node
	// still keeps (the next writer's round drops them): they hold nothing.
	Expired int
	// Intent is a waiting writer's intent (its Holder is the writer's
	// Client): new readers wait while it lasts. nil when none.
	Intent *Hold
	// Mutex: a mutex (Lock, TryLock) holds the name on this node, and
	// every call of the read-write lock fails there.
	Mutex bool
}

// Mode returns what a quorum of nodes agrees the lock is held as: RWWrite
// when one writer holds it on a quorum; otherwise RWRead when a reader
// does; otherwise RWFree (no hold on a quorum: free, or a hold being
// taken or released).
func (in *RWInspection) Mode() RWMode {
	m, _ := in.agreed()
	return m
}

// Holders returns who holds the lock now, as Mode says: the writer, or
// the readers that each hold it on a quorum; none when it is free.
func (in *RWInspection) Holders() []Hold {
	_, hs := in.agreed()
	return hs
}

// agreed is Mode and Holders.
func (in *RWInspection) agreed() (RWMode, []Hold) {
	var writers, readers []Hold
	for _, n := range in.Nodes {
		if n.Writer != nil {
			writers = append(writers, *n.Writer)
		}
		readers = append(readers, n.Readers...)
	}
	if w := onQuorum(in.Quorum, writers, holdID, self); len(w) > 0 {
		return RWWrite, w
	}
	if r := onQuorum(in.Quorum, readers, holdID, self); len(r) > 0 {
		return RWRead, r
	}
	return RWFree, nil
}

// Inspect asks every node at once what it holds for the read-write lock:
// the writer, the live readers, a waiting writer's intent, and whether a
// mutex holds the name. It reads and writes nothing else, takes no lock,
// and is bounded as Client.Inspect is. A node that does not answer has
// its Err set; Inspect itself fails only on an empty name, a nil ctx, or
// a closed Client (ErrClosed). See docs/operations.md.
func (rw *RWLock) Inspect(ctx context.Context) (*RWInspection, error) {
	switch {
	case ctx == nil:
		return nil, errNilContext
	case rw.name == "":
		return nil, errEmptyName
	}
	c := rw.c
	in := &RWInspection{Name: rw.name, Quorum: c.quorum, Nodes: make([]RWNode, len(c.pools))}
	err := c.askEvery(ctx, wire.InspectRW, wire.RWInspectArgs(&rw.keys), func(i int, reply any, err error) {
		n := &in.Nodes[i]
		n.Addr = c.pools[i].Addr()
		var w wire.RWInspection
		if err == nil {
			if w, err = wire.ParseRWInspect(reply); err != nil {
				err = &pool.NodeError{Addr: n.Addr, Op: "EVALSHA", Err: err}
			}
		}
		if err != nil {
			*n = RWNode{Addr: n.Addr, Err: explainDenied(err)}
			return
		}
		readRW(n, &w)
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// readRW fills n from a node's answer w.
func readRW(n *RWNode, w *wire.RWInspection) {
	n.Mutex, n.Expired = w.Mutex, int(w.Expired)
	if w.Writer.Held {
		h := newHold(w.Writer.Value, tokenClient(w.Writer.Value), w.Writer.PTTL)
		n.Writer, n.Mode = &h, RWWrite
	}
	if w.Intent.Held {
		h := newHold(w.Intent.Value, waiterClient(w.Intent.Value), w.Intent.PTTL)
		n.Intent = &h
	}
	for _, r := range w.Readers {
		n.Readers = append(n.Readers, newHold(r.Value, tokenClient(r.Value), r.PTTL))
	}
	if n.Mode == RWFree && len(n.Readers) > 0 {
		n.Mode = RWRead
	}
}
