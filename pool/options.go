package pool

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Defaults of New. They suit a lock node on a local network: a command
// that takes longer than a second is better reported as failed than
// waited for, since the lock coordinator bounds every node call with its
// own, shorter, node timeout anyway. See docs/operations.md.
const (
	defaultDialTimeout = 1 * time.Second
	defaultIOTimeout   = 1 * time.Second
	defaultConns       = 1
	defaultQueueSize   = 4096             // requests waiting to be written, per connection
	defaultPingIdle    = 10 * time.Second // 0 never pings
)

type config struct {
	dialTimeout time.Duration
	ioTimeout   time.Duration // read and write
	conns       int
	queueSize   int
	pingIdle    time.Duration // an idle connection answers PING before it is used again
	username    string
	password    string
	db          int
	tls         *tls.Config
	clientName  string
	dial        func(ctx context.Context, network, addr string) (net.Conn, error) // nil: TCP
}

func defaultConfig() config {
	return config{
		dialTimeout: defaultDialTimeout,
		ioTimeout:   defaultIOTimeout,
		conns:       defaultConns,
		queueSize:   defaultQueueSize,
		pingIdle:    defaultPingIdle,
	}
}

func (c *config) validate() error {
	switch {
	case c.dialTimeout <= 0:
		return fmt.Errorf("redlock/pool: dial timeout %v must be positive", c.dialTimeout)
	case c.ioTimeout <= 0:
		return fmt.Errorf("redlock/pool: I/O timeout %v must be positive", c.ioTimeout)
	case c.conns < 1 || c.conns > 64:
		return fmt.Errorf("redlock/pool: connections %d out of range [1, 64]", c.conns)
	case c.db < 0:
		return fmt.Errorf("redlock/pool: database %d must not be negative", c.db)
	case c.username != "" && c.password == "":
		return fmt.Errorf("redlock/pool: username %q given without a password", c.username)
	}
	return nil
}

// Option configures New.
type Option func(*config)

// WithDialTimeout bounds connecting (TCP, TLS handshake, AUTH, SELECT,
// CLIENT SETNAME). Default 1s.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithIOTimeout bounds writing a command, and waiting for its reply when
// the caller's context has no earlier deadline. Default 1s.
func WithIOTimeout(d time.Duration) Option { return func(c *config) { c.ioTimeout = d } }

// WithConns sets how many pipelined connections the node gets. Commands on
// one key always use the same connection. One connection batches best;
// more can help when a single connection's reads or writes are the
// bottleneck. Default 1; range 1 to 64.
func WithConns(n int) Option { return func(c *config) { c.conns = n } }

// WithPassword authenticates with AUTH password (the default user).
func WithPassword(password string) Option {
	return func(c *config) { c.username, c.password = "", password }
}

// WithUser authenticates as an ACL user with AUTH username password.
func WithUser(username, password string) Option {
	return func(c *config) { c.username, c.password = username, password }
}

// WithDB selects a database after connecting. Default 0.
func WithDB(db int) Option { return func(c *config) { c.db = db } }

// WithTLS connects over TLS with the given configuration. Default: plain
// TCP. When the configuration has no ServerName, the host of the address is
// used.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithClientName names the connections (CLIENT SETNAME), which shows in
// CLIENT LIST on the node. Default: unnamed.
func WithClientName(name string) Option { return func(c *config) { c.clientName = name } }

// WithDialer makes the node open its connections with dial instead of a
// TCP connect: a unix socket, a proxy, or an in-process server (the
// nodes of package redlocktest). dial is called with network "tcp" and
// the node's address, within the dial timeout and the caller's context;
// TLS, authentication and the checks of what the node sends still apply
// to the connection it returns. Default: TCP.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(c *config) { c.dial = dial }
}

// dialOptions turns the configuration into redigo dial options. TLS and
// the TCP connect are not among them: the node's dialer does both.
func (c *config) dialOptions() []redis.DialOption {
	opts := []redis.DialOption{
		redis.DialReadTimeout(c.ioTimeout),
		redis.DialWriteTimeout(c.ioTimeout),
		redis.DialDatabase(c.db),
	}
	if c.password != "" {
		opts = append(opts, redis.DialPassword(c.password))
	}
	if c.username != "" {
		opts = append(opts, redis.DialUsername(c.username))
	}
	if c.clientName != "" {
		opts = append(opts, redis.DialClientName(c.clientName))
	}
	return opts
}

// tlsConfig returns a copy of the TLS configuration with host as the
// server name when it has none, or nil for plain TCP.
func (c *config) tlsConfig(host string) *tls.Config {
	if c.tls == nil {
		return nil
	}
	tc := c.tls.Clone()
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	return tc
}
