package redlock

import (
	"fmt"
	"math"
	"time"

	"github.com/quorumlock/redlock/clock"
)

// Defaults for New.
const (
	// DefaultDriftFactor is the share of the TTL set aside for clock-rate
	// differences between the nodes and the client (1%). Another 2ms is
	// always set aside for Redis's expiry granularity.
	DefaultDriftFactor = 0.01
	// DefaultNodeTimeout bounds each node's part in a round. It is small
	// next to a lock's TTL, so that an unreachable node costs little of the
	// validity, and large next to a round trip on a local network.
	DefaultNodeTimeout = 50 * time.Millisecond
)

// driftFloor is the fixed part of the drift allowance: Redis expires keys
// with millisecond granularity.
const driftFloor = 2 * time.Millisecond

type clientConfig struct {
	driftFactor float64
	nodeTimeout time.Duration
	retry       RetryStrategy
	clock       clock.Clock
}

func (c *clientConfig) validate() error {
	switch {
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 0.5:
		return fmt.Errorf("redlock: drift factor %v out of range [0, 0.5)", c.driftFactor)
	case c.nodeTimeout <= 0:
		return fmt.Errorf("redlock: node timeout %v must be positive", c.nodeTimeout)
	case c.clock == nil:
		return fmt.Errorf("redlock: clock is nil")
	}
	return validateRetry(c.retry)
}

// Option configures a Client.
type Option interface{ applyClient(*clientConfig) }

// LockOption configures one TryLock or Lock call.
type LockOption interface{ applyLock(*lockConfig) }

type clientOption func(*clientConfig)

func (f clientOption) applyClient(c *clientConfig) { f(c) }

type lockOption func(*lockConfig)

func (f lockOption) applyLock(c *lockConfig) { f(c) }

// WithDriftFactor sets the share of the TTL set aside for clock drift. The
// validity of a lock is ttl - elapsed - (ttl*factor + 2ms). Default
// DefaultDriftFactor (0.01); New rejects values outside [0, 0.5).
func WithDriftFactor(f float64) Option {
	return clientOption(func(c *clientConfig) { c.driftFactor = f })
}

// WithNodeTimeout bounds each node's part in a round: a node that has not
// replied by then counts as failed. Default DefaultNodeTimeout (50ms); it
// must be positive.
func WithNodeTimeout(d time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.nodeTimeout = d })
}

// WithClock makes the Client measure time on c instead of the system clock;
// tests pass a *clock.Fake.
func WithClock(c clock.Clock) Option {
	return clientOption(func(cfg *clientConfig) { cfg.clock = c })
}

// WithRetry sets how long Lock waits between rounds. Given to New it is the
// Client's default; given to Lock it applies to that call. Default
// DefaultRetry.
func WithRetry(s RetryStrategy) RetryOption { return RetryOption{s} }

// RetryOption is both an Option and a LockOption; see WithRetry.
type RetryOption struct{ s RetryStrategy }

func (o RetryOption) applyClient(c *clientConfig) { c.retry = o.s }
func (o RetryOption) applyLock(c *lockConfig)     { c.retry, c.retrySet = o.s, true }

type lockConfig struct {
	minValidity time.Duration
	retry       RetryStrategy
	retrySet    bool
}

// WithMinValidity makes an acquisition succeed only when more than d of
// validity is left after the round; with less it fails with ErrNotAcquired
// and is released. Default 0: any positive validity.
func WithMinValidity(d time.Duration) LockOption {
	return lockOption(func(c *lockConfig) { c.minValidity = d })
}
