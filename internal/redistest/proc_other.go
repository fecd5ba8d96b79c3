//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: parent-death signals are Linux-only.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped gives the kernel a moment to deliver SIGSTOP; there is no
// portable way to observe the stopped state.
func waitStopped(int, time.Duration) error {
	time.Sleep(10 * time.Millisecond)
	return nil
}
