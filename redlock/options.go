package redlock

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/quorumlock/redlock/clock"
)

// Defaults for New.
const (
	// defaultDriftFactor is the share of the TTL set aside for clock-rate
	// differences between the nodes and the client (1%). Another 2ms is
	// always set aside for Redis's expiry granularity.
	defaultDriftFactor = 0.01
	// defaultNodeTimeout bounds each node's part in a round. It is small
	// next to a lock's TTL, so that an unreachable node costs little of the
	// validity, and large next to a round trip on a local network.
	defaultNodeTimeout = 50 * time.Millisecond
)

// driftFloor is the fixed part of the drift allowance: Redis expires keys
// with millisecond granularity.
const driftFloor = 2 * time.Millisecond

type clientConfig struct {
	driftFactor float64
	nodeTimeout time.Duration
	retry       pacer
	clock       clock.Clock
	window      time.Duration // WithHandoffWindow; windowAuto: see New

	logger    *slog.Logger // WithLogger; nil: silent
	observers []Observer   // WithObserver

	// Restart safety (restart.go).
	maxTTL   time.Duration // WithRestartSafety; 0: restart safety is off
	durable  bool          // WithDurableNodes
	verified bool          // WithVerifiedGrants
}

// windowAuto marks the hand-off window as not set: New makes it the node
// timeout, at most maxAutoWindow.
const (
	windowAuto    = -1
	maxAutoWindow = 100 * time.Millisecond
)

func (c *clientConfig) validate() error {
	switch {
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 0.5:
		return fmt.Errorf("redlock: drift factor %v out of range [0, 0.5)", c.driftFactor)
	case c.nodeTimeout <= 0:
		return fmt.Errorf("redlock: node timeout %v must be positive", c.nodeTimeout)
	case c.clock == nil:
		return fmt.Errorf("redlock: clock is nil")
	case c.window < 0 && c.window != windowAuto:
		return fmt.Errorf("redlock: hand-off window %v must not be negative", c.window)
	case c.window > 0 && c.window < time.Millisecond:
		return fmt.Errorf("redlock: hand-off window %v is under the 1ms Redis resolution", c.window)
	case c.maxTTL < 0:
		return fmt.Errorf("redlock: restart safety's maximum ttl %v must not be negative", c.maxTTL)
	case c.verified && c.maxTTL == 0:
		return fmt.Errorf("redlock: WithVerifiedGrants needs restart safety, which WithRestartSafety(0) turns off")
	}
	return c.retry.validate()
}

// Option configures a Client.
type Option interface{ applyClient(*clientConfig) }

// LockOption configures one call that takes a lock of any kind: TryLock,
// Lock, Do, the *Multi calls, a Semaphore's, an RWLock's, Campaign and
// Run.
//
// A call given an option that its kind of lock does not support (only
// WithFencing, on a read-write lock) fails before asking any node, with
// an error that names the option and matches errors.ErrUnsupported.
type LockOption interface{ applyLock(*lockConfig) }

// unsupported is the error of a call on what (a kind of lock) named name,
// given option, which that kind does not support.
func unsupported(what, name, option string) error {
	return fmt.Errorf("redlock: %s %q: %s is not supported: %w", what, name, option, errors.ErrUnsupported)
}

type clientOption func(*clientConfig)

func (f clientOption) applyClient(c *clientConfig) { f(c) }

type lockOption func(*lockConfig)

func (f lockOption) applyLock(c *lockConfig) { f(c) }

// WithDriftFactor sets the share of the TTL set aside for clock drift. The
// validity of a lock is ttl - elapsed - (ttl*factor + 2ms). Default 0.01;
// New rejects values outside [0, 0.5). See docs/algorithm.md.
func WithDriftFactor(f float64) Option {
	return clientOption(func(c *clientConfig) { c.driftFactor = f })
}

// WithNodeTimeout bounds each node's part in a round: a node that has not
// replied by then counts as failed. A node of pool.New whose first
// connection had yet to be opened when the round was sent (a new pool's
// first round) is waited for until it opens, within the pool's dial
// timeout, and then for as long again as the round had waited, at least
// d: the lock's validity still counts from the round's start. Default
// 50ms: small next to a lock's TTL, large next to a round trip on a local
// network. It must be positive. See docs/operations.md#timeouts.
func WithNodeTimeout(d time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.nodeTimeout = d })
}

