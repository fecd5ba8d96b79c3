package redlock

import (
	"context"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// ElectionInspection is what every node holds for an election
// (Election.Inspect).
type ElectionInspection struct {
	Name   string
	Key    string // the election key (wire: "<name>:{<tag>}election")
	Quorum int    // nodes a leader needs
	Nodes  []ElectionNode
}

// ElectionNode is what one node holds for an election.
type ElectionNode struct {
	Addr string
	Err  error // the node did not answer (a *pool.NodeError); the fields below are then zero
	// Holder is the election key's hold: the leader's, or a campaign's
	// that won the lock and is writing its record. nil when none.
	Holder *Hold
	// Reserved: the key is kept free for a waiting campaign.
	Reserved bool
	// Record is the leader record on the node; nil when there is none.
	// It counts only while Current.
	Record *Leader
	// Current: the record names the token the election key holds.
	Current bool
	Fence   uint64 // the election key's fence counter: the latest term minted on the node
	Queued  int    // campaigns queued for the election key, as NodeInspection.Queued
}

// Leader returns the leader a quorum of nodes names, as Election.Leader
// does (the same holder, with the record that holder wrote), with the
// least TTL its lock has left on those nodes; ok is false when no quorum
// names one.
func (in *ElectionInspection) Leader() (l Leader, ttl time.Duration, ok bool) {
	type named struct {
		Leader
		Hold
	}
	var all []named
	for _, n := range in.Nodes {
		if n.Current && n.Holder != nil && n.Record != nil {
			all = append(all, named{*n.Record, *n.Holder})
		}
	}
	type key struct {
		l  Leader
		id uint64
	}
	agreed := onQuorum(in.Quorum, all, func(x *named) key { return key{x.Leader, x.id} }, func(x *named) *Hold { return &x.Hold })
	if len(agreed) == 0 {
		return Leader{}, 0, false
	}
	return agreed[0].Leader, agreed[0].TTL, true
}

// Holders returns who holds the election's lock now: the hold on a
// quorum of nodes of the election key (the leader's, or a campaign's
// that won the lock and is writing its record); none when no one holds
// it on a quorum. Leader says whom the record names.
func (in *ElectionInspection) Holders() []Hold {
	var all []Hold
	for _, n := range in.Nodes {
		if n.Holder != nil {
			all = append(all, *n.Holder)
		}
	}
	return onQuorum(in.Quorum, all, holdID, self)
}

// Inspect asks every node at once what it holds for the election: the
// election key's holder and TTL, its fence counter (the latest term), the
// queued campaigns, and the leader record. It reads and writes nothing
// else, and is bounded as Client.Inspect is. A node that does not answer
// has its Err set; Inspect itself fails only on an empty name, a nil ctx,
// or a closed Client (ErrClosed). See docs/operations.md.
func (e *Election) Inspect(ctx context.Context) (*ElectionInspection, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	c := e.c
	in := &ElectionInspection{Name: e.name, Key: e.key, Quorum: c.quorum, Nodes: make([]ElectionNode, len(c.pools))}
	err := c.askEvery(ctx, wire.InspectElection, wire.ElectionInspectArgs(e.name), func(i int, reply any, err error) {
		n := &in.Nodes[i]
		n.Addr = c.pools[i].Addr()
		var key wire.Inspection
		var rec wire.LeaderRecord
		if err == nil {
			if key, rec, err = wire.ParseElectionInspect(reply); err != nil {
				err = &pool.NodeError{Addr: n.Addr, Op: "EVALSHA", Err: err}
			}
		}
		if err != nil {
			*n = ElectionNode{Addr: n.Addr, Err: explainDenied(err)}
			return
		}
		readElection(n, key, rec)
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// readElection fills n from a node's answer: the election key and the
// leader record.
func readElection(n *ElectionNode, key wire.Inspection, rec wire.LeaderRecord) {
	n.Queued, n.Fence = int(key.Queued), key.Fence
	if key.Held {
		h, reserved := slotHold(wire.Slot{Value: key.Value, Held: true, PTTL: key.PTTL})
		if reserved {
			n.Reserved = true
		} else {
			n.Holder = &h
		}
	}
	if rec.Record != "" {
		n.Record = &Leader{Value: rec.Value, Term: rec.Term, ClientID: rec.Client}
		n.Current = rec.Current() && !strings.HasPrefix(key.Value, wire.ReservedPrefix)
	}
}
