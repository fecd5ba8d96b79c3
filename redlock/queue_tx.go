package redlock

import (
	"errors"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// A waiting Lock call's first round is a transaction (wire.QueueTx) when
// every node takes one: it queues the call and reads the key, and takes
// nothing. Its reply is read here as the acquisition script's.

// queueTx is a waiting call's first round as a transaction on key.
type queueTx struct {
	key  string
	cmds [][]any
	w    wire.Waiter // for the clock check (txReply)
}

// txReply reads node i's answer to the round's transaction as the
// acquisition script's answer to a refused waiter (wire.ParseQueueTx).
// When the node placed the waiter by a clock more than a second off its
// own, it is placed again by the node's clock (ZADD XX, not waited for),
// as the script does.
func (r *round) txReply(i int, reply any, err error) (any, error) {
	if err != nil {
		var re pool.ReplyError
		if !errors.As(err, &re) {
			return reply, err
		}
		if d, ok := asDenial(string(re)); ok && (d.cmd == "MULTI" || d.cmd == "EXEC") {
			// A user without transactions: the Client runs the script
			// from now on. Without MULTI, the node ran the commands one
			// by one: the entry goes, so that it cannot stand for a place
			// that ZADD, if refused too, did not take (acquire.lua
			// queues a waiter that has an entry again).
			r.c.noTx.Store(true)
			if s := r.c.starters[i]; s != nil && d.cmd == "MULTI" {
				s.Start(ignoreReply{}, "DEL", wire.EntryKey(r.req.tx.key, r.req.tx.w.ID))
			}
		}
		return reply, err
	}
	t, err := wire.ParseQueueTx(reply)
	if err != nil {
		return nil, &pool.NodeError{Addr: r.nodes[i].Addr, Op: "EXEC", Err: err}
	}
	if began, bad := r.req.tx.w.Misplaced(t.Micros); t.Added && bad {
		if s := r.c.starters[i]; s != nil {
			s.Start(ignoreReply{}, "ZADD", wire.WaitersKey(r.req.tx.key), "XX", began, r.req.tx.w.ID)
		}
	}
	return t.Refusal, nil
}
