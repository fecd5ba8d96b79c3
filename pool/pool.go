package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Pool is one Redis node: what the lock coordinator needs from it.
// Implementations are safe for concurrent use. The package doc says how
// to write one for another Redis client.
//
// Close is not part of Pool: a redlock Client never closes its pools,
// whoever made a pool does. New's *Node has Close; so do the values of
// FromRedigo and of the adapter modules, reached through io.Closer.
//
// Replies are Go values: int64 for integers, string or []byte for simple
// and bulk strings, []any for arrays, nil for a nil reply. An error reply
// is a ReplyError inside a *NodeError, also within an array.
type Pool interface {
	// Addr returns the node's address, the name it has in errors. Two pools
	// with the same address are the same node.
	Addr() string
	// Do runs one command. Errors are *NodeError values.
	Do(ctx context.Context, cmd string, args ...any) (any, error)
	// Eval runs a script with EVALSHA, and with EVAL when the node answers
	// NOSCRIPT. keysAndArgs are the script's keys, then its arguments
	// (Script.Split parts them). Errors are *NodeError values.
	Eval(ctx context.Context, script *Script, keysAndArgs ...any) (any, error)
}

// Subscriber is implemented by pools that can open a connection of their
// own for publish/subscribe, which the lock client uses to hear that a
// lock was released. The pools of New and FromRedigo implement it.
type Subscriber interface {
	// DialPubSub opens a new connection to the node that no other call
	// uses, authenticated and on the pool's database. What arrives on it
	// goes to on, from one goroutine, in order; the last call of on is a
	// PubSubClosed event, after a failure or after Close. Connecting is
	// bounded by ctx and the pool's dial timeout. Errors are *NodeError
	// values with Op "dial".
	DialPubSub(ctx context.Context, on func(PubSubEvent)) (PubSubConn, error)
}

// Reconnector is implemented by pools that can tell when they start using
// a new connection: Generation grows every time one is opened, before
// anything is sent on it. A node that restarts loses its connections, so
// a reply that came after a check made while Generation returned g, and
// was read while it still returns g, came from the node process that was
// checked. The pools of New and FromRedigo implement it; a wrapper of
// one should too, by calling the wrapped pool's Generation. A lock client
// checks the node of a pool without it again only after a call to the
// node failed without its answer (docs/operations.md).
type Reconnector interface{ Generation() uint64 }

// ConnReporter is implemented by pools that know when they are not
// connected to their node. ConnErr returns nil while they are, and
// otherwise an error that says why not: the node is being dialled, and
// how the latest attempt failed, if one did. A lock client adds it to the
// error of a node that gave no reply within the node timeout, so that a
// node that cannot be connected to (a TLS handshake that a plain node does
// not answer, for one) is named as such in every round. The pool of New
// implements it.
type ConnReporter interface{ ConnErr() error }

// ReplyError is an error reply of a node, such as "NOSCRIPT No matching
// script" or "NOPERM ...": the command reached Redis and Redis refused it.
type ReplyError string

// Error returns the node's reply.
func (e ReplyError) Error() string { return string(e) }

// ErrClosed is in the chain of every call on a closed pool (wrapped in a
// *NodeError), and of every call on a closed redlock Client.
var ErrClosed = errors.New("redlock: closed")

// NodeError is an error from one node: the node did not answer in time, the
// connection failed, or the node answered with an error reply.
type NodeError struct {
	Addr string // the node's address
	// Op is the command, e.g. "SET" or "EVALSHA"; "dial" when the command
	// was not sent because the node could not be connected to (or was
	// still being connected to when the caller's context ended), and
	// "queue" when the node's request queue was full (never sent either).
	Op  string
	Err error // the cause; a ReplyError when the node replied with an error
}

// Error names the node, the command and the cause.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock/pool: node %s: %s: %v", e.Addr, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// Replied reports whether the node answered with an error reply (the
// command reached Redis and Redis refused it).
func (e *NodeError) Replied() bool {
	var re ReplyError
	return errors.As(e.Err, &re)
}

// wrapErr tags err with the node and command, hiding any password that a
// lower layer may have quoted.
func wrapErr(addr, op string, err error, secret string) error {
	if err == nil {
		return nil
	}
	_, err = neutral(nil, err)
	var re ReplyError
	if errors.As(err, &re) && strings.HasPrefix(string(re), "ERR Protocol error: unauthenticated") {
		// Redis answers a long command from an unauthenticated client
		// with a protocol error, not NOAUTH, and closes the connection.
		err = noAuthError{re}
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		err = redactedError{msg: strings.ReplaceAll(err.Error(), secret, "xxxxx"), cause: err}
	}
	return &NodeError{Addr: addr, Op: op, Err: err}
}

// noAuthError says what a protocol error about an unauthenticated
// command means.
type noAuthError struct{ cause ReplyError }

func (e noAuthError) Error() string {
	return "the node requires authentication (NOAUTH; it answered: " + string(e.cause) + ")"
}
func (e noAuthError) Unwrap() error { return e.cause }

// redactedError keeps the cause's identity for errors.Is while its text
// has the secret removed.
type redactedError struct {
	msg   string
	cause error
}

func (r redactedError) Error() string { return r.msg }
func (r redactedError) Unwrap() error { return r.cause }

// timeoutFor returns how long a command may take: until ctx's deadline, but
// never longer than max (when max is positive).
func timeoutFor(ctx context.Context, max time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d := max
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return 0, context.DeadlineExceeded
		}
		if d <= 0 || left < d {
			d = left
		}
	}
	return d, nil
}

// run executes a command or a script on a redigo connection within
// timeout: EVALSHA, then EVAL when the node answers NOSCRIPT, within the
// same deadline.
func run(c redis.Conn, timeout time.Duration, script *Script, cmd string, args []any) (any, error) {
	if script == nil {
		return neutral(redis.DoWithTimeout(c, timeout, cmd, args...))
	}
	deadline := time.Now().Add(timeout)
	all := append(script.evalsha[:len(script.evalsha):len(script.evalsha)], args...)
	reply, err := neutral(redis.DoWithTimeout(c, timeout, "EVALSHA", all...))
	if !isNoScript(err) {
		return reply, err
	}
	left := time.Until(deadline)
	if left <= 0 {
		return nil, context.DeadlineExceeded
	}
	copy(all, script.eval)
	return neutral(redis.DoWithTimeout(c, left, "EVAL", all...))
}

// neutral turns redigo's error replies into ReplyError values: the
// error, and the elements of array replies (at any depth). It changes
// arrays in place and allocates nothing.
func neutral(reply any, err error) (any, error) {
	if re, ok := err.(redis.Error); ok {
		err = ReplyError(re)
	}
	if vs, ok := reply.([]any); ok {
		neutralArray(vs)
	}
	return reply, err
}

func neutralArray(vs []any) {
	for i, v := range vs {
		switch v := v.(type) {
		case redis.Error:
			vs[i] = ReplyError(v)
		case []any:
			neutralArray(v)
		}
	}
}

func opName(script *Script, cmd string) string {
	if script != nil {
		return "EVALSHA"
	}
	return strings.ToUpper(cmd)
}
