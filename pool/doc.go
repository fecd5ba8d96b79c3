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
// # Broken and hostile nodes
//
// redigo trusts the lengths a node declares: a reply header such as
// "$1125899906842624" makes it allocate that much, or panic, which ends the
// process. A Node checks every reply as it is read, before redigo sees it:
// a bulk string may declare at most 64 MiB, the arrays being read at most
// 2^20 elements between them, nested at most 32 deep, and a line may be at
// most 1 MiB long. A reply beyond those limits drops the connection, and
// the calls on it fail with a *NodeError. DialPubSub's connections are
// checked the same way.
//
// The pools of FromRedigo read through connections that the caller's
// redigo pool dials, which cannot be checked. A panic of redigo during a
// call becomes the call's *NodeError and the connection is closed, and
// DialPubSub's connections turn such a panic into a read error; but a
// declared length that can be allocated (up to the memory of the machine)
// is allocated. Use New for nodes that are not trusted.
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
