// Package clock is the time source of the lock library: the current time,
// timers and delayed calls behind one interface, so that every elapsed time
// the coordinator measures can be driven by a test.
//
// Real returns the system clock; its Now carries Go's monotonic reading, so
// durations between two readings are immune to wall-clock jumps. Fake is a
// clock that moves only when a test advances it.
package clock

import "time"

// Clock tells time and schedules work.
type Clock interface {
	// Now returns the current time. Durations between two readings of the
	// same clock are measured on a monotonic scale.
	Now() time.Time
	// Since returns the time elapsed since t.
	Since(t time.Time) time.Duration
	// NewTimer returns a timer that sends the current time on its channel
	// once d has elapsed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has elapsed, unless the
	// returned timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a single event scheduled on a Clock.
type Timer interface {
	// C returns the channel the time is sent on. It is nil for timers made
	// by AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer, false when the timer had already fired or been stopped.
	Stop() bool
	// Reset schedules the timer to fire d from now. It reports whether the
	// timer had been active.
	Reset(d time.Duration) bool
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }
func (realClock) NewTimer(d time.Duration) Timer  { return realTimer{t: time.NewTimer(d)} }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{t: time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
