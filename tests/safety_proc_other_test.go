//go:build !linux

package tests

import "syscall"

var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// workerProcAttr returns nil: parent-death signals are Linux-only; a worker
// still ends when its standard input closes.
func workerProcAttr() *syscall.SysProcAttr { return nil }
