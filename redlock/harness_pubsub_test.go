package redlock

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// psNode is a testNode that can also subscribe (pool.Subscriber), for the
// tests of the notifier. Its pub/sub connections are real connections to
// the node's server, opened and read by pool.FromRedigo as a pool of New
// would: SUBSCRIBE, UNSUBSCRIBE and PING are answered by the server, and
// the releases announce themselves there (the scripts PUBLISH). The
// wrapper only does what a real node cannot be made to do on cue: hold
// the acknowledgements of SUBSCRIBE (and, as on a slow node, everything
// read after them) until the test lets them go, swallow them, mute a
// connection (swallow everything the node sends on it, as on one that
// hangs), and break one. It logs the commands sent, the events that
// arrived and those the Client has handled, so that a test waits for what
// it needs rather than for a while. A psNode logs the connections of one
// Client: a second Client of the same server takes a twin.
type psNode struct {
	*testNode
	serverAddr string
	sub        pool.Subscriber

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever the log grows
	raw      redis.Conn    // the connection dialled last
	conns    []*psConn     // every connection dialled, in order
	ackGate  chan struct{} // non-nil: acknowledgements wait until it closes
	dropAcks bool          // acknowledgements are swallowed
}

var _ pool.Subscriber = (*psNode)(nil)

// psConn is one pub/sub connection of a psNode.
type psConn struct {
	pool.PubSubConn // the real one
	node            *psNode
	client          func(pool.PubSubEvent) // the Client's handler
	raw             redis.Conn
	gone            chan struct{} // closed by Close and breakConn: releases held events
	goneOnce        sync.Once
	// Under node.mu:
	sent    []string           // the commands, "SUBSCRIBE ch1 ch2", "PING"...
	arrived []pool.PubSubEvent // the events the node sent, before any is held or swallowed
	handled []pool.PubSubEvent // the events the Client's handler returned from
	closed  bool               // the Client closed it
	mute    bool               // everything but its end is swallowed
}

// newPubSubNodes starts n nodes that can subscribe, "node1:6379" to
// "node<n>:6379".
func newPubSubNodes(t *testing.T, n int) []*psNode {
	t.Helper()
	nodes := make([]*psNode, n)
	for i := range nodes {
		nodes[i] = newPubSubNode(t, fmt.Sprintf("node%d:6379", i+1))
	}
	return nodes
}

func newPubSubNode(t *testing.T, addr string) *psNode {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(epoch)
	return wrapPubSub(t, addr, m.Addr())
}

// twin returns another psNode on n's server, for another Client: each
// psNode logs the connections of one Client.
func (n *psNode) twin(t *testing.T) *psNode { return wrapPubSub(t, n.addr, n.serverAddr) }

// twins returns a twin of each of nodes.
func twins(t *testing.T, nodes []*psNode) []*psNode {
	out := make([]*psNode, len(nodes))
	for i, n := range nodes {
		out[i] = n.twin(t)
	}
	return out
}

// wrapPubSub returns a psNode, known to Clients as addr, for the server at
// serverAddr.
func wrapPubSub(t *testing.T, addr, serverAddr string) *psNode {
	n := &psNode{testNode: wrapServer(t, addr, serverAddr), serverAddr: serverAddr, changed: make(chan struct{})}
	p := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialContext(ctx, "tcp", serverAddr)
		if err == nil {
			n.mu.Lock()
			n.raw = c
			n.mu.Unlock()
		}
		return c, err
	}}
	sub := pool.FromRedigo(p, addr)
	t.Cleanup(func() { _ = sub.(io.Closer).Close() })
	n.sub = sub.(pool.Subscriber)
	return n
}

// newPubSubClient returns a client over n nodes that can subscribe, as
// newFakeClient does over plain ones.
func newPubSubClient(t *testing.T, n int, opts ...Option) (*Client, []*psNode, *clock.Fake) {
	t.Helper()
	nodes := newPubSubNodes(t, n)
	c, clk := newClientOnPubSub(t, nodes, opts...)
	return c, nodes, clk
}

