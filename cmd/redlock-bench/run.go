package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/redlock"
)

// warmupMax bounds the unmeasured first round of the workers.
const warmupMax = time.Second

// run starts or connects to the nodes, measures the mode once per pool
// kind for cfg.duration each (less if ctx ends first) and writes the
// report to stdout. It stops the nodes it started before it returns,
// whatever happens.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	ns, err := startNodes(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if serr := ns.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping nodes: %w", serr))
		}
	}()
	if cfg.mode == modeFresh {
		return runFresh(ctx, cfg, ns, stdout, stderr)
	}
	if f := cfg.fault(); f != nil && f.kind == faultPause {
		if _, ok := ns.local[f.node].(miniNode); ok {
			return fmt.Errorf("-pause-node: %w", errNoPause)
		}
	}

	kinds := cfg.poolKinds()
	prog := startProgress(stderr, time.Duration(len(kinds))*cfg.measureTime())
	var runs []*runResult
	for i, kind := range kinds {
		if i > 0 && ctx.Err() != nil {
			break // interrupted: report what was measured
		}
		r, err := runKind(ctx, cfg, ns, kind, i < len(kinds)-1, stderr)
		if err != nil {
			prog.finish()
			return fmt.Errorf("pool %s: %w", kind, err)
		}
		runs = append(runs, r)
	}
	prog.finish()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "redlock-bench: interrupted: reporting what was measured so far")
	}

	rep := newReport(cfg, ns, runs)
	if cfg.json {
		err = writeJSON(stdout, rep)
	} else {
		writeReport(stdout, rep)
	}
	if err != nil {
		return err
	}
	if cfg.plot != "" {
		if err := writePlot(cfg.plot, rep, runs); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	return nil
}

// runResult is what one run, on one pool kind, measured. Histograms are
// merged from all workers.
type runResult struct {
	pool          string
	quorum        int
	elapsed       time.Duration
	interrupted   bool // ctx ended before cfg.duration
	acquire       *hist
	release       *hist
	before, after *hist // acquire latency around the fault; nil without one
	handoff       *hist // contended mode only
	held          *hist // contended mode: how long each lock was held
	idle          *hist // contended mode: Unlock called → next Lock returned
	reference     *hist // contended mode: one worker's Lock on a key of its own, at the same hold
	refUnlock     *hist // and its Unlock: the first round after each hold
	referenceErr  error
	takeover      *hist // takeover mode only
	floor         *hist // nil when not measured
	floorErr      error // what stopped the floor, if anything
	fault         *fault
	faultAddr     string
	injected      bool  // the fault happened
	faultErr      error // breaking or healing the node failed
	rounds        int   // lock+unlock rounds with no error; takeover mode: acquisitions
	reacquired    int   // contended mode: acquisitions by the worker that released last
	overlaps      int   // contended mode: acquisitions while another worker held the lock
	restarted     int   // takeover mode: takeovers by the worker that had died
	early         int   // takeover mode: takeovers before the computed expiry, counted as 0
	unfinished    int   // Lock calls cut short by the end of the run
	longestWait   time.Duration
	waitErr       error
	errors        []*errorKind
	connsKnown    bool   // the nodes answered the connection counts below
	dials         int64  // connections the nodes accepted while measuring
	connsOpen     int64  // connections open to the nodes at the end
	leftover      int    // lock keys still on the nodes after the clients closed
	leftoverKnown bool   // the nodes were searched for leftover keys
	deadKeys      int    // takeover mode: keys of holders that died, not yet expired
	mallocs       uint64 // heap allocations of the whole process while measuring
	// What the window cost. clientCPU is this process's CPU time
	// (clientCPUKnown when the system tells it); spin is the wall time
	// holdFor spent in its yield loop, the tool's own; servers is what
	// each node spent, nil when no node could be asked; floorExcluded
	// says that the floor's commands were taken out of the servers'
	// counts (latency mode, where the floor runs in the window).
	clientCPU      time.Duration
	clientCPUKnown bool
	spin           time.Duration
	servers        []nodeCost
	floorExcluded  bool
	poll           *pollStats  // the polling kind's attempts in the window; nil for the others
	kind           *kindResult // the semaphore, rwlock and election modes; nil for the others
}

