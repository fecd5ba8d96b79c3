package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// spinEnv, when set to a duration, makes this binary a CPU-bound helper
// process (spinFromEnv) instead of the tool: -busy starts such helpers.
const spinEnv = "REDLOCK_BENCH_SPIN_FOR"

// busyMargin is how long a helper may outlive the run's bound before it
// ends by itself.
const busyMargin = 30 * time.Second

// startBusy starts k helper processes, each keeping one core busy for at
// most d plus busyMargin: this binary again, with spinEnv set and
// GOMAXPROCS=1. stop kills them and waits for them; they also die with
// this process (busyProcAttr) or end when they see it gone.
func startBusy(k int, d time.Duration) (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("-busy: %w", err)
	}
	var cmds []*exec.Cmd
	stop = func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	for range k {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), spinEnv+"="+(d+busyMargin).String(), "GOMAXPROCS=1")
		cmd.SysProcAttr = busyProcAttr()
		if err := cmd.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("-busy: %w", err)
		}
		cmds = append(cmds, cmd)
	}
	return stop, nil
}

// spinFromEnv reports whether this process is a helper of -busy; if so,
// it has spun on one core for the time spinEnv says, or until its parent
// was gone, before it returns.
func spinFromEnv() bool {
	raw, ok := os.LookupEnv(spinEnv)
	if !ok {
		return false
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlock-bench: %s=%q: %v\n", spinEnv, raw, err)
		return true
	}
	parent := os.Getppid()
	end := time.Now().Add(d)
	x := 0
	for time.Now().Before(end) && os.Getppid() == parent {
		for range 1 << 16 {
			x = x*31 + 7
		}
	}
	runtime.KeepAlive(x) // the loop is not optimised away
	return true
}
