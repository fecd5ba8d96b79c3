package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/simnode"
	"github.com/quorumlock/redlock/pool"
)

// A Redlock node that is a Redis Cluster: shards (simnode nodes in cluster
// mode) that serve the slots a slot map gives them, reached by each Client
// through a clusterPool that routes every command by its key's slot and,
// on a MOVED answer (the slot moved meanwhile), sends it again to the
// shard that serves it now, as a cluster client does.

// simCluster is one cluster: its shards and its slot map.
type simCluster struct {
	shards []*simnode.Node
	mu     sync.Mutex
	owner  [16384]uint8 // the shard that serves each slot
}

// newCluster makes a cluster of k shards named after node i, each serving
// an equal range of slots.
func newCluster(i, k int) *simCluster {
	cl := &simCluster{}
	for j := range k {
		cl.shards = append(cl.shards, simnode.New(fmt.Sprintf("sim%d-%d:6379", i+1, j+1)))
	}
	for s := range cl.owner {
		cl.owner[s] = uint8(s * k / len(cl.owner))
	}
	for j, sh := range cl.shards {
		sh.SetCluster(func(slot uint16) bool { return cl.serving(slot) == j })
	}
	return cl
}

// serving returns the shard that serves slot.
func (cl *simCluster) serving(slot uint16) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return int(cl.owner[slot])
}

// move moves slot, with its keys, to shard to, and reports from which
// shard and how many keys moved.
func (cl *simCluster) move(slot uint16, to int) (from, keys int) {
	from = cl.serving(slot)
	if from == to {
		return from, 0
	}
	keys = simnode.MoveSlot(cl.shards[from], cl.shards[to], slot, func() {
		cl.mu.Lock()
		cl.owner[slot] = uint8(to)
		cl.mu.Unlock()
	})
	return from, keys
}

// slots is the CLUSTER SLOTS reply of the slot map: a range per run of
// slots of one shard, its master named by its address.
func (cl *simCluster) slots() []any {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []any
	for s := 0; s < len(cl.owner); {
		e := s
		for e+1 < len(cl.owner) && cl.owner[e+1] == cl.owner[s] {
			e++
		}
		host, _, _ := strings.Cut(cl.shards[cl.owner[s]].Addr(), ":")
		out = append(out, []any{int64(s), int64(e), []any{host, int64(6379), host}})
		s = e + 1
	}
	return out
}

// clusterPool is one Client's pool of a cluster node: a pool.New per
// shard.
type clusterPool struct {
	addr   string
	cl     *simCluster
	shards []*pool.Node
}

func (p *clusterPool) Addr() string { return p.addr }

// Generation grows whenever any shard's pool opens a connection.
func (p *clusterPool) Generation() uint64 {
	var g uint64
	for _, s := range p.shards {
		g += s.Generation()
	}
	return g
}

func (p *clusterPool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	if strings.EqualFold(cmd, "CLUSTER") && len(args) == 1 && strings.EqualFold(fmt.Sprint(args[0]), "SLOTS") {
		return p.cl.slots(), nil
	}
	key, _ := firstString(args)
	return p.routed(key, func(s *pool.Node) (any, error) { return s.Do(ctx, cmd, args...) })
}

func (p *clusterPool) Eval(ctx context.Context, script *pool.Script, keysAndArgs ...any) (any, error) {
	key := ""
	switch {
	case script.Keys() > 0:
		key, _ = firstString(keysAndArgs)
	case script.Keys() < 0 && len(keysAndArgs) > 1:
		// The key count comes first (pool.NewScript), then the keys.
		if n, ok := keysAndArgs[0].(int); ok && n > 0 {
			key, _ = firstString(keysAndArgs[1:])
		}
	}
	return p.routed(key, func(s *pool.Node) (any, error) { return s.Eval(ctx, script, keysAndArgs...) })
}

// routed runs call on the shard that serves key's slot (the first shard
// for no key), and once more after a MOVED answer.
func (p *clusterPool) routed(key string, call func(*pool.Node) (any, error)) (any, error) {
	for try := 0; ; try++ {
		reply, err := call(p.shards[p.cl.serving(keyslot.Slot(key))])
		var re pool.ReplyError
		if try == 0 && errors.As(err, &re) && strings.HasPrefix(string(re), "MOVED ") {
			continue
		}
		return reply, err
	}
}

// firstString returns the first argument when it is a string (or bytes).
func firstString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	switch a := args[0].(type) {
	case string:
		return a, true
	case []byte:
		return string(a), true
	}
	return "", false
}
