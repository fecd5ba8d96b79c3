package pool

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Defaults for New. They suit a lock node on a local network: a command
// that takes longer than a few hundred milliseconds is better reported as
// failed than waited for, since the lock coordinator bounds every node call
// with its own, shorter, node timeout anyway.
const (
	DefaultDialTimeout  = 1 * time.Second
	DefaultReadTimeout  = 1 * time.Second
	DefaultWriteTimeout = 1 * time.Second
	DefaultConns        = 1
	DefaultQueueSize    = 4096
	DefaultPingIdle     = 10 * time.Second
)

type config struct {
	dialTimeout  time.Duration
	readTimeout  time.Duration
	writeTimeout time.Duration
	conns        int
	queueSize    int
	pingIdle     time.Duration
	username     string
	password     string
	db           int
	tls          *tls.Config
	clientName   string
}

func defaultConfig() config {
	return config{
		dialTimeout:  DefaultDialTimeout,
		readTimeout:  DefaultReadTimeout,
		writeTimeout: DefaultWriteTimeout,
		conns:        DefaultConns,
		queueSize:    DefaultQueueSize,
		pingIdle:     DefaultPingIdle,
	}
}

func (c *config) validate() error {
	switch {
	case c.dialTimeout <= 0:
		return fmt.Errorf("redlock/pool: dial timeout %v must be positive", c.dialTimeout)
	case c.readTimeout <= 0:
		return fmt.Errorf("redlock/pool: read timeout %v must be positive", c.readTimeout)
	case c.writeTimeout <= 0:
		return fmt.Errorf("redlock/pool: write timeout %v must be positive", c.writeTimeout)
	case c.conns < 1 || c.conns > 64:
		return fmt.Errorf("redlock/pool: connections %d out of range [1, 64]", c.conns)
	case c.queueSize < 1:
		return fmt.Errorf("redlock/pool: queue size %d must be positive", c.queueSize)
	case c.pingIdle < 0:
		return fmt.Errorf("redlock/pool: ping-after-idle %v must not be negative", c.pingIdle)
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
// CLIENT SETNAME). Default DefaultDialTimeout (1s).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithReadTimeout bounds waiting for a reply when the caller's context has
// no earlier deadline. Default DefaultReadTimeout (1s).
func WithReadTimeout(d time.Duration) Option { return func(c *config) { c.readTimeout = d } }

// WithWriteTimeout bounds writing a command to the socket. Default
// DefaultWriteTimeout (1s).
func WithWriteTimeout(d time.Duration) Option { return func(c *config) { c.writeTimeout = d } }

// WithConns sets how many pipelined connections the node gets. Commands on
// one key always use the same connection. One connection batches best;
// more can help when a single connection's reads or writes are the
// bottleneck. Default DefaultConns (1); range 1 to 64.
func WithConns(n int) Option { return func(c *config) { c.conns = n } }

// WithQueueSize bounds how many commands may wait, per connection, to be
// written. A caller that finds the queue full waits for room until its
// context ends, then fails with ErrQueueFull. Default DefaultQueueSize
// (4096).
func WithQueueSize(n int) Option { return func(c *config) { c.queueSize = n } }

// WithPingAfterIdle makes a connection that stayed idle at least d answer a
// PING before it carries commands again, so that a connection the node or
// a middlebox dropped is replaced instead of failing a lock call. Default
// DefaultPingIdle (10s); 0 never pings.
func WithPingAfterIdle(d time.Duration) Option { return func(c *config) { c.pingIdle = d } }

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

// dialOptions turns the configuration into redigo dial options. TLS and
// the TCP connect are not among them: the Node's dialer does both.
func (c *config) dialOptions() []redis.DialOption {
	opts := []redis.DialOption{
		redis.DialReadTimeout(c.readTimeout),
		redis.DialWriteTimeout(c.writeTimeout),
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
