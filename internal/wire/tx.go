package wire

import (
	"fmt"
	"strconv"
)

// QueueTx is the transaction (MULTI ... EXEC) that queues the waiting
// call w on key without a script: its first round on the nodes, sent by a
// Client whose pools send transactions (pool.New's). It writes what
// acquire.lua writes for a refused waiter new on the node (its entry, its
// place by ZADD NX, the queue's TTL) and reads the node's clock and the
// key's value and TTL (QueueTxReply). It takes no key: a free key is left
// to a script round, which gives it to the head of the queue.
func (q Queue) QueueTx(key string, ms int64, w Waiter) [][]any {
	queue := WaitersKey(key)
	entry := strconv.Itoa(w.Round)
	if w.Handoff != "" {
		entry += " " + strconv.FormatInt(ms, 10) + " " + w.Handoff
	}
	return [][]any{
		{"SET", EntryKey(key, w.ID), entry, "PX", q.life},
		{"ZADD", queue, "NX", w.Since, w.ID},
		{"PEXPIRE", queue, q.life},
		{"TIME"},
		{"GET", key},
		{"PTTL", key},
	}
}

// QueueTxReply is what a node answered to QueueTx.
type QueueTxReply struct {
	// Refusal is what acquire.lua answers a refused waiter, a []any:
	// {CodeHeld, pttl}, {CodeReserved, pttl} or {CodeKind}; for a free
	// key {CodeHeld, 0}: held for no more time, a script round takes it.
	// It is boxed once, as a reply is.
	Refusal any
	Free    bool  // the key was free: w is queued, and holds nothing
	Added   bool  // ZADD placed w (it was not queued on the node)
	Micros  int64 // the node's clock (TIME), µs
}

// ParseQueueTx reads EXEC's reply to QueueTx.
func ParseQueueTx(reply any) (QueueTxReply, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 6 {
		return QueueTxReply{}, fmt.Errorf("unexpected reply %v to the queue's transaction", reply)
	}
	var r QueueTxReply
	added, ok1 := vs[1].(int64)
	now, ok2 := parseTime(vs[3])
	pttl, ok3 := vs[5].(int64)
	if !ok1 || !ok2 || !ok3 {
		return QueueTxReply{}, fmt.Errorf("unexpected reply %v to the queue's transaction", reply)
	}
	r.Added, r.Micros = added == 1, now
	var v []byte // the key's value, read without a copy
	switch x := vs[4].(type) {
	case nil:
		r.Free, r.Refusal = true, []any{int64(CodeHeld), int64(0)}
		return r, nil
	case []byte:
		v = x
	case string:
		v = []byte(x)
	default:
		return QueueTxReply{}, fmt.Errorf("unexpected reply %v to the queue's transaction", reply)
	}
	switch {
	case string(v) == RWMarker:
		r.Refusal = []any{int64(CodeKind)}
	case len(v) >= len(ReservedPrefix) && string(v[:len(ReservedPrefix)]) == ReservedPrefix:
		r.Refusal = []any{int64(CodeReserved), pttl}
	default:
		r.Refusal = []any{int64(CodeHeld), pttl}
	}
	return r, nil
}

// parseTime reads TIME's reply as µs.
func parseTime(v any) (int64, bool) {
	vs, ok := v.([]any)
	if !ok || len(vs) != 2 {
		return 0, false
	}
	sec, ok1 := digits(vs[0], 12)
	micro, ok2 := digits(vs[1], 6)
	return sec*1_000_000 + micro, ok1 && ok2
}

// digits reads a bulk string of 1 to max decimal digits, without a copy.
func digits(v any, max int) (int64, bool) {
	b, ok := v.([]byte)
	if !ok || len(b) == 0 || len(b) > max {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// Misplaced reports whether a node whose clock read nodeMicros when it
// placed w by the priority w sent should place it at began instead: when
// the Client's clock is more than a second off the node's, the node's
// clock less the time w waited places it, as the scripts do for a waiter
// new on the node (place.lua).
func (w Waiter) Misplaced(nodeMicros int64) (began int64, bad bool) {
	began = nodeMicros - w.Waited
	d := w.Since - began
	return began, d > 1_000_000 || d < -1_000_000
}
