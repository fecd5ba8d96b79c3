package pool

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/async"
)

// Node is the Pool of New: one Redis node that it dials itself, with
// pipelining. Commands from concurrent callers are queued, written
// together on one connection (or a few, WithConns) and their replies
// handed back in order. Beside Pool it implements Subscriber and
// Reconnector, and has Close. A Node is safe for concurrent use; make it
// with New (the zero value is not usable). docs/operations.md tells what
// happens on timeouts, lost connections and a full queue.
type Node struct {
	addr   string
	cfg    config
	secret string
	opts   []redis.DialOption
	pubOpt []redis.DialOption // for DialPubSub: deadlines applied exactly
	pipes  []*pipe
	seed   maphash.Seed
	gen    atomic.Uint64 // connections opened for commands
	reqs   sync.Pool     // recycled requests (getRequest)
	closed atomic.Bool
	once   sync.Once
}

var (
	_ Pool                   = (*Node)(nil)
	_ Subscriber             = (*Node)(nil)
	_ Reconnector            = (*Node)(nil)
	_ ConnReporter           = (*Node)(nil)
	_ async.Starter[*Script] = nodeStarter{}
	_ async.TxStarter        = nodeStarter{}
	_ async.OneConn          = nodeStarter{}
	_ async.Connecting       = nodeStarter{}
)

func init() { async.RegisterNodeStarter(starterOf) }

// starterOf returns the starter of p when p is a *Node, else nil: how
// async.StarterOf finds a Node's starter for package redlock.
func starterOf(p any) async.Starter[*Script] {
	if n, ok := p.(*Node); ok && n != nil {
		return nodeStarter{n}
	}
	return nil
}

// New returns a Node for the Redis node at addr ("host:port") that
// pipelines the commands of concurrent callers on one connection. It does
// not connect until the first call, so a node that is down at start-up
// does not stop the caller from building its lock client. It fails when
// addr is not host:port or an option is out of range, and then returns a
// nil *Node: check err before using the Node as a Pool. Close it when
// done. See docs/operations.md.
func New(addr string, opts ...Option) (*Node, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return nil, fmt.Errorf("redlock/pool: address %q is not host:port", addr)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := newDialer(&cfg, cfg.tlsConfig(host))
	base := cfg.dialOptions()
	dialOpts := append(base[:len(base):len(base)], redis.DialContextFunc(d.dialFunc(true)))
	pubOpt := append(base[:len(base):len(base)], redis.DialContextFunc(d.dialFunc(false)))
	n := &Node{addr: addr, cfg: cfg, secret: cfg.password, opts: dialOpts, pubOpt: pubOpt, seed: maphash.MakeSeed()}
	n.pipes = make([]*pipe, cfg.conns)
	for i := range n.pipes {
		n.pipes[i] = newPipe(n)
	}
	return n, nil
}

// dial opens one connection, bounded by ctx and the dial timeout.
func (n *Node) dial(ctx context.Context) (redis.Conn, error) {
	return redis.DialContext(ctx, "tcp", n.addr, n.opts...)
}

// DialPubSub opens a connection of its own to the node, with the node's
// dial options (timeouts, credentials, database, TLS, client name), for
// SUBSCRIBE; what arrives goes to on. It implements Subscriber. Connecting
// is bounded by ctx and the dial timeout. What the node sends on it is
// checked like on the node's own connections: a malformed or oversized
// reply ends the connection with an error instead of reaching redigo. It
// fails with ErrClosed after Close.
func (n *Node) DialPubSub(ctx context.Context, on func(PubSubEvent)) (PubSubConn, error) {
	if n.closed.Load() {
		return nil, wrapErr(n.addr, "dial", ErrClosed, "")
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.dialTimeout)
	defer cancel()
	c, err := redis.DialContext(ctx, "tcp", n.addr, n.pubOpt...)
	if err != nil {
		return nil, wrapErr(n.addr, "dial", err, n.secret)
	}
	return startPubSub(n.addr, n.secret, c, on), nil
}

// Generation returns how many connections the node has opened for
// commands; it implements Reconnector. It grows when a connection is opened
// (after a failure, a restart of the node, or on first use), before any
// command is written on it. DialPubSub's connections are not counted.
func (n *Node) Generation() uint64 { return n.gen.Load() }

// ConnErr returns nil while the node's connections are up (or not opened
// yet), and otherwise says why one is not: it is being dialled, and, from
// the first failed attempt until a dial succeeds, how the latest attempt
// failed (a TLS handshake the node did not answer, a refused connection,
// a wrong password). The error has no address: it is for the error of a
// command that got no reply. It implements ConnReporter.
func (n *Node) ConnErr() error {
	for _, p := range n.pipes {
		if err := p.connState(); err != nil {
			return err
		}
	}
	return nil
}

// Addr returns the node's address as given to New.
func (n *Node) Addr() string { return n.addr }

// Do runs one command, bounded by ctx's deadline and the I/O timeout.
// Commands whose first argument is the same string (the key) always share a
// connection.
func (n *Node) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	reply, err := n.call(ctx, n.newRequest(cmd, args))
	return reply, n.nodeErr(cmd, err)
}

