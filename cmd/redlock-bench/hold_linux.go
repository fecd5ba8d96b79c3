package main

import (
	"syscall"
	"time"
)

// kernelSleep sleeps d in the kernel (nanosleep), away from the Go
// runtime's timers; the goroutine keeps its thread meanwhile.
func kernelSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // interrupted early: holdFor yields the rest
}
