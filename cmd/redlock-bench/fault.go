package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/faults"
)

// Kinds of fault.
const (
	faultPause = "pause" // SIGSTOP, later SIGCONT
	faultKill  = "kill"  // SIGKILL, later a restart (between runs) or nothing
)

// fault is a node the run breaks on purpose, and when.
type fault struct {
	kind  string        // faultPause or faultKill
	node  int           // index into the nodes
	after time.Duration // from the start of measuring
}

// fault returns the fault the flags ask for, or nil.
func (c config) fault() *fault {
	switch {
	case c.pauseNode != noNode:
		return &fault{kind: faultPause, node: c.pauseNode, after: c.withDefaults().faultAfter}
	case c.killNode != noNode:
		return &fault{kind: faultKill, node: c.killNode, after: c.withDefaults().faultAfter}
	}
	return nil
}

// verb is the fault in the past tense, for the report.
func (f *fault) verb() string {
	if f.kind == faultPause {
		return "paused"
	}
	return "killed"
}

// faultClock tells the workers whether the fault has begun. It holds the
// time since the start of measuring at which it began, or MaxInt64 while
// it has not.
type faultClock struct {
	start time.Time
	at    atomic.Int64
}

func newFaultClock(start time.Time) *faultClock {
	c := &faultClock{start: start}
	c.at.Store(math.MaxInt64)
	return c
}

// begun reports whether the fault had begun at t.
func (c *faultClock) begun(t time.Time) bool {
	return int64(t.Sub(c.start)) >= c.at.Load()
}

// inject waits until f.after into the measurement, then breaks the node.
// It returns at once, doing nothing, when ctx ends first. The fault is
// marked as begun just before the signal, so that no sample that could
// have seen it counts as "before".
func (f *fault) inject(ctx context.Context, n localNode, clock *faultClock) (injected bool, err error) {
	wait := f.after - time.Since(clock.start)
	if !faults.Sleep(ctx, wait) {
		return false, nil
	}
	clock.at.Store(int64(time.Since(clock.start)))
	if f.kind == faultPause {
		err = n.Pause()
	} else {
		err = n.Kill()
	}
	if err != nil {
		return true, fmt.Errorf("%s node %d: %w", f.kind, f.node, err)
	}
	return true, nil
}

// heal undoes the fault: it resumes a paused node, and restarts a killed
// one when restart is set (another run follows on the same nodes).
func (f *fault) heal(n localNode, restart bool) error {
	if f.kind == faultPause {
		return n.Resume()
	}
	if restart {
		return n.Restart()
	}
	return nil
}

// holdTail is the end of a hold that holdFor does not leave to a Go
// timer, and wakeSlack how early a kernel sleep stops before the end (the
// kernel wakes a thread up to about 100µs late on a busy machine).
const (
	holdTail  = time.Millisecond
	wakeSlack = 100 * time.Microsecond
)

// holdFor stands for a critical section that lasts d: it returns d after
// it was called, or false when ctx ends first. A Go timer alone would not
// do: the runtime's network poller waits in whole milliseconds, so a
// timer with network events in its last millisecond fires up to a
// millisecond late (a 1ms sleep lasted 1.3-1.8ms in contended mode). A
// timer covers all but the last holdTail, a kernel sleep (kernelSleep)
// the rest less wakeSlack, and a loop that yields the last few
// microseconds.
func holdFor(ctx context.Context, d time.Duration) bool {
	start := time.Now()
	if d > holdTail && !faults.Sleep(ctx, d-holdTail) {
		return false
	}
	if left := d - time.Since(start) - wakeSlack; left > 0 {
		kernelSleep(left)
	}
	// The loop's wall time is counted (spinNanos): it is CPU the tool
	// spends, not the lock client, though other goroutines can run in it.
	loop := time.Now()
	defer func() { spinNanos.Add(int64(time.Since(loop))) }()
	for time.Since(start) < d {
		if ctx.Err() != nil {
			return false
		}
		runtime.Gosched()
	}
	return true
}
