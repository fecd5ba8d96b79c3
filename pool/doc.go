// Package pool is one Redis node as the lock coordinator sees it: an
// address, and a way to run a command or a Lua script within a deadline.
//
// New returns a *Node that dials the node itself, with safe defaults (see
// the options), and pipelines: commands from concurrent callers are
// queued, written in batches on one connection, and their replies handed
// back in order. It also lets the lock coordinator run a round without a
// goroutine per node, through a path internal to this module, not part of
// Node's methods: no other pool can offer it, since the order it promises
// cannot be checked. FromRedigo wraps a *redis.Pool that the caller
// already has: one connection per call.
//
// # Deadlines
//
// Every call is bounded: by the deadline of its context, and when the
// context has none (or a later one) by the pool's I/O timeout. A context
// cancelled before the command is sent stops it; a command already on the
// wire runs to its deadline, so that its reply is never mistaken for
// another's.
//
// # Errors
//
// Every error from a node is a *NodeError naming the node's address and the
// command, never a password. Replies that Redis marks as errors (WRONGTYPE,
// READONLY, NOAUTH...) wrap a ReplyError: NodeError.Replied tells "the
// node answered no" from "the node did not answer". Calls on a closed pool
// fail with ErrClosed.
//
// # Scripts
//
// Eval sends EVALSHA and falls back to EVAL when the node answers NOSCRIPT
// (after a restart or SCRIPT FLUSH); NOSCRIPT never reaches the caller.
//
// # Writing a Pool for another client
//
// Any Redis client can carry a node: implement Pool (and Subscriber, for
// waiting without polling; Reconnector, for restart safety without a check
// per round). The lock client runs each call on such a pool in a
// goroutine of its own, and never closes it: give it a Close method for
// its owner if it holds anything. The modules pool/goredis and
// pool/rueidispool are examples. The contract:
//
//   - Addr names the node and differs between the nodes of one lock
//     client; it appears in every error.
//   - Every call returns within the context's deadline, and within a
//     bound of the pool's own when the context has none: a lock's validity
//     is counted while it waits.
//   - Replies are int64, string or []byte, []any and nil, as the Pool doc
//     says; an error reply is a ReplyError, inside arrays too.
//   - Errors are *NodeError values (Addr, the command as Op, the cause);
//     their text never holds a password.
//   - Eval sends EVALSHA with Script.Hash and, when the node answers
//     NOSCRIPT, EVAL with Script.Source, within the same deadline; the
//     caller never sees NOSCRIPT. Script.Split gives the keys and
//     arguments.
//   - DialPubSub opens a connection no other call uses, and hands its
//     events to the callback from one goroutine, in order, ending with
//     PubSubClosed; it must not reconnect by itself (the caller notices
//     the end and dials again, so that it knows which subscriptions the
//     node confirmed).
//
// # Broken and hostile nodes
//
// redigo trusts the lengths a node declares, and may allocate terabytes or
// panic on a hostile reply. The pools of New check every reply before
// redigo reads it (bulk strings up to 64 MiB, and those over 1 MiB up to
// 64 MiB between all the node's connections at once; 2^20 pending array
// elements, nesting 32 deep, lines up to 1 MiB), on DialPubSub's
// connections too: a reply beyond those limits drops the connection and
// fails its calls with a *NodeError. FromRedigo's pools cannot check what the caller's redigo
// pool reads; they turn a panic of redigo into the call's error, but
// allocate any length the machine can. Use New for nodes that are not
// trusted. See docs/operations.md.
package pool
