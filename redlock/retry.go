package redlock

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryStrategy decides how long Lock waits after a failed round before it
// tries again. Implementations are safe for concurrent use: one strategy
// serves every Lock call of a Client.
type RetryStrategy interface {
	// NextDelay returns the wait after the given number of failed rounds
	// (1 after the first), and false when Lock should give up.
	NextDelay(failures int) (time.Duration, bool)
}

// Default retry settings: the first wait is drawn from [5ms, 10ms], each
// later one from a range twice as high, up to [125ms, 250ms]. Lock keeps
// trying until its context ends.
const (
	DefaultRetryMin = 10 * time.Millisecond
	DefaultRetryMax = 250 * time.Millisecond
)

// DefaultRetry is the strategy Lock uses unless told otherwise:
// ExponentialBackoff{Min: DefaultRetryMin, Max: DefaultRetryMax}.
var DefaultRetry RetryStrategy = ExponentialBackoff{Min: DefaultRetryMin, Max: DefaultRetryMax}

// ExponentialBackoff waits a random time between half of d and d, where d
// starts at Min and doubles after every failed round up to Max. The random
// half makes competing clients fall out of step.
type ExponentialBackoff struct {
	Min        time.Duration // first ceiling; must be positive
	Max        time.Duration // largest ceiling; must be at least Min
	MaxRetries int           // give up after this many retries; 0 means no limit
}

// NextDelay implements RetryStrategy.
func (b ExponentialBackoff) NextDelay(failures int) (time.Duration, bool) {
	if b.MaxRetries > 0 && failures > b.MaxRetries {
		return 0, false
	}
	d := b.Min
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	half := d / 2
	return half + rand.N(d-half+1), true
}

// Validate reports settings that cannot work.
func (b ExponentialBackoff) Validate() error {
	switch {
	case b.Min <= 0:
		return fmt.Errorf("redlock: retry minimum %v must be positive", b.Min)
	case b.Max < b.Min:
		return fmt.Errorf("redlock: retry maximum %v is below the minimum %v", b.Max, b.Min)
	case b.MaxRetries < 0:
		return fmt.Errorf("redlock: retry limit %d must not be negative", b.MaxRetries)
	}
	return nil
}

// NoRetry makes Lock give up after its first round, like TryLock.
func NoRetry() RetryStrategy { return noRetry{} }

type noRetry struct{}

func (noRetry) NextDelay(int) (time.Duration, bool) { return 0, false }

func validateRetry(s RetryStrategy) error {
	if s == nil {
		return errors.New("redlock: retry strategy is nil")
	}
	if v, ok := s.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}