// Eval runs script with EVALSHA, and with EVAL when the node answers
// NOSCRIPT, bounded by ctx's deadline and the I/O timeout.
func (n *Node) Eval(ctx context.Context, s *Script, keysAndArgs ...any) (any, error) {
	cmd := "EVALSHA"
	reply, err := n.call(ctx, n.newScriptRequest(s, keysAndArgs, false))
	if isNoScript(err) {
		cmd = "EVAL"
		reply, err = n.call(ctx, n.newScriptRequest(s, keysAndArgs, true))
	}
	return reply, n.nodeErr(cmd, err)
}

// call sends req and waits for its reply, for as long as ctx allows and
// no longer than the I/O timeout. req is recycled.
func (n *Node) call(ctx context.Context, req *request) (any, error) {
	err := ctx.Err()
	if n.closed.Load() {
		err = ErrClosed
	}
	if err != nil {
		n.putRequest(req)
		return nil, err
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > n.cfg.ioTimeout {
		req.bound(n.cfg.ioTimeout)
	}
	return n.pipeFor(req).call(ctx, req)
}

func (n *Node) pipeFor(req *request) *pipe {
	if len(n.pipes) == 1 {
		return n.pipes[0]
	}
	if req.tx != nil {
		return n.pipes[n.keySlot(req.txKey)]
	}
	return n.pipes[n.slot(req.cmd, req.args)]
}

// nodeStarter is how package redlock sends a round to a Node without a
// goroutine per node (async.Starter, async.TxStarter). It is a type of its
// own, reached through async.StarterOf, so that these methods, whose types
// are internal to this module, are not part of Node's API. It holds only
// a pointer: an interface holds it without an allocation.
type nodeStarter struct{ n *Node }

// Start queues a command; its reply, or a *NodeError, goes to rcv.
// Commands started on one key reach the node in the order of their Start
// calls.
func (s nodeStarter) Start(rcv async.Receiver, cmd string, args ...any) {
	req := s.n.newRequest(cmd, args)
	req.rcv = rcv
	s.n.startRequest(req)
}

// StartEval queues a script with EVALSHA (EVAL after NOSCRIPT); its reply,
// or a *NodeError, goes to rcv. It is Start for a script.
func (s nodeStarter) StartEval(rcv async.Receiver, sc *Script, keysAndArgs ...any) {
	req := s.n.newScriptRequest(sc, keysAndArgs, false)
	req.rcv = rcv
	s.n.startRequest(req)
}

// StartTx queues the transaction of cmds (MULTI, cmds, EXEC, in one
// write, on the connection of the commands on key); EXEC's reply, or a
// *NodeError, goes to rcv. A command the node refused as it was queued
// is the error, and none of cmds ran.
func (s nodeStarter) StartTx(rcv async.Receiver, key string, cmds [][]any) {
	req := s.n.getRequest()
	req.cmd, req.tx, req.txKey, req.rcv = "MULTI", cmds, key, rcv
	s.n.startRequest(req)
}

// OneConnection reports whether the node has a single connection slot
// (WithConns(1), the default): every command goes out on the same
// connection.
func (s nodeStarter) OneConnection() bool { return len(s.n.pipes) == 1 }

// Connecting reports whether a connection of the node has yet to be
// opened for the first time, with no attempt failed (async.Connecting).
func (s nodeStarter) Connecting() bool {
	for _, p := range s.n.pipes {
		if !p.opened.Load() && p.lastErr.Load() == nil {
			return true
		}
	}
	return false
}

// startRequest queues req on its connection, or fails it on a closed node.
func (n *Node) startRequest(req *request) {
	p := n.pipeFor(req)
	if n.closed.Load() {
		p.deliver(req, nil, ErrClosed)
		return
	}
	p.start(req)
}

// slot picks the connection for a command: by its key, so that commands on
// one key keep their order.
func (n *Node) slot(cmd string, args []any) int {
	keyArg := 0
	if cmd == "EVALSHA" || cmd == "EVAL" {
		keyArg = 2 // script, numkeys, key
	}
	if len(args) > keyArg {
		if key, ok := args[keyArg].(string); ok {
			return n.keySlot(key)
		}
	}
	return 0
}

// keySlot returns the connection slot of the commands on key.
func (n *Node) keySlot(key string) int {
	return int(maphash.String(n.seed, key) % uint64(len(n.pipes)))
}

// nodeErr tags err with the node and command; a password a lower layer may
// have quoted is removed.
func (n *Node) nodeErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*NodeError); ok {
		return err
	}
	return wrapErr(n.addr, strings.ToUpper(op), err, n.secret)
}

// Close stops the node's connections: calls in flight or queued fail with
// ErrClosed, and so do later calls. Close waits for the connection
// goroutines to exit.
func (n *Node) Close() error {
	n.once.Do(func() {
		n.closed.Store(true)
		for _, p := range n.pipes {
			p.close()
		}
	})
	return nil
}

// isNoScript reports the node's answer to EVALSHA for a script it does not
// have.
func isNoScript(err error) bool {
	if err == nil {
		return false // and no allocation on the hot path
	}
	var re ReplyError
	return errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT ")
}
