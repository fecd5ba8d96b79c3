package simnode

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// A node in cluster mode is one shard (master) of a Redis Cluster: INFO
// server says redis_mode:cluster, and a command whose key is in a slot the
// shard does not serve is answered MOVED, as a master answers once the slot
// has moved. The cluster itself (which shard serves which slot) is the
// caller's; MoveSlot moves a slot's keys between two shards.

// SetCluster puts the node in cluster mode, serving the slots that serves
// reports (it is called under the node's lock: it must not call the node).
func (n *Node) SetCluster(serves func(slot uint16) bool) {
	n.set(func() { n.serves = serves })
}

// servesSlot reports whether the node serves slot: always, when it is not
// in cluster mode.
func (n *Node) servesSlot(slot uint16) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.serves == nil || n.serves(slot)
}

// clusterMode reports whether the node is in cluster mode.
func (n *Node) clusterMode() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.serves != nil
}

// moved is the error of a command (args, as it was sent) whose keys are
// in a slot the node does not serve (MOVED), or in several slots
// (CROSSSLOT), as a cluster's master answers; nil otherwise, or when the
// command has no key this checks.
func (e *engine) moved(args []string) any {
	if e.clustered == nil || !e.clustered() {
		return nil
	}
	var keys []string
	switch strings.ToUpper(args[0]) {
	case "EVAL", "EVALSHA":
		if n, err := strconv.Atoi(args[2]); err == nil && n > 0 && len(args) >= 3+n {
			keys = args[3 : 3+n]
		}
	case "SET", "GET", "DEL", "PEXPIRE", "PTTL", "ZADD", "ZRANGE", "HGET", "HGETALL", "ZCARD":
		keys = args[1:2]
	default:
		return nil
	}
	if len(keys) == 0 {
		return nil
	}
	slot := keyslot.Slot(keys[0])
	for _, k := range keys[1:] {
		if keyslot.Slot(k) != slot {
			return errorReply("CROSSSLOT Keys in request don't hash to the same slot")
		}
	}
	if !e.serves(slot) {
		return errorReply(fmt.Sprintf("MOVED %d %s", slot, "elsewhere"))
	}
	return nil
}

// MoveSlot moves the keys of slot from src to dst, with their TTLs, and
// calls flip (which makes dst serve the slot and src not), all at one
// instant of both nodes: no command runs on either in between. It reports
// how many keys moved; nothing moves when either node is down (flip is
// still called).
func MoveSlot(src, dst *Node, slot uint16, flip func()) int {
	src.mu.Lock()
	si := src.inc
	src.mu.Unlock()
	dst.mu.Lock()
	di := dst.inc
	dst.mu.Unlock()
	if si == nil || di == nil || si.e == di.e {
		flip()
		return 0
	}
	snow, dnow := src.now(), dst.now()
	si.e.mu.Lock()
	defer si.e.mu.Unlock()
	di.e.mu.Lock()
	defer di.e.mu.Unlock()
	si.e.st.now, di.e.st.now = snow, dnow
	moved := 0
	for k := range si.e.st.items {
		it := si.e.st.get(k)
		if it == nil || keyslot.Slot(k) != slot {
			continue
		}
		c := it.clone()
		if !c.exp.IsZero() {
			c.exp = dnow.Add(c.exp.Sub(snow))
		}
		di.e.st.items[k] = &c
		delete(si.e.st.items, k)
		moved++
	}
	flip()
	return moved
}
