// Package pool is one Redis node as the lock coordinator sees it: an
// address, and a way to run a command or a Lua script within a deadline.
//
// New dials the node itself, with safe defaults (see the options), and
// pipelines: commands from concurrent callers are queued, written in
// batches on one connection, and their replies handed back in order; it
// also implements Starter, which lets the coordinator run a round without
// a goroutine per node. FromRedigo wraps a *redis.Pool that the caller
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
// READONLY, NOAUTH...) wrap a redis.Error: NodeError.Replied tells "the
// node answered no" from "the node did not answer". Calls on a closed pool
// fail with ErrClosed.
//
// # Scripts
//
// Eval sends EVALSHA and falls back to EVAL when the node answers NOSCRIPT
// (after a restart or SCRIPT FLUSH); NOSCRIPT never reaches the caller.
//
// # Broken and hostile nodes
//
// redigo trusts the lengths a node declares, and may allocate terabytes or
// panic on a hostile reply. The pools of New check every reply before
// redigo reads it (bulk strings up to 64 MiB, 2^20 pending array elements,
// nesting 32 deep, lines up to 1 MiB), on DialPubSub's connections too: a
// reply beyond those limits drops the connection and fails its calls with
// a *NodeError. FromRedigo's pools cannot check what the caller's redigo
// pool reads; they turn a panic of redigo into the call's error, but
// allocate any length the machine can. Use New for nodes that are not
// trusted. See docs/operations.md.
package pool
