package redistest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL the child when its parent dies, so a
// redis-server never outlives the process that started it, and puts it in
// its own process group, so that a Ctrl-C meant for the benchmark tool does
// not stop the nodes before the tool has released its locks.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// waitStopped waits until the process with the given pid is in the stopped
// state, so that Pause returns only once the server is really frozen.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			if s := b[i+2]; s == 'T' || s == 't' {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