// runKind measures the mode once on pools of the given kind. more says
// that another run follows on the same nodes, so that a killed node must
// be restarted.
func runKind(ctx context.Context, cfg config, ns *nodes, kind string, more bool, stderr io.Writer) (*runResult, error) {
	if cfg.kindMode() {
		return runKindMode(ctx, cfg, ns, kind)
	}
	cs, err := newClients(cfg, kind, ns)
	if err != nil {
		return nil, err
	}
	// The clients close before their pools: Close waits for the clients'
	// background commands. (They are also closed before counting
	// leftovers.)
	defer cs.close()

	prefix, keys, err := workerKeys(cfg, kind)
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, cs, cfg, keys); err != nil {
		return nil, err
	}
	var fl *floor
	if cfg.mode == modeLatency || cfg.floor {
		if fl, err = dialFloor(ns.addrs, prefix+"floor", cfg.ttl, cfg.nodeTimeout); err != nil {
			// Not fatal: the floor needs every node, redlock only a quorum.
			fmt.Fprintf(stderr, "redlock-bench: warning: no floor measurement: %v\n", err)
		} else {
			defer fl.close()
		}
	}

	// The probe's connections are dialled before the connections are
	// counted, and stay open until they have been counted again.
	probe := dialProbe(ns.addrs)
	defer probe.close()
	before, okBefore := queryConnStats(ns.addrs)
	res, died := measure(ctx, cs, cfg, ns, keys, fl, probe, more)
	res.pool, res.quorum = kind, len(ns.addrs)/2+1
	after, okAfter := queryConnStats(ns.addrs)
	if res.connsKnown = okBefore && okAfter; res.connsKnown {
		// Less the connection of the first query itself, and the probe's.
		res.dials = after.received - before.received - int64(len(ns.addrs))
		res.connsOpen = after.connected - probe.open()
	}
	probe.close()
	if cfg.mode == modeContended && ctx.Err() == nil {
		res.reference, res.refUnlock, res.referenceErr = referencePhase(ctx, cs.clients[0], prefix+"reference", cfg)
	}
	if fl != nil {
		if cfg.mode != modeLatency && fl.err == nil {
			fl.phase(ctx, min(cfg.duration/4, floorPhaseMax))
		}
		res.floor, res.floorErr = fl.hist, fl.err
	}
	// Wait for the commands the clients still run in the background, then
	// look for lock keys that outlived their Unlock. In takeover mode the
	// holders that died never Unlock: their keys, told apart by their
	// tokens, expire by themselves and are counted apart.
	cs.closeClients()
	if ns.close != nil {
		if n, dead, err := countKeys(ns.addrs, slices.Compact(slices.Clone(keys)), died); err == nil {
			res.leftover, res.deadKeys, res.leftoverKnown = n, dead, true
		}
	}
	return res, nil
}

// workerKeys returns each worker's lock key and their common prefix. A
// random run id keeps runs against shared nodes (-addrs) from contending
// with each other; the pool kind keeps the runs of -pool both apart.
func workerKeys(cfg config, kind string) (prefix string, keys []string, err error) {
	id, err := randomHex(6)
	if err != nil {
		return "", nil, err
	}
	prefix = "redlock-bench:" + id + ":" + kind + ":"
	keys = make([]string, cfg.workers)
	for i := range keys {
		if cfg.sharedKey() {
			keys[i] = prefix + "shared"
		} else {
			keys[i] = fmt.Sprintf("%sw%d", prefix, i)
		}
	}
	return prefix, keys, nil
}

// warmUp has every worker take and release its lock once, each on its
// own Client, so that every Client's connections are dialled before
// measuring. It is bounded by warmupMax and cfg.duration. It fails only
// for errors that would fail every round, such as a TTL the client
// rejects.
func warmUp(ctx context.Context, cs *clientSet, cfg config, keys []string) error {
	ctx, cancel := context.WithTimeout(ctx, min(warmupMax, cfg.duration))
	defer cancel()
	var g errgroup.Group
	for i, key := range keys {
		c := cs.forWorker(i)
		g.Go(func() error {
			l, err := c.Lock(ctx, key, cfg.ttl)
			if err != nil {
				var qe *redlock.QuorumError
				var pe *pollError
				if errors.As(err, &qe) || errors.As(err, &pe) || errors.Is(err, errPollFailed) {
					return nil // a lock error, not a setup error: measured later
				}
				return err
			}
			_ = l.Unlock(context.WithoutCancel(ctx))
			return nil
		})
	}
	return g.Wait()
}

