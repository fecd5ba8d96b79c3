package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// DefaultCommandTimeout bounds a command on a pool from FromRedigo when the
// caller's context has no deadline.
const DefaultCommandTimeout = 1 * time.Second

// FromRedigo wraps a redigo pool the caller already has; addr names the node
// in errors and must differ between the nodes of one lock client. Each
// call takes a connection from p with p.GetContext and returns it after the
// reply. Commands are bounded by the caller's deadline, or by
// DefaultCommandTimeout when there is none, even when p's connections were
// dialled without timeouts; connecting is bounded by the deadline only when
// p dials with DialContext (redigo's Dial takes no context). Close closes p.
// A nil p gives a nil Pool. The pool implements Subscriber: a waiting
// lock client keeps one connection per node for SUBSCRIBE, dialled with
// p's DialContext or Dial outside the pool (it is not counted in
// MaxActive).
func FromRedigo(p *redis.Pool, addr string) Pool {
	if p == nil {
		return nil // so that redlock.New reports the nil pool
	}
	return &redigoPool{p: p, addr: addr}
}

type redigoPool struct {
	p      *redis.Pool
	addr   string
	closed atomic.Bool
}

func (r *redigoPool) Addr() string { return r.addr }

func (r *redigoPool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	return r.call(ctx, nil, cmd, args)
}

func (r *redigoPool) Eval(ctx context.Context, script *redis.Script, keysAndArgs ...any) (any, error) {
	return r.call(ctx, script, "", keysAndArgs)
}

func (r *redigoPool) call(ctx context.Context, script *redis.Script, cmd string, args []any) (any, error) {
	op := opName(script, cmd)
	if r.closed.Load() {
		return nil, wrapErr(r.addr, op, ErrClosed, "")
	}
	timeout, err := timeoutFor(ctx, DefaultCommandTimeout)
	if err != nil {
		return nil, wrapErr(r.addr, op, err, "")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := r.p.GetContext(ctx)
	if err != nil {
		return nil, wrapErr(r.addr, "dial", err, "")
	}
	defer c.Close()
	if timeout, err = timeoutFor(ctx, 0); err != nil {
		return nil, wrapErr(r.addr, op, err, "")
	}
	reply, err := run(c, timeout, script, cmd, args)
	return reply, wrapErr(r.addr, op, err, "")
}

// DialPubSub opens a connection of its own for SUBSCRIBE with the redigo
// pool's DialContext (or Dial) function, outside the pool: it is held for
// as long as anyone waits, and must be closable while it is read.
func (r *redigoPool) DialPubSub(ctx context.Context) (redis.Conn, error) {
	if r.closed.Load() {
		return nil, wrapErr(r.addr, "dial", ErrClosed, "")
	}
	var c redis.Conn
	var err error
	switch {
	case r.p.DialContext != nil:
		c, err = r.p.DialContext(ctx)
	case r.p.Dial != nil:
		c, err = r.p.Dial()
	default:
		err = errors.New("the redigo pool has neither Dial nor DialContext")
	}
	if err != nil {
		return nil, wrapErr(r.addr, "dial", err, "")
	}
	return c, nil
}

func (r *redigoPool) Close() error {
	r.closed.Store(true)
	return r.p.Close()
}