// newClientOnPubSub is newPubSubClient on the given nodes.
func newClientOnPubSub(t *testing.T, nodes []*psNode, opts ...Option) (*Client, *clock.Fake) {
	t.Helper()
	pools := make([]pool.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = n
	}
	return newClientWith(t, pools, plainNodes(nodes), opts...)
}

// plainNodes returns the testNodes under nodes.
func plainNodes(nodes []*psNode) []*testNode {
	plain := make([]*testNode, len(nodes))
	for i, n := range nodes {
		plain[i] = n.testNode
	}
	return plain
}

// DialPubSub opens a pub/sub connection to the node's server.
func (n *psNode) DialPubSub(ctx context.Context, on func(pool.PubSubEvent)) (pool.PubSubConn, error) {
	c := &psConn{node: n, client: on, gone: make(chan struct{})}
	conn, err := n.sub.DialPubSub(ctx, c.on)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	c.PubSubConn, c.raw = conn, n.raw
	n.conns = append(n.conns, c)
	n.changedLocked()
	n.mu.Unlock()
	return c, nil
}

// changedLocked wakes those who wait for the log.
func (n *psNode) changedLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// on receives what the server sent, in order, from the reader of the
// connection. The end of the connection always passes.
func (c *psConn) on(ev pool.PubSubEvent) {
	c.node.mu.Lock()
	c.arrived = append(c.arrived, ev)
	c.node.changedLocked()
	c.node.mu.Unlock()
	if ev.Kind != pool.PubSubClosed && !c.node.pass(c, ev) {
		return
	}
	c.client(ev)
	c.node.mu.Lock()
	c.handled = append(c.handled, ev)
	c.node.changedLocked()
	c.node.mu.Unlock()
}

// pass reports whether ev goes on to the Client, after holding it while
// the node's acknowledgements are held.
func (n *psNode) pass(c *psConn, ev pool.PubSubEvent) bool {
	n.mu.Lock()
	gate := n.ackGate
	ack := ev.Kind == pool.PubSubSubscribed
	drop := c.mute || (ack && n.dropAcks)
	n.mu.Unlock()
	if drop {
		return false
	}
	if ack && gate != nil {
		select {
		case <-gate:
		case <-c.gone:
			return false
		}
	}
	return true
}

func (c *psConn) Subscribe(channels ...string) error {
	c.record("SUBSCRIBE", channels)
	return c.PubSubConn.Subscribe(channels...)
}

func (c *psConn) Unsubscribe(channels ...string) error {
	c.record("UNSUBSCRIBE", channels)
	return c.PubSubConn.Unsubscribe(channels...)
}

func (c *psConn) Ping() error {
	c.record("PING", nil)
	return c.PubSubConn.Ping()
}

func (c *psConn) Close() error {
	c.node.mu.Lock()
	c.closed = true
	c.node.changedLocked()
	c.node.mu.Unlock()
	c.goneOnce.Do(func() { close(c.gone) })
	return c.PubSubConn.Close()
}

func (c *psConn) record(cmd string, channels []string) {
	c.node.mu.Lock()
	defer c.node.mu.Unlock()
	c.sent = append(c.sent, strings.Join(append([]string{cmd}, channels...), " "))
	c.node.changedLocked()
}

// holdAcks makes the acknowledgements of SUBSCRIBE that arrive from now
// on, and what the node sends after each, wait until the returned
// function is called (or the connection ends).
func (n *psNode) holdAcks() (release func()) {
	g := make(chan struct{})
	var once sync.Once
	n.mu.Lock()
	n.ackGate = g
	n.mu.Unlock()
	return func() { once.Do(func() { close(g) }) }
}

// swallowAcks makes the node answer everything but SUBSCRIBE, as a
// broken node may; false makes it answer again.
func (n *psNode) swallowAcks(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropAcks = on
}

// muteConn makes the node's latest connection read nothing from now on,
// as a connection that hangs; the next one works.
func (n *psNode) muteConn() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.conns[len(n.conns)-1].mute = true
}

// breakConn breaks the node's latest connection, as a network failure
// would: its reader fails, and the Client hears that it ended with an
// error.
func (n *psNode) breakConn() {
	c := n.conn()
	c.goneOnce.Do(func() { close(c.gone) })
	_ = c.raw.Close()
}

