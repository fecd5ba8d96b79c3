// Package pool is one Redis node as the lock coordinator sees it: an
// address, and a way to run a command or a Lua script within a deadline.
//
// # Deadlines
//
// Every call is bounded. The deadline of the context passed to Do or Eval
// bounds the command, and when the context has none (or a later one) the
// node's read timeout does. A context that is cancelled before the command
// is sent stops it; a command already on the wire runs to its deadline, so
// that its reply is never mistaken for another's.
//
// # Errors
//
// Every error from a node is a *NodeError naming the node's address and the
// command. It never contains a password. Replies that Redis itself marks as
// errors (WRONGTYPE, READONLY, OOM, NOAUTH...) wrap a redis.Error, so callers
// can tell "the node answered no" from "the node did not answer".
//
// # Scripts
//
// Scripts are redigo *redis.Script values: Eval sends EVALSHA and falls back
// to EVAL when the node answers NOSCRIPT (after a restart or SCRIPT FLUSH).
// NOSCRIPT is never returned to the caller as the script's answer.
//
// # Implementations
//
// New returns a Node: it dials the node itself, with safe defaults (see the
// options), and pipelines: commands from concurrent callers are queued and
// written in batches on one connection, and their replies are handed back
// in order. It also implements Starter, which lets the lock coordinator
// run a round without a goroutine per node. FromRedigo wraps a *redis.Pool
// that the caller already has: one connection per call.
package pool
