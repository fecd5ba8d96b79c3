package pool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// defaultCommandTimeout bounds a command on a pool from FromRedigo when the
// caller's context has no deadline.
const defaultCommandTimeout = 1 * time.Second

// FromRedigo wraps a redigo pool the caller already has: each call takes a
// connection from p within the caller's deadline (1s without one),
// connecting included. addr names the node in errors and must differ
// between the nodes of one lock client. A nil p gives a nil Pool. The
// result implements Subscriber and Reconnector, and io.Closer: its Close
// closes p and makes later calls fail with ErrClosed. FromRedigo
// takes p over (it replaces p.DialContext): call it before p is used and
// leave p's dial functions alone afterwards. Use New for nodes that are
// not trusted. See docs/operations.md.
func FromRedigo(p *redis.Pool, addr string) Pool {
	if p == nil {
		return nil // so that redlock.New reports the nil pool
	}
	r := &redigoPool{p: p, addr: addr, dial: boundedDial(p.DialContext, p.Dial)}
	if r.dial != nil {
		p.DialContext = r.dialCounted
	}
	return r
}

// redigoPool is the Pool of FromRedigo. It also implements Subscriber and
// Reconnector.
type redigoPool struct {
	p      *redis.Pool
	addr   string
	dial   func(ctx context.Context) (redis.Conn, error) // nil: p dials with neither
	gen    atomic.Uint64
	closed atomic.Bool
}

var (
	_ Subscriber  = (*redigoPool)(nil)
	_ Reconnector = (*redigoPool)(nil)
)

func (r *redigoPool) Addr() string { return r.addr }

// Generation returns how many connections the pool has dialled, not
// counting DialPubSub's.
func (r *redigoPool) Generation() uint64 { return r.gen.Load() }

// dialCounted is the pool's DialContext: a new connection is counted
// before the pool hands it out.
func (r *redigoPool) dialCounted(ctx context.Context) (redis.Conn, error) {
	c, err := r.dial(ctx)
	if err == nil {
		r.gen.Add(1)
	}
	return c, err
}

func (r *redigoPool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	return r.call(ctx, nil, cmd, args)
}

func (r *redigoPool) Eval(ctx context.Context, script *Script, keysAndArgs ...any) (any, error) {
	return r.call(ctx, script, "", keysAndArgs)
}

func (r *redigoPool) call(ctx context.Context, script *Script, cmd string, args []any) (reply any, err error) {
	op := opName(script, cmd)
	if r.closed.Load() {
		return nil, wrapErr(r.addr, op, ErrClosed, "")
	}
	timeout, err := timeoutFor(ctx, defaultCommandTimeout)
	if err != nil {
		return nil, wrapErr(r.addr, op, err, "")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := r.p.GetContext(ctx)
	if err != nil {
		return nil, wrapErr(r.addr, "dial", err, "")
	}
	defer func() {
		if v := recover(); v != nil {
			// redigo panics on a reply whose declared length it cannot
			// allocate. Break the connection so that the pool does not
			// keep it: redigo marks a connection failed, and closes it,
			// when asked to run a command past its deadline.
			expired, cancel := context.WithDeadline(context.Background(), time.Time{}.Add(1))
			cancel()
			_, _ = redis.DoContext(c, expired, "PING")
			reply, err = nil, wrapErr(r.addr, op, fmt.Errorf("%w: redigo panicked reading it: %v", errBadReply, v), "")
		}
		c.Close()
	}()
	if timeout, err = timeoutFor(ctx, 0); err != nil {
		return nil, wrapErr(r.addr, op, err, "")
	}
	reply, err = run(c, timeout, script, cmd, args)
	return reply, wrapErr(r.addr, op, err, "")
}

// DialPubSub opens a connection of its own for SUBSCRIBE with the redigo
// pool's DialContext (or Dial) function, outside the pool: it is held for
// as long as anyone waits, and must be closable while it is read. What
// arrives goes to on. It returns when ctx ends even if the dial function
// ignores ctx. A panic of redigo while reading the connection ends it
// with an error.
func (r *redigoPool) DialPubSub(ctx context.Context, on func(PubSubEvent)) (PubSubConn, error) {
	if r.closed.Load() {
		return nil, wrapErr(r.addr, "dial", ErrClosed, "")
	}
	if r.dial == nil {
		return nil, wrapErr(r.addr, "dial", errors.New("the redigo pool has neither Dial nor DialContext"), "")
	}
	c, err := r.dial(ctx)
	if err != nil {
		return nil, wrapErr(r.addr, "dial", err, "")
	}
	return startPubSub(r.addr, "", &guardedConn{Conn: c}, on), nil
}

func (r *redigoPool) Close() error {
	r.closed.Store(true)
	return r.p.Close()
}

// boundedDial returns a dial function that returns when ctx ends, whether
// or not dial (or dialCtx) heeds it; a connection that arrives later is
// closed. It returns nil when both are nil.
func boundedDial(dialCtx func(context.Context) (redis.Conn, error), dial func() (redis.Conn, error)) func(context.Context) (redis.Conn, error) {
	if dialCtx == nil && dial == nil {
		return nil
	}
	if dialCtx == nil {
		dialCtx = func(context.Context) (redis.Conn, error) { return dial() }
	}
	type result struct {
		c   redis.Conn
		err error
	}
	return func(ctx context.Context) (redis.Conn, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		done := make(chan result, 1)
		go func() {
			c, err := dialCtx(ctx)
			done <- result{c, err}
		}()
		select {
		case res := <-done:
			return res.c, res.err
		case <-ctx.Done():
			go func() {
				if res := <-done; res.c != nil {
					_ = res.c.Close()
				}
			}()
			return nil, fmt.Errorf("gave up waiting for the dial function: %w", ctx.Err())
		}
	}
}

// guardedConn is a pub/sub connection of DialPubSub: a panic of redigo
// while reading a reply (a declared length it cannot allocate) closes the
// connection and becomes the read's error. DoContext and ReceiveContext
// are not guarded: redigo runs them in goroutines of its own.
type guardedConn struct {
	redis.Conn
}

var _ redis.ConnWithTimeout = (*guardedConn)(nil)

func (g *guardedConn) Do(cmd string, args ...any) (reply any, err error) {
	defer g.recoverRead(&reply, &err)
	return g.Conn.Do(cmd, args...)
}

func (g *guardedConn) Receive() (reply any, err error) {
	defer g.recoverRead(&reply, &err)
	return g.Conn.Receive()
}

func (g *guardedConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (reply any, err error) {
	defer g.recoverRead(&reply, &err)
	return redis.DoWithTimeout(g.Conn, timeout, cmd, args...)
}

func (g *guardedConn) ReceiveWithTimeout(timeout time.Duration) (reply any, err error) {
	defer g.recoverRead(&reply, &err)
	return redis.ReceiveWithTimeout(g.Conn, timeout)
}

func (g *guardedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(g.Conn, ctx, cmd, args...)
}

func (g *guardedConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(g.Conn, ctx)
}

// recoverRead turns a panic of the read it is deferred by into its error.
func (g *guardedConn) recoverRead(reply *any, err *error) {
	if v := recover(); v != nil {
		_ = g.Conn.Close()
		*reply, *err = nil, fmt.Errorf("%w: redigo panicked reading it: %v", errBadReply, v)
	}
}
