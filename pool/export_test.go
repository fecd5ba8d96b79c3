package pool

import (
	"time"

	"github.com/quorumlock/redlock/internal/async"
)

// Settings that are not options of New, for the tests of package pool_test.

// WithQueueSize sets how many requests may wait, per connection, to be
// written (defaultQueueSize).
func WithQueueSize(n int) Option { return func(c *config) { c.queueSize = n } }

// WithPingAfterIdle makes a connection that stayed idle at least d answer
// a PING before it carries commands again (defaultPingIdle); 0 never pings.
func WithPingAfterIdle(d time.Duration) Option { return func(c *config) { c.pingIdle = d } }

// Start, StartEval and StartTx let the tests call a Node's starter (the
// one package redlock finds with async.StarterOf) as if they were Node's
// methods.

func (n *Node) Start(rcv async.Receiver, cmd string, args ...any) {
	nodeStarter{n}.Start(rcv, cmd, args...)
}

func (n *Node) StartEval(rcv async.Receiver, s *Script, keysAndArgs ...any) {
	nodeStarter{n}.StartEval(rcv, s, keysAndArgs...)
}

func (n *Node) StartTx(rcv async.Receiver, key string, cmds [][]any) {
	nodeStarter{n}.StartTx(rcv, key, cmds)
}

// Connecting lets the tests call the starter's Connecting
// (async.Connecting).
func (n *Node) Connecting() bool { return nodeStarter{n}.Connecting() }