// measure runs the workers, and the fault if any, for cfg.duration or
// until ctx ends. It heals the fault before it returns. It also returns
// the tokens of the locks whose holders died (takeover mode). The probe
// tells what the nodes spent in the window.
func measure(ctx context.Context, cs *clientSet, cfg config, ns *nodes, keys []string, fl *floor, probe *serverProbe, more bool) (*runResult, map[string]bool) {
	f := cfg.fault()
	workers := make([]*worker, len(keys))
	for i, key := range keys {
		workers[i] = &worker{
			id:     int64(i),
			client: cs.forWorker(i),
			key:    key,
			ttl:    cfg.ttl,
			hold:   cfg.hold,
			rec:    newRecorder(f != nil, cfg.mode),
		}
	}
	if cfg.mode == modeLatency {
		workers[0].floor = fl
	}

	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	mallocs := mem.Mallocs
	var floorBefore []map[string]int64
	if cfg.mode == modeLatency && fl != nil {
		floorBefore = fl.sentCounts()
	}
	pollBefore := cs.pollStats()
	serversBefore := probe.snapshot("before the window")
	spinBefore := spinNanos.Load()
	cpuBefore, cpuOK := processCPU()
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	start := time.Now()
	var clock *faultClock
	if f != nil {
		clock = newFaultClock(start)
	}
	var ho *handoff
	var to *takeover
	switch cfg.mode {
	case modeContended:
		ho = &handoff{start: start}
	case modeTakeover:
		to = &takeover{}
	}
	var g errgroup.Group
	for _, w := range workers {
		w.fault, w.handoff, w.takeover = clock, ho, to
		g.Go(func() error {
			w.loop(runCtx)
			return nil
		})
	}
	res := &runResult{fault: f}
	if f != nil {
		res.faultAddr = ns.addrs[f.node]
		g.Go(func() error {
			res.injected, res.faultErr = f.inject(runCtx, ns.local[f.node], clock)
			return nil
		})
	}
	_ = g.Wait() // the goroutines return no error: they count them
	cpuAfter, cpuAfterOK := processCPU()
	res.elapsed, res.interrupted = time.Since(start), ctx.Err() != nil
	res.clientCPU, res.clientCPUKnown = cpuAfter-cpuBefore, cpuOK && cpuAfterOK
	res.spin = time.Duration(spinNanos.Load() - spinBefore)
	runtime.ReadMemStats(&mem)
	res.mallocs = mem.Mallocs - mallocs

	if res.injected {
		if err := f.heal(ns.local[f.node], more); err != nil {
			res.faultErr = errors.Join(res.faultErr, fmt.Errorf("healing node %d: %w", f.node, err))
		}
	}
	var floorSent []map[string]int64
	if floorBefore != nil {
		floorSent = subCounts(fl.sentCounts(), floorBefore)
		res.floorExcluded = true
	}
	// After healing: a paused node answers once it is resumed.
	res.servers = probe.costs(serversBefore, probe.snapshot("after the window"), floorSent)
	if len(cs.polling) > 0 {
		p := cs.pollStats().sub(pollBefore)
		res.poll = &p
	}
	recs := make([]*recorder, len(workers))
	for i, w := range workers {
		recs[i] = w.rec
	}
	return merge(res, recs)
}

// subCounts returns a less b, node by node and command by command.
func subCounts(a, b []map[string]int64) []map[string]int64 {
	out := make([]map[string]int64, len(a))
	for i, m := range a {
		out[i] = map[string]int64{}
		for cmd, n := range m {
			if i < len(b) {
				n -= b[i][cmd]
			}
			out[i][cmd] = n
		}
	}
	return out
}

// merge adds the workers' records to res, and returns the tokens of the
// locks whose holders died.
func merge(res *runResult, recs []*recorder) (*runResult, map[string]bool) {
	res.acquire, res.release = newHist(), newHist()
	kinds := map[string]*errorKind{}
	died := map[string]bool{}
	for _, r := range recs {
		res.acquire.merge(r.acquire)
		res.release.merge(r.release)
		res.before = mergeInto(res.before, r.before)
		res.after = mergeInto(res.after, r.after)
		res.handoff = mergeInto(res.handoff, r.handoff)
		res.held = mergeInto(res.held, r.held)
		res.idle = mergeInto(res.idle, r.idle)
		res.takeover = mergeInto(res.takeover, r.takeover)
		res.rounds += r.rounds
		res.reacquired += r.reacquired
		res.overlaps += r.overlaps
		res.restarted += r.restarted
		res.early += r.early
		res.unfinished += r.unfinished
		for _, t := range r.died {
			died[t] = true
		}
		if r.waitErr != nil && (res.waitErr == nil || r.longestWait > res.longestWait) {
			res.longestWait, res.waitErr = r.longestWait, r.waitErr
		}
		for k, e := range r.errs {
			if m, ok := kinds[k]; ok {
				m.count += e.count
				continue
			}
			kinds[k] = e
			res.errors = append(res.errors, e)
		}
	}
	sortErrors(res.errors)
	return res, died
}

// mergeInto adds from to into, making into when it is nil; it returns
// into, or nil when both are nil.
func mergeInto(into, from *hist) *hist {
	if from == nil {
		return into
	}
	if into == nil {
		into = newHist()
	}
	into.merge(from)
	return into
}

// referencePhaseMax bounds the reference phase of contended mode.
const referencePhaseMax = time.Second

// referencePhase measures, after a contended run, what one uncontended
// lock round costs at the same pace: one worker takes and releases a key
// of its own, holding it for cfg.hold each time, for a quarter of the run
// (at most referencePhaseMax). The hand-off is compared with its Lock p50.
// It also returns its Unlock latencies: the first round after each hold,
// when the machine has been idle for the hold, as the release that starts
// a hand-off is.
func referencePhase(ctx context.Context, c locker, key string, cfg config) (lock, unlock *hist, err error) {
	ctx, cancel := context.WithTimeout(ctx, min(cfg.duration/4, referencePhaseMax))
	defer cancel()
	lock, unlock = newHist(), newHist()
	for ctx.Err() == nil {
		t0 := time.Now()
		l, err := c.Lock(ctx, key, cfg.ttl)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return lock, unlock, err
		}
		lock.record(time.Since(t0))
		holdFor(ctx, cfg.hold)
		t1 := time.Now()
		if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
			return lock, unlock, err
		}
		unlock.record(time.Since(t1))
	}
	return lock, unlock, nil
}