// conn returns the node's latest connection; nil before the first.
func (n *psNode) conn() *psConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.conns) == 0 {
		return nil
	}
	return n.conns[len(n.conns)-1]
}

// closedByClient reports whether the Client closed the node's i-th
// connection (from 0).
func (n *psNode) closedByClient(i int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conns[i].closed
}

// sent counts the commands sent on the latest connection that begin with
// prefix.
func (n *psNode) sent(prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sentLocked(prefix)
}

// handled counts the events of a kind on ch that the Client handled on
// the latest connection.
func (n *psNode) handled(kind pool.PubSubKind, ch string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.handledLocked(kind, ch)
}

// dials returns how many connections the node was asked for.
func (n *psNode) dials() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.conns)
}

// waitFor waits until cond, called under n.mu, holds for n: it is called
// again whenever the log grows. It fails the test after 10 seconds (a
// bound for a broken test, which a working one never comes near).
func (n *psNode) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	failsafe := time.NewTimer(10 * time.Second)
	defer failsafe.Stop()
	for {
		ok, changed := n.check(cond)
		if ok {
			return
		}
		select {
		case <-changed:
		case <-failsafe.C:
			t.Fatalf("%s: waited 10s for %s", n.addr, what)
		}
	}
}

// check calls cond under n.mu, and returns the channel that is closed
// when the log next grows.
func (n *psNode) check(cond func() bool) (bool, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return cond(), n.changed
}

// Conditions for waitFor, on the node's latest connection (called under
// n.mu).

// dialledLocked reports whether the node was asked for dials
// connections at least.
func (n *psNode) dialledLocked(dials int) bool { return len(n.conns) >= dials }

// handledLocked counts the events of a kind on ch (any channel for "")
// that the Client handled on the latest connection.
func (n *psNode) handledLocked(kind pool.PubSubKind, ch string) int {
	if len(n.conns) == 0 {
		return 0
	}
	return n.conns[len(n.conns)-1].handledLocked(kind, ch)
}

// arrivedLocked counts the events of a kind that the node sent on its
// latest connection, handled by the Client or not.
func (n *psNode) arrivedLocked(kind pool.PubSubKind) int {
	if len(n.conns) == 0 {
		return 0
	}
	count := 0
	for _, ev := range n.conns[len(n.conns)-1].arrived {
		if ev.Kind == kind {
			count++
		}
	}
	return count
}

// handledLocked counts the events of a kind on ch (any channel for "")
// that the Client handled on c.
func (c *psConn) handledLocked(kind pool.PubSubKind, ch string) int {
	count := 0
	for _, ev := range c.handled {
		if ev.Kind == kind && (ch == "" || ev.Channel == ch) {
			count++
		}
	}
	return count
}

// sentLocked counts the commands sent on the latest connection that
// begin with prefix ("PING", "SUBSCRIBE ch"...).
func (n *psNode) sentLocked(prefix string) int {
	if len(n.conns) == 0 {
		return 0
	}
	return n.conns[len(n.conns)-1].sentLocked(prefix)
}

// sentLocked counts the commands sent on c that begin with prefix.
func (c *psConn) sentLocked(prefix string) int {
	count := 0
	for _, cmd := range c.sent {
		if strings.HasPrefix(cmd, prefix) {
			count++
		}
	}
	return count
}

// waitAcked waits until the Client handled the acknowledgements of both
// of key's channels, for the Client whose id is cid, on the node's latest
// connection.
func (n *psNode) waitAcked(t *testing.T, cid, key string) {
	t.Helper()
	n.waitFor(t, "both of "+key+"'s channels acknowledged", func() bool {
		return n.handledLocked(pool.PubSubSubscribed, wire.ReleaseChannel(key)) > 0 &&
			n.handledLocked(pool.PubSubSubscribed, wire.HandoffChannel(cid, key)) > 0
	})
}

// waitEnded waits until the Client handled the end of the node's latest
// connection.
func (n *psNode) waitEnded(t *testing.T) {
	t.Helper()
	n.waitFor(t, "the connection's end", func() bool { return n.handledLocked(pool.PubSubClosed, "") > 0 })
}
