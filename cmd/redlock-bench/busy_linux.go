package main

import "syscall"

// busyProcAttr makes the kernel kill a helper of -busy when this process
// dies (strictly, the thread that started it: the Go runtime keeps its
// threads, unless a goroutine locked to one ends).
func busyProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
