package faults

import (
	"time"

	"golang.org/x/sys/unix"
)

// Mono returns the system-wide monotonic clock (CLOCK_MONOTONIC) as a
// duration since an unspecified moment (boot, on Linux). Unlike the
// monotonic reading inside a time.Time, it is the same clock in every
// process of the machine, so holds recorded by a worker subprocess compare
// with those recorded by its parent.
func Mono() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("faults: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return time.Duration(ts.Nano())
}
