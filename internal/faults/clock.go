package faults

import (
	"fmt"
	"math"
	"time"

	"github.com/quorumlock/redlock/clock"
)

// Clock is a clock.Clock over clock.Real() whose time runs at Rate times
// the real rate: 1.05 is a client clock 5% fast, 0.9 one 10% slow. Times it
// returns keep Go's monotonic reading, so the library's durations between
// two readings stay immune to wall-clock jumps; only their length is
// scaled. A Clock is safe for concurrent use.
type Clock struct {
	base   clock.Clock
	origin time.Time // real time at which the skewed clock equals it
	rate   float64
}

var _ clock.Clock = (*Clock)(nil)

// NewClock returns a clock running at rate times real time, equal to the
// real clock now. It panics unless 0 < rate <= 100.
func NewClock(rate float64) *Clock {
	if !(rate > 0 && rate <= 100) {
		panic(fmt.Sprintf("faults: clock rate %v out of (0, 100]", rate))
	}
	base := clock.Real()
	return &Clock{base: base, origin: base.Now(), rate: rate}
}

// Rate returns the clock's rate relative to real time.
func (c *Clock) Rate() float64 { return c.rate }

// Now returns the skewed time: origin plus the real time since origin,
// times the rate.
func (c *Clock) Now() time.Time {
	return c.origin.Add(c.scale(c.base.Since(c.origin)))
}

// Since returns the skewed time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewTimer returns a timer that fires once d has elapsed on this clock.
// The time it sends is real time.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	return skewedTimer{t: c.base.NewTimer(c.RealDuration(d)), c: c}
}

// AfterFunc calls f once d has elapsed on this clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return skewedTimer{t: c.base.AfterFunc(c.RealDuration(d), f), c: c}
}

// RealDuration converts a duration on this clock into real time: d/rate,
// rounded up, so that a positive duration stays positive: a timer of 1ns
// on a fast clock must not fire at once (in virtual time, a caller that
// waits for what is left of a deadline would then never see it pass).
func (c *Clock) RealDuration(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(float64(d) / c.rate))
}

// scale converts a real duration into one on this clock: d*rate.
func (c *Clock) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.rate)
}

type skewedTimer struct {
	t clock.Timer
	c *Clock
}

func (s skewedTimer) C() <-chan time.Time        { return s.t.C() }
func (s skewedTimer) Stop() bool                 { return s.t.Stop() }
func (s skewedTimer) Reset(d time.Duration) bool { return s.t.Reset(s.c.RealDuration(d)) }
