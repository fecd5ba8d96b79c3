package redlock

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// The default pacing of Lock's rounds when the nodes cannot say how long
// the key has left: the first wait is drawn from [5ms, 10ms], each later
// one from a range twice as high, up to [125ms, 250ms].
const (
	defaultRetryMin = 10 * time.Millisecond
	defaultRetryMax = 250 * time.Millisecond
)

// WithRetry sets how long Lock waits between rounds when the nodes cannot
// tell how long the key has left (they failed or did not answer), and the
// longest it sleeps while release announcements are unavailable: a random
// time between d/2 and d, d starting at min and doubling after each failed
// round up to max. Given to New it is the Client's default; given to Lock,
// that call's. Default 10ms to 250ms. See docs/waiting.md.
func WithRetry(min, max time.Duration) RetryOption {
	return RetryOption{backoff{min: min, max: max}}
}

// RetryOption is WithRetry's option: both an Option (the Client's
// default) and a LockOption (one call's).
type RetryOption struct{ b backoff }

// pacer sets the wait after a failed round: backoff, or a test's.
type pacer interface {
	delay(failures int) time.Duration
	validate() error
}

func (o RetryOption) applyClient(c *clientConfig) { c.retry = o.b }
func (o RetryOption) applyLock(c *lockConfig)     { c.retry = o.b }

// backoff waits a random time between half of d and d, where d starts at
// min and doubles after every failed round up to max. The random half
// makes competing clients fall out of step.
type backoff struct{ min, max time.Duration }

// delay returns the wait after the given number of failed rounds (1 after
// the first).
func (b backoff) delay(failures int) time.Duration {
	d := b.min
	for i := 1; i < failures && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// validate reports settings that cannot work.
func (b backoff) validate() error {
	switch {
	case b.min <= 0:
		return fmt.Errorf("redlock: retry minimum %v must be positive", b.min)
	case b.max < b.min:
		return fmt.Errorf("redlock: retry maximum %v is below the minimum %v", b.max, b.min)
	}
	return nil
}
