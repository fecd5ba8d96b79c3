package wire

import (
	"fmt"
	"strconv"
	"strings"
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
	// Refusal is what acquire.lua answers a refused waiter: {CodeHeld,
	// pttl}, {CodeReserved, pttl} or {CodeKind}; for a free key
	// {CodeHeld, 0}: held for no more time, a script round takes it.
	Refusal []any
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
	switch v, ok := String(vs[4]); {
	case vs[4] == nil:
		r.Free, r.Refusal = true, []any{int64(CodeHeld), int64(0)}
	case !ok:
		return QueueTxReply{}, fmt.Errorf("unexpected reply %v to the queue's transaction", reply)
	case v == RWMarker:
		r.Refusal = []any{int64(CodeKind)}
	case strings.HasPrefix(v, ReservedPrefix):
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
	s, ok1 := String(vs[0])
	us, ok2 := String(vs[1])
	if !ok1 || !ok2 {
		return 0, false
	}
	sec, err1 := strconv.ParseInt(s, 10, 64)
	micro, err2 := strconv.ParseInt(us, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return sec*1_000_000 + micro, true
}

// Misplaced reports whether a node whose clock read nodeMicros when it
// placed w by the priority w sent should place it at began instead: when
// the Client's clock is more than a second off the node's, the node's
// clock less the time w waited places it, as acquire.lua does for a
// waiter new on the node.
func (w Waiter) Misplaced(nodeMicros int64) (began int64, bad bool) {
	began = nodeMicros - w.Waited
	d := w.Since - began
	return began, d > 1_000_000 || d < -1_000_000
}
