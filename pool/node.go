package pool

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Node is a Pool that dials its Redis node itself. Make one with New.
type Node struct {
	addr   string
	cfg    config
	p      *redis.Pool
	closed atomic.Bool
}

var _ Pool = (*Node)(nil)

// New returns a pool for the Redis node at addr ("host:port"). It does not
// connect until the first call, so a node that is down at start-up does not
// stop the caller from building its lock client. It returns an error when
// addr is not host:port or an option is out of range.
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
	n := &Node{addr: addr, cfg: cfg}
	dialOpts := []redis.DialOption{
		redis.DialConnectTimeout(cfg.dialTimeout),
		redis.DialReadTimeout(cfg.readTimeout),
		redis.DialWriteTimeout(cfg.writeTimeout),
		redis.DialDatabase(cfg.db),
	}
	if cfg.password != "" {
		dialOpts = append(dialOpts, redis.DialPassword(cfg.password))
	}
	if cfg.username != "" {
		dialOpts = append(dialOpts, redis.DialUsername(cfg.username))
	}
	if cfg.clientName != "" {
		dialOpts = append(dialOpts, redis.DialClientName(cfg.clientName))
	}
	if cfg.tls != nil {
		tc := cfg.tls.Clone()
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		dialOpts = append(dialOpts, redis.DialUseTLS(true), redis.DialTLSConfig(tc))
	}
	n.p = &redis.Pool{
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			// The dial is bounded by both the caller's deadline and the
			// connect timeout; the handshake commands by the read timeout.
			ctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
			defer cancel()
			return redis.DialContext(ctx, "tcp", addr, dialOpts...)
		},
		MaxIdle:     cfg.maxIdle,
		MaxActive:   cfg.maxActive,
		IdleTimeout: cfg.idleTimeout,
		Wait:        cfg.maxActive > 0,
	}
	if cfg.pingIdle > 0 {
		n.p.TestOnBorrow = func(c redis.Conn, idleSince time.Time) error {
			if time.Since(idleSince) < cfg.pingIdle {
				return nil
			}
			_, err := redis.DoWithTimeout(c, cfg.readTimeout, "PING")
			return err
		}
	}
	return n, nil
}

// Addr returns the node's address as given to New.
func (n *Node) Addr() string { return n.addr }

// Do runs one command, bounded by ctx's deadline and the read timeout.
func (n *Node) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	return n.call(ctx, nil, cmd, args)
}

// Eval runs script with EVALSHA (EVAL on NOSCRIPT), bounded by ctx's
// deadline and the read timeout.
func (n *Node) Eval(ctx context.Context, script *redis.Script, keysAndArgs ...any) (any, error) {
	return n.call(ctx, script, "", keysAndArgs)
}

func (n *Node) call(ctx context.Context, script *redis.Script, cmd string, args []any) (any, error) {
	op := opName(script, cmd)
	if n.closed.Load() {
		return nil, wrapErr(n.addr, op, ErrClosed, "")
	}
	timeout, err := timeoutFor(ctx, n.cfg.readTimeout)
	if err != nil {
		return nil, wrapErr(n.addr, op, err, "")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := n.p.GetContext(ctx)
	if err != nil {
		return nil, wrapErr(n.addr, "dial", err, n.cfg.password)
	}
	defer c.Close()
	// Dialing may have used part of the budget.
	if timeout, err = timeoutFor(ctx, 0); err != nil {
		return nil, wrapErr(n.addr, op, err, "")
	}
	reply, err := run(c, timeout, script, cmd, args)
	return reply, wrapErr(n.addr, op, err, n.cfg.password)
}

// Close closes the idle connections; connections in use close when their
// call ends. Later calls fail with ErrClosed.
func (n *Node) Close() error {
	n.closed.Store(true)
	return n.p.Close()
}
