//go:build !linux

package main

import "syscall"

// busyProcAttr returns nil: parent-death signals are Linux-only; a
// helper of -busy ends when it sees its parent gone, or after its time.
func busyProcAttr() *syscall.SysProcAttr { return nil }
