package tests

import "syscall"

var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// workerProcAttr makes the kernel kill a worker subprocess when the test
// process dies, even while the worker is stopped.
func workerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
