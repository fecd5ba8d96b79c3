// Package faults breaks a set of Redis nodes on purpose and checks what a
// lock client does meanwhile. It is the harness of the fault-injection
// suite (tests/safety_test.go) and builds on internal/redistest.
//
// It has four parts:
//
//   - Proxy: a TCP proxy on 127.0.0.1 in front of one node that can add
//     latency (fixed or jittered), swallow traffic (black hole), reset a
//     connection in the middle of a reply, hold replies back while
//     requests go through, or trickle replies byte by byte.
//   - Injector: a seeded, bounded schedule of faults on the nodes
//     (SIGKILL, restart empty or with data, SIGSTOP, SCRIPT FLUSH, CLIENT
//     KILL, the proxy faults, TTLs shrunk on one node), which never has
//     more nodes faulty at once than it is told.
//   - Clock and Mono: a client clock that runs fast or slow by a factor,
//     and the system-wide monotonic clock (CLOCK_MONOTONIC) on which every
//     process of a run records its holds.
//   - Checker and Store: the record of every hold ([acquired, end] per key)
//     with the overlaps (readers may share), late writes, fence
//     inversions, terms held twice and holds over a semaphore's permits
//     found in it; a counter and a fenced store on a Redis node of their
//     own, which count lost updates and stale writes.
//
// A schedule is random but seeded: a run prints its seed, and setting
// REDLOCK_FAULT_SEED replays it. Every loop in the package is bounded in
// count and in time, and all traffic stays on 127.0.0.1.
package faults
