// Package async is the lock coordinator's way to send a command to a node
// without a goroutine per call, and with a promise about order that a
// Pool's Do and Eval do not make.
//
// It is internal so that only this module can implement it: the promise
// cannot be checked, and a pool that broke it would break locks silently.
// pool.New's *pool.Node has a Starter[*pool.Script] that is also a
// TxStarter, kept out of its exported methods: package pool registers it
// (RegisterNodeStarter), and package redlock finds it with StarterOf,
// once per pool, falling back to Do and Eval, one goroutine per call, for
// a pool without one.
//
// Starter is generic in the script type only because package pool, which
// defines Script, imports this package; S is always *pool.Script.
package async

// Receiver gets the reply of a call begun with Starter.
type Receiver interface {
	// Receive is called exactly once per call with the reply, or with a
	// *pool.NodeError. It must not block.
	Receive(reply any, err error)
}

// Starter sends commands without a goroutine per call. Commands started
// on one key (the first argument of Start, the first key of StartEval)
// reach the node in the order of their Start calls while their connection
// holds.
type Starter[S any] interface {
	// Start queues a command and returns at once. The reply goes to
	// rcv.Receive, called from another goroutine, or before Start returns
	// when the command cannot be queued (closed pool, full queue). The
	// reply comes within the pool's I/O timeout.
	Start(rcv Receiver, cmd string, args ...any)
	// StartEval is Start for a script: EVALSHA, then EVAL when the node
	// answers NOSCRIPT.
	StartEval(rcv Receiver, script S, keysAndArgs ...any)
}

// TxStarter is implemented by starters that can also send a transaction:
// MULTI, the commands, EXEC, written together on one connection, so that
// the node runs them all or none, with no other client's command between
// them. The transaction reaches the node in order with the commands
// started on key (Starter's promise).
type TxStarter interface {
	// StartTx queues the transaction of cmds (each a command's name, a
	// string, then its arguments) and returns at once. The reply (EXEC's
	// array, one reply per command) goes to rcv.Receive as Start's does;
	// when the node refuses a command as it is queued (no permission, a
	// wrong number of arguments), nothing runs and the reply is that
	// refusal.
	StartTx(rcv Receiver, key string, cmds [][]any)
}

// Connecting is implemented by starters that can tell when their node's
// first connection has yet to be opened, with no attempt failed: a command
// started then waits for the dial. The lock client waits for such a node
// past its node timeout, until the dial has ended and the node has had a
// node timeout to answer: opening a connection (a TCP and TLS handshake,
// AUTH) is not the node answering late. A connection opened again after
// one broke gets no such wait: the node gave a sign of trouble.
type Connecting interface {
	// Connecting reports whether a connection of the node has yet to be
	// opened for the first time, and no attempt has failed.
	Connecting() bool
}

// OneConn is implemented by starters whose node sends every command on
// one connection at a time (pool.New's nodes, unless WithConns asks for
// more): two commands started together go out, and come back, on the
// same connection. The lock client sends the first acquisition to such a
// node as it is, beside the restart check; to a pool that may open a
// connection per concurrent command, it asks the acquisition with the
// identity of the dataset that makes it, as the check may say nothing of
// the acquisition's connection.
type OneConn interface {
	// OneConnection reports whether the node uses one connection.
	OneConnection() bool
}

// nodeStarter is the func(any) Starter[S] that package pool registered
// (with S = *pool.Script), or nil.
var nodeStarter any

// RegisterNodeStarter sets how StarterOf finds the Starter of a node of
// package pool: f returns it for such a node, and nil for any other value.
// Package pool calls it from an init function, before any StarterOf.
func RegisterNodeStarter[S any](f func(pool any) Starter[S]) { nodeStarter = f }

// StarterOf returns the Starter of pool: the one registered for it
// (RegisterNodeStarter), else pool itself when it implements Starter[S],
// else nil. A Starter that can also send transactions is a TxStarter.
// The lock client calls it once per pool, not per command.
func StarterOf[S any](pool any) Starter[S] {
	if f, ok := nodeStarter.(func(any) Starter[S]); ok {
		if s := f(pool); s != nil {
			return s
		}
	}
	s, _ := pool.(Starter[S])
	return s
}
