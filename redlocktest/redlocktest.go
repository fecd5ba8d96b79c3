package redlocktest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/quorumlock/redlock/internal/simnode"
	"github.com/quorumlock/redlock/pool"
)

// Cluster is a set of in-process Redis nodes for one test, with the pools
// that reach them. Its methods are safe for concurrent use.
type Cluster struct {
	nodes []*Node

	mu      sync.Mutex
	clients int                  // Pools calls so far
	owner   map[pool.Pool]string // every pool made, to the client it stands for
	pools   []*pool.Node         // in the order made, for Close
	closed  bool
}

// New returns a cluster of n running, empty nodes, addressed
// "redlocktest-1:6379" to "redlocktest-<n>:6379" (the addresses show in
// the lock client's errors). It panics when n < 1. Close it at the end of
// the test, after the redlock Clients that use it.
//
// Inside a testing/synctest bubble, call New inside the bubble: the nodes'
// goroutines, channels and timers then belong to it.
func New(n int) *Cluster {
	if n < 1 {
		panic(fmt.Sprintf("redlocktest: New(%d): a cluster needs at least one node", n))
	}
	c := &Cluster{owner: map[pool.Pool]string{}}
	for i := range n {
		c.nodes = append(c.nodes, &Node{c: c, sim: simnode.New(fmt.Sprintf("redlocktest-%d:6379", i+1))})
	}
	return c
}

// Len returns the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Node returns the i-th node, from 0 to Len()-1. It panics when i is out
// of range.
func (c *Cluster) Node(i int) *Node {
	if i < 0 || i >= len(c.nodes) {
		panic(fmt.Sprintf("redlocktest: Node(%d) of a cluster of %d nodes", i, len(c.nodes)))
	}
	return c.nodes[i]
}

// Nodes returns every node, in order.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Pools returns a new set of pools, one per node in the nodes' order, for
// redlock.New. Each pool is a *pool.Node built by pool.New with opts and
// a dialer that reaches the node in process (it replaces any
// pool.WithDialer in opts); pool's defaults apply otherwise. Each call
// stands for one client process, the unit that Node.Partition cuts off.
// The pools may be closed early; Close closes every one left. It panics
// when opts are invalid (pool.New's error) or after Close.
func (c *Cluster) Pools(opts ...pool.Option) []pool.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		panic("redlocktest: Pools after Close")
	}
	c.clients++
	client := fmt.Sprintf("client-%d", c.clients)
	ps := make([]pool.Pool, len(c.nodes))
	for i, n := range c.nodes {
		p, err := pool.New(n.Addr(), append(slices.Clip(opts), pool.WithDialer(n.sim.Dialer(client)))...)
		if err != nil {
			for _, q := range c.pools[len(c.pools)-i:] {
				_ = q.Close()
				delete(c.owner, q)
			}
			panic(fmt.Sprintf("redlocktest: Pools: %v", err))
		}
		ps[i] = p
		c.owner[p] = client
		c.pools = append(c.pools, p)
	}
	return ps
}

// Close closes every pool that Pools made, then stops every node; once it
// returns, none of their goroutines is left. Close the redlock Clients
// first (their own background work is theirs to end). Calling Close again
// does nothing.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	pools := c.pools
	c.pools = nil
	c.mu.Unlock()
	for _, p := range pools {
		_ = p.Close()
	}
	for _, n := range c.nodes {
		n.sim.Close()
	}
}

// clientOf returns the client that made pools (Pools), and panics when
// none of them was made by c's Pools or they were made by several calls.
func (c *Cluster) clientOf(pools []pool.Pool) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	client := ""
	for _, p := range pools {
		name, ok := c.owner[p]
		if !ok {
			panic(fmt.Sprintf("redlocktest: pool %s was not made by this cluster's Pools", p.Addr()))
		}
		if client != "" && name != client {
			panic("redlocktest: pools from more than one Pools call: partition each set on its own")
		}
		client = name
	}
	if client == "" {
		panic("redlocktest: no pools to partition")
	}
	return client
}

// Node is one in-process Redis node of a Cluster (a simulated node behind
// in-memory connections), with controls for the faults a test needs. Its methods are safe for concurrent use.
type Node struct {
	c   *Cluster
	sim *simnode.Node
}

// Addr returns the node's address, "redlocktest-<i+1>:6379" for Node(i).
func (n *Node) Addr() string { return n.sim.Addr() }

// Up reports whether the node is running (not killed).
func (n *Node) Up() bool { return n.sim.Up() }

// Kill stops the node, as a crashed process: its connections close and
// new ones are refused (the pools' calls fail at once) until Start or
// Restart. Killing a node that is down does nothing.
func (n *Node) Kill() { n.sim.Kill() }

// Start starts a killed node empty, as a Redis without persistence: it
// has forgotten its locks, so redlock's restart safety does not count it
// until it has been up for the maximum TTL (WithRestartSafety, 1 minute
// by default). Starting a running node does nothing.
func (n *Node) Start() { n.sim.Start(simnode.Empty) }

// Restart kills the node and starts it again at once with the keys it
// held (as with an append-only file), less those whose TTL ran out. Its
// connections close and it gets a new run id: redlock counts it at once
// only with redlock.WithDurableNodes; otherwise, as after Start, not
// until it has been up for the maximum TTL.
func (n *Node) Restart() { n.sim.Restart(simnode.Kept) }

// RestartEmpty kills the node and starts it again at once with nothing:
// Kill then Start.
func (n *Node) RestartEmpty() { n.sim.Restart(simnode.Empty) }

// Pause stops the node from reading its connections, as a stopped
// process (SIGSTOP): commands wait, and the pools' calls time out; new
// connections are still accepted. Time goes on for its keys' TTLs. Resume
// undoes it.
func (n *Node) Pause() { n.sim.Pause() }

// Resume lets a paused node run the commands that waited, and the next.
func (n *Node) Resume() { n.sim.Resume() }

// Partition cuts the client that owns pools (one result of Cluster.Pools,
// or any of its pools) off from this node, both ways: nothing it sends
// arrives, nothing comes back, and its calls time out; its new
// connections hang. Other clients still reach the node. Bytes in flight
// are held, not lost, and arrive after Heal while their connection is
// still open, as TCP would deliver them. It panics when a pool was not
// made by the cluster's Pools, or pools come from several Pools calls.
func (n *Node) Partition(pools []pool.Pool) { n.sim.Cut(n.c.clientOf(pools), false) }

// Heal ends every partition of this node.
func (n *Node) Heal() { n.sim.Heal("") }

// Expire deletes key now, as if its TTL had just run out, and reports
// whether the node held it (false while the node is down).
func (n *Node) Expire(key string) bool { return n.sim.Expire(key) }

// Keys returns the node's keys, sorted; none while it is down.
func (n *Node) Keys() []string { return n.sim.Keys() }

// Do runs one command on the node directly, as redis-cli would, outside
// the pools and unaffected by Pause and Partition; it fails while the
// node is down. Replies are Go values: string for simple and bulk
// strings, int for integers, []any for arrays, nil for a null reply; an
// error reply is returned as the error.
func (n *Node) Do(args ...string) (any, error) { return n.sim.Do(args...) }