// WithHandoffWindow sets how long a release keeps the key for the waiter
// at the head of the nodes' queue when that waiter cannot take a hand-off
// at once (a fenced Lock); waiting Lock calls queue on every node in the
// order they began, and a release hands the key to the longest waiter.
// Default: the node timeout, at most 100ms. 0 turns queueing off: a
// release wakes every waiter and the fastest wins. New rejects a negative
// d or one under 1ms. Mutual exclusion does not depend on it; see
// docs/waiting.md.
func WithHandoffWindow(d time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.window = d })
}

// WithClock makes the Client measure time on c instead of the system clock;
// tests pass a *clock.Fake.
func WithClock(c clock.Clock) Option {
	return clientOption(func(cfg *clientConfig) { cfg.clock = c })
}

type lockConfig struct {
	minValidity time.Duration
	retry       pacer

	// Critical sections (context.go, autoextend.go, do.go).
	margin     time.Duration // WithSafetyMargin
	autoExtend bool          // WithAutoExtend, or Do
	interval   time.Duration // WithAutoExtend; 0: ttl/3
	maxHold    time.Duration // WithMaxHold; 0: no limit

	fencing bool // WithFencing (fence.go)
}

// WithMinValidity makes an acquisition succeed only when more than d of
// validity is left after the round; with less it fails with ErrNotAcquired
// and is released. Default 0: any positive validity.
func WithMinValidity(d time.Duration) LockOption {
	return lockOption(func(c *lockConfig) { c.minValidity = d })
}

// WithSafetyMargin makes the lock's context (Lock.Context) end d before
// the validity does, so that work stopped by it has d left to wind down
// while the lock is still held. Default 0; it must not be negative and
// must leave some of the ttl after the drift allowance.
func WithSafetyMargin(d time.Duration) LockOption {
	return lockOption(func(c *lockConfig) { c.margin = d })
}

// WithAutoExtend makes TryLock and Lock start automatic extension: the
// lock is extended with its ttl every interval (0: ttl/3) until Unlock,
// until it is lost, or until the Client is closed; its context
// (Lock.Context) ends with ErrLockLost as soon as an extension proves the
// loss, or when extensions have failed to reach a quorum for one node
// timeout. A lock with automatic extension is held until one of those
// happens or WithMaxHold ends it: always
// Unlock it. Do extends always; given to Do, this option sets the
// interval. The interval plus the safety margin must be below the ttl less
// the drift allowance, or the lock would end before its first extension.
func WithAutoExtend(interval time.Duration) LockOption {
	return lockOption(func(c *lockConfig) { c.autoExtend, c.interval = true, interval })
}

// WithMaxHold caps how long the lock is held, counted from the start of
// its acquisition: automatic extension never extends it past that (the
// last extension gets a shorter ttl), and its context ends with
// ErrExpired then at the latest. Default 0: no limit.
func WithMaxHold(d time.Duration) LockOption {
	return lockOption(func(c *lockConfig) { c.maxHold = d })
}

// with returns c with opts applied.
func (c lockConfig) with(opts []LockOption) lockConfig {
	for _, o := range opts {
		o.applyLock(&c)
	}
	return c
}

// extendInterval is the automatic extension interval for ttl.
func (c *lockConfig) extendInterval(ttl time.Duration) time.Duration {
	if c.interval == 0 {
		return ttl / 3
	}
	return c.interval
}

// validateSection checks the critical-section options against the ttl and
// its drift allowance.
func (c *lockConfig) validateSection(ttl, drift time.Duration) error {
	switch validity := ttl - drift; {
	case c.margin < 0:
		return fmt.Errorf("redlock: safety margin %v must not be negative", c.margin)
	case c.margin >= validity:
		return fmt.Errorf("redlock: safety margin %v leaves nothing of the ttl %v after the drift allowance %v", c.margin, ttl, drift)
	case c.interval < 0:
		return fmt.Errorf("redlock: auto-extend interval %v must not be negative", c.interval)
	case c.maxHold < 0:
		return fmt.Errorf("redlock: maximum hold %v must not be negative", c.maxHold)
	case c.autoExtend && c.extendInterval(ttl)+c.margin >= validity:
		return fmt.Errorf("redlock: auto-extend interval %v plus safety margin %v is not below the ttl %v less the drift allowance %v: the lock would end before its first extension",
			c.extendInterval(ttl), c.margin, ttl, drift)
	}
	return nil
}
