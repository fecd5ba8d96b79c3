// Command redlock-bench measures how long the redlock client takes to
// acquire and release locks on a set of Redis nodes, and how that compares
// with the least a quorum round can cost.
//
// Usage:
//
//	redlock-bench [flags]
//
// With no flags it starts 5 local redis-server processes on free ports of
// 127.0.0.1 (the binary is looked up on $PATH, or named by $REDIS_SERVER),
// runs the latency mode for 3 seconds and prints a report; the servers are
// stopped before it exits. When redis-server is not installed it falls back
// to in-process servers (miniredis, whose keys are made to expire with the
// wall clock, as on Redis) and warns on stderr that their figures are not
// representative; install redis-server (apt-get install redis-server) for
// real figures. With -addrs it uses nodes that are already running and
// starts nothing:
//
//	redlock-bench -addrs redis-1:6379,redis-2:6379,redis-3:6379
//
// # Modes
//
// -mode latency (the default): one worker takes and releases its own key,
// round after round. Between two lock rounds it makes one "floor" round
// over a raw connection per node (dialled once): SET key token NX PX ttl
// written to every node before any reply is read, then every reply read,
// then the same for DEL. The SET-all-read-all time is the least a quorum
// round can cost; the report gives its percentiles and the ratio lock p50
// / floor p50, both measured in the same run on the same nodes.
//
// -mode throughput: -workers workers (default 32), each on its own key,
// take and release as fast as they can; the figure is lock+unlock rounds/s.
//
// -mode contended: -workers workers (default 8) share one key; each holds
// the lock for -hold (default 10ms) before Unlock. The report gives
// acquisitions/s, the wait (from starting Lock to getting it: the acquire
// row), the hand-off (from one holder's Unlock returning to the next
// holder's Lock returning; 0 when that Lock returned first), the idle gap
// (the idle row: from one holder calling Unlock to the next holder's Lock
// returning, whichever worker that is: how long the key sat free while
// workers wanted it), each hold as it was (the held row: a hold lasts
// -hold, see holdFor), the efficiency, acquisitions/s ÷ (1/hold): 1 means
// the lock was never idle while someone wanted it, and the overlapping
// holds: Lock calls that returned while another worker held the lock
// (between its Lock returning and its Unlock being called), 0 unless
// mutual exclusion failed. After the run,
// one worker takes and releases a key of its own at the same hold for a
// quarter of the run (at most a second): its Lock p50 is one uncontended
// lock round at that pace, and the report gives hand-off p50 ÷ it.
//
// -mode takeover: how long an expired lock sits free before a waiter
// takes it over. -workers workers (default 8) share one key as in
// contended mode, but every holder dies instead of unlocking: it holds
// the lock for -hold (default 10ms), never calls Unlock, and sits out
// until its key has expired, at expiry = t1 + -ttl (default 100ms in this
// mode), t1 being when its Lock returned (its SETs landed before t1, so
// the key has expired on a quorum by then, to the nodes' millisecond
// precision); then it calls Lock again, like a process that restarted.
// The next Lock to return records the takeover: its return time minus
// expiry, or 0 when it returned before (counted as early). The report
// gives the takeover percentiles (the takeover row), how many takeovers
// went to the worker that had died and how many were early; the acquire
// row is the wait, which includes the TTL. Hand-off, efficiency and
// release latency do not apply and are left out; a round is one
// acquisition (lock, hold, die). A run gives about -duration ÷ (-ttl +
// takeover) samples: about 25 with the defaults.
//
// # Semaphores, read-write locks and elections
//
// Three modes measure the other kinds of lock, with one Client per
// worker (-client polling, and so all, is refused: the polling client has
// no such kinds; faults, -floor and -plot too).
//
// -mode semaphore -permits K (default 4) has two phases of -duration
// each. Uncontended: one worker on one Client makes a semaphore round
// (TryAcquire + Unlock on a semaphore of K permits) and a mutex round
// (TryLock + Unlock) in turn, each first every other time, so that the
// machine's load falls on both alike; the report gives both rows and the
// ratios semaphore ÷ mutex of p50, mean and p99. Contended: -workers
// workers (default 2K, more than K) Acquire (waiting) one semaphore, hold
// the permit for -hold (default 10ms) and Unlock; the report gives
// acquisitions/s, the efficiency (acquisitions/s × hold ÷ K: 1 when no
// permit sat free while wanted), the wait (Acquire latency) and how many
// acquisitions made more holders than permits (0 unless the semaphore
// failed). The cost lines (Redis CPU per acquisition and so on) are the
// contended phase's.
//
// -mode rwlock -readers R -writers W (default 4 and 1): R workers RLock
// and W workers Lock one read-write lock, hold for -hold and Unlock, for
// -duration; the report gives readers' and writers' acquisitions (per
// second and per worker) and waits apart, and the holds that broke the
// lock's rule (a writer with anyone, a reader with a writer).
//
// -mode election -terms N (default 20): -workers candidates (default 3)
// campaign in one election (Campaign), each on a Client of its own. Each
// leader leads for -hold, then ends its term, alternately by resigning
// (Unlock of its Campaign's lock) and by dying: a death closes the
// leader's Client without Unlock (Client.Close stops the lock's automatic
// extension and leaves the key to expire with its TTL, -ttl, default
// 500ms), and the candidate comes back on a new Client on the same
// connections, like a process that restarted. The report gives the time
// from each death (Close called) and each resignation (Unlock called) to
// the next leader's Campaign returning, the death's p50 and p99 less the
// TTL, the terms lost by themselves (not measured) and terms not above
// the one before (0 unless fencing failed). The run ends after N such
// successions, or at -duration (default 1m in this mode).
//
// Each worker first takes and releases its lock once, unmeasured and on
// its own Client, so that connections are dialled before measuring starts
// (bounded by one second and by -duration). Latencies go into HDR
// histograms (1µs to 60s, 3 significant digits), one set per worker,
// merged at the end.
//
// # Fresh Clients
//
// -mode fresh measures what a burst of brand-new Clients pays for their
// first locks, as when many processes start at once. A burst makes
// -clients Clients (default 200), each on pools of its own (-client:
// pipelined, redigo, goredis or rueidis; their connections are opened by
// the first call) with the default options and -node-timeout; once all
// are made they start at once, and each takes a key of its own (TTL
// -ttl) with up to -tries TryLocks (default 3), -pause apart (default
// 250ms; 0: back to back), and Unlocks it once it has it. Then every
// Client and pool is closed, and the next burst begins: -bursts of them
// (default 3; -duration does not apply). Before the first burst, one
// Client of its own takes and releases a lock, unmeasured, so that the
// nodes are a used deployment (restart markers set, scripts loaded);
// then the dial floor: -clients × the nodes raw TCP connections opened
// at once, each sending PING and reading +PONG, the least that opening
// the Clients' connections costs on this machine, whose p50, p90 and
// max the report gives beside the node timeout. Per burst, and as the
// median over the bursts (the lower middle one for an even count), the
// report gives how many Clients took their key on the first TryLock and
// within each further one, and the first TryLock's p50 and p99 (taken
// or not); then the errors by kind and the lock keys left on the nodes.
// Each TryLock and Unlock is bounded by 1s + twice the node timeout.
// -busy K (default 0) runs K CPU-bound helper processes beside the run,
// a core each: the binary itself again, with REDLOCK_BENCH_SPIN_FOR set
// and GOMAXPROCS=1. They are killed when the run ends, end by themselves
// after the longest the run can take and a margin, and die with the
// tool (on Linux by a parent-death signal; elsewhere they see their
// parent gone). -json, -plot, -floor and faults do not apply.
//
// # Clients
//
// -clients N spreads the workers round-robin over N redlock Clients, each
// on pools of its own (its own connections to every node), so that the
// contention looks like N separate processes. The default is one Client
// per worker in contended and takeover modes, and 1 in latency and
// throughput modes; N must be from 1 to the number of workers. Every
// Client and its pools are closed at the end of each run. With -client
// polling they are N polling clients, each with redigo pools of its own.
// The report's clients line says how many there were. In fresh mode
// -clients is the new Clients of each burst, a worker each (default 200).
//
// # Clients
//
// -client (or its older name -pool) says what carries the lock client's
// commands. pipelined (the default) runs it on pool.New, which pipelines
// the commands of concurrent callers on one connection per node. redigo
// (or plain, its older name) runs it on a redigo *redis.Pool per node (one
// connection per call, the way most Redis lock libraries work) with the
// same 1s dial, read and write timeouts and 2 idle connections per worker
// of its Client (plus 8), wrapped with pool.FromRedigo. goredis runs it on
// a go-redis *redis.Client per node (pool/goredis; a pool of 2 connections
// per worker plus 8, the same timeouts, ContextTimeoutEnabled), rueidis on
// a rueidis client per node (pool/rueidispool; auto-pipelining, client
// side caching off). polling runs a minimal
// Redlock client in the manner of go-redsync/redsync v4 instead of the
// library (pollClient), on redigo pools like the plain ones: an attempt
// sends SET key value NX PX ttl to every node at once and waits for all;
// it holds the lock on a quorum with validity left (ttl less the
// attempt's duration and ttl×0.01); otherwise it runs a GET/DEL release
// script on every node and tries again after a random 50-249ms, until
// its context ends (redsync gives up after 32 attempts: the report counts
// acquisitions that needed more); Unlock runs the release script on every
// node. both runs the mode with pipelined, then redigo; all with
// pipelined, redigo, goredis, rueidis, then polling; each on the same
// nodes for -duration. With pipelined and another kind that carries the
// library, the report gives that kind's ratios to pipelined of rounds/s,
// acquire p50 and p99, client and Redis CPU per operation and allocations
// (and pipelined/redigo of rounds/s and acquire p50); in contended mode with
// polling and another kind, each other kind's ratios to polling of
// acquisitions/s, Redis CPU, commands and script calls per acquisition,
// wait p99, idle gap p50 and client CPU per acquisition.
//
// # Faults
//
// -pause-node i (SIGSTOP) or -kill-node i (SIGKILL) breaks node i (counted
// from 0) -fault-after into the measurement (default -duration/3). The
// report splits acquire latency into before and after the fault (a sample
// belongs to "after" when its Lock returned after the fault began) and
// gives the ratio after/before of p99. Only nodes the tool started can be
// broken: with -addrs these flags are refused. The floor is measured only
// before the fault. Paused nodes are resumed, and killed nodes restarted
// (between -pool both runs) or stopped, before the tool exits. In-process
// miniredis nodes can be killed but not paused.
//
// # Output
//
// The report gives the backend (the Redis version from INFO server), the
// nodes, the mode and its settings (workers, clients, keys, TTL, hold);
// per pool kind: acquire and release latency percentiles (p50, p90, p99,
// max), completed lock+unlock rounds per second, allocations per round (the whole process's heap allocations
// during the measurement divided by rounds: an upper bound that includes
// the tool's own bookkeeping, and with miniredis the servers'), the
// connections the nodes accepted while measuring, errors counted by kind
// with the first message of each, Lock calls cut short by the end of the
// run and, on nodes the tool started, lock keys still present after every
// Unlock returned and the Clients closed. In takeover mode the holders
// that died never Unlock, and the last one's key (perhaps a few more, on
// single nodes) is still there when the run ends: the check does not wait
// for it, but tells those keys apart by their values, the tokens of the
// locks the dead holders took; it reports them as keys of dead holders
// (they expire by themselves within the TTL) and counts only other keys
// as leftover.
//
// Per pool kind the report also gives what the measured window (not the
// warm-up, the reference or the floor phase after it) cost per operation:
// a lock+unlock round, or in contended and takeover modes an acquisition.
// The client's CPU is this process's (getrusage(RUSAGE_SELF), user +
// system: the lock client, the Go runtime and the tool's bookkeeping; with
// in-process miniredis servers, the servers too), with the part the tool
// may have spent spinning at the end of each hold (holdFor's yield loop;
// its wall time, an upper bound). The servers' figures come from INFO all,
// asked before and after the window on a connection per node that the
// tool keeps open across it, on the nodes it started and on -addrs nodes
// alike (which count everything their other clients do too): Redis CPU
// per operation is the difference of used_cpu_sys + used_cpu_user (the
// whole redis-server process) summed over the nodes; commands per
// operation and node come from INFO commandstats (calls + rejected_calls
// of every command, those run by scripts through redis.call included),
// less the tool's own INFO calls, and, in latency mode, less the floor's
// SET and DEL (the floor runs in the window there; its CPU stays in).
// Script calls are EVALSHA + EVAL. The table has a line per node with its
// CPU, commands and script calls per operation and its five most called
// commands; the JSON has every command's count. A node that does not
// answer, restarted during the window, or has no such INFO (miniredis) is
// left out of the sums, and the report says so. In takeover mode the idle
// gap is the takeover row: there is no Unlock, the key is free from its
// expiry.
//
// -json prints the same as one JSON object on stdout
// instead of the table (durations in microseconds, fields ending in _us).
// -plot FILE draws the acquire latency distribution (percentile on a log
// axis), one curve per pool kind (in takeover mode, and one of the
// takeover latency), as SVG or PNG by FILE's extension.
//
// While measuring, a progress bar is drawn on stderr when stderr is a
// terminal, and nothing otherwise.
//
// The run always ends by itself. Interrupt (Ctrl-C) or SIGTERM ends it
// early: the report for the time measured so far is still printed and
// servers the tool started are stopped. The exit status is 0 after a
// report, 1 when the run could not be made, 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if spinFromEnv() {
		return // a helper of -busy
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
		os.Exit(1)
	}
}
