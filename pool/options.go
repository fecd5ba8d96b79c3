package pool

import (
	"crypto/tls"
	"fmt"
	"time"
)

// Defaults for New. They suit a lock node on a local network: a command
// that takes longer than a few hundred milliseconds is better reported as
// failed than waited for, since the lock coordinator bounds every node call
// with its own, shorter, node timeout anyway.
const (
	DefaultDialTimeout  = 1 * time.Second
	DefaultReadTimeout  = 1 * time.Second
	DefaultWriteTimeout = 1 * time.Second
	DefaultMaxIdle      = 32
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultPingIdle     = 10 * time.Second
)

type config struct {
	dialTimeout  time.Duration
	readTimeout  time.Duration
	writeTimeout time.Duration
	maxIdle      int
	maxActive    int
	idleTimeout  time.Duration
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
		maxIdle:      DefaultMaxIdle,
		idleTimeout:  DefaultIdleTimeout,
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
	case c.maxIdle < 0:
		return fmt.Errorf("redlock/pool: max idle connections %d must not be negative", c.maxIdle)
	case c.maxActive < 0:
		return fmt.Errorf("redlock/pool: max active connections %d must not be negative", c.maxActive)
	case c.idleTimeout < 0:
		return fmt.Errorf("redlock/pool: idle timeout %v must not be negative", c.idleTimeout)
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

// WithMaxIdle sets how many idle connections are kept for reuse; set it to
// about the number of concurrent lock calls. Default DefaultMaxIdle (32).
func WithMaxIdle(n int) Option { return func(c *config) { c.maxIdle = n } }

// WithMaxActive caps the connections open at once; a call that finds the
// cap reached waits for a free connection until its context ends. Default
// 0: no cap.
func WithMaxActive(n int) Option { return func(c *config) { c.maxActive = n } }

// WithIdleTimeout closes connections that stayed idle this long. Default
// DefaultIdleTimeout (5m); 0 keeps them forever.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.idleTimeout = d } }

// WithPingAfterIdle makes a connection that stayed idle at least d answer a
// PING before it is reused, so that a connection the node or a middlebox
// dropped is replaced instead of failing a lock call. Default
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
