package main

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/redlock"
)

// The semaphore, rwlock and election modes: the other kinds of lock on
// the one acquisition engine, measured on the same nodes and Clients as
// the mutex modes. The window whose cost the report gives (Redis CPU per
// acquisition) is the contended phase of semaphore mode, and the whole
// run of the rwlock and election modes.

// kindResult is what the semaphore, rwlock and election modes add to a
// runResult.
type kindResult struct {
	// Semaphore mode, uncontended phase: one worker makes TryAcquire +
	// Unlock rounds and mutex TryLock + Unlock rounds in turn, on the
	// same Client and nodes.
	semRound, mutexRound *hist
	uncontended          time.Duration // how long that phase ran
	// rwlock mode: the waits and acquisitions of readers and of writers,
	// and the hand-offs into readers and into a writer (rwGaps).
	reader, writer      *recorder
	toReaders, toWriter *hist
	// Election mode: from a leader's death, and from its resignation, to
	// the next leader's Campaign returning.
	death, resign *hist
	succession    *succession
	// Semaphore mode: acquisitions that made more holders than permits;
	// rwlock mode: a writer's acquisition with another holder there, or a
	// reader's with a writer there. 0 unless the kind failed.
	overlaps int
}

// kindRun is one run of a kind mode on one pool kind.
type kindRun struct {
	cfg    config
	ns     *nodes
	cs     *clientSet
	prefix string // the run's key prefix: names of its own
	probe  *serverProbe
	res    *runResult
}

// runKindMode measures a semaphore, rwlock or election mode once on pools
// of the given kind, as runKind does the mutex modes: Clients of their
// own, dialled by a warm-up, and the nodes' costs over the window.
func runKindMode(ctx context.Context, cfg config, ns *nodes, kind string) (*runResult, error) {
	cs, err := newClients(cfg, kind, ns)
	if err != nil {
		return nil, err
	}
	defer cs.close()
	prefix, keys, err := workerKeys(cfg, kind)
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, cs, cfg, keys); err != nil {
		return nil, err
	}
	probe := dialProbe(ns.addrs)
	defer probe.close()
	k := &kindRun{cfg: cfg, ns: ns, cs: cs, prefix: prefix, probe: probe,
		res: &runResult{pool: kind, quorum: len(ns.addrs)/2 + 1, kind: &kindResult{}}}
	switch cfg.mode {
	case modeSemaphore:
		k.semaphore(ctx)
	case modeRWLock:
		k.rwlock(ctx)
	case modeElection:
		err = k.election(ctx)
	}
	return k.res, err
}

// client returns worker i's redlock Client (kind modes refuse the polling
// client).
func (k *kindRun) client(i int) *redlock.Client {
	return k.cs.forWorker(i).(*redlockClient).c
}

// window runs fn with a context that ends after cfg.duration (or with
// ctx), and records in k.res how long it ran and what this process and
// the nodes spent meanwhile.
func (k *kindRun) window(ctx context.Context, fn func(ctx context.Context)) {
	res := k.res
	before := k.probe.snapshot("before the window")
	cpuBefore, cpuOK := processCPU()
	spinBefore := spinNanos.Load()
	runCtx, cancel := context.WithTimeout(ctx, k.cfg.duration)
	start := time.Now()
	fn(runCtx)
	cancel()
	cpuAfter, cpuAfterOK := processCPU()
	res.elapsed, res.interrupted = time.Since(start), ctx.Err() != nil
	res.clientCPU, res.clientCPUKnown = cpuAfter-cpuBefore, cpuOK && cpuAfterOK
	res.spin = time.Duration(spinNanos.Load() - spinBefore)
	res.servers = k.probe.costs(before, k.probe.snapshot("after the window"), nil)
}

// holder is one worker of the semaphore and rwlock modes: it takes with
// acquire, holds for hold, releases, and again, until ctx ends. enter
// and leave count the holders around the hold; enter reports false when
// the acquisition broke the kind's rule (too many holders, a writer with
// others).
type holder struct {
	acquire func(ctx context.Context) (*redlock.Lock, error)
	enter   func() bool
	leave   func()
	hold    time.Duration
	rec     *recorder
	gap     *hist // rwlock mode: the hand-offs into this holder (rwGaps); nil otherwise
}

// loop makes rounds until ctx ends.
func (h *holder) loop(ctx context.Context) {
	for ctx.Err() == nil {
		h.round(ctx)
	}
}

// round is one acquisition, hold and Unlock. A lock that was taken is
// always released, even after the run ended.
func (h *holder) round(ctx context.Context) {
	r := h.rec
	t0 := time.Now()
	l, err := h.acquire(ctx)
	if err != nil {
		r.failed(ctx, err, time.Since(t0))
		return
	}
	r.acquire.record(time.Since(t0))
	if !h.enter() {
		r.overlaps++
	}
	holdFor(ctx, h.hold)
	h.leave()
	t2 := time.Now()
	err = l.Unlock(context.WithoutCancel(ctx))
	r.release.record(time.Since(t2))
	if err != nil {
		r.addErr(errKind("release", err), err)
		return
	}
	r.rounds++
}

// runHolders runs the holders until ctx ends and adds their records to
// k.res.
func (k *kindRun) runHolders(ctx context.Context, hs []*holder) {
	var g errgroup.Group
	for _, h := range hs {
		g.Go(func() error {
			h.loop(ctx)
			return nil
		})
	}
	_ = g.Wait() // the holders return no error: they count them
	recs := make([]*recorder, len(hs))
	for i, h := range hs {
		recs[i] = h.rec
	}
	kr := k.res.kind
	k.res, _ = merge(k.res, recs)
	for _, r := range recs {
		kr.overlaps += r.overlaps
	}
}

// semaphore measures semaphore mode: the uncontended phase, then the
// contended one, each for cfg.duration.
func (k *kindRun) semaphore(ctx context.Context) {
	k.uncontended(ctx)
	if ctx.Err() != nil {
		return
	}
	name := k.prefix + "semaphore"
	var holding atomic.Int32
	hs := make([]*holder, k.cfg.workers)
	for i := range hs {
		sem := k.client(i).Semaphore(name, k.cfg.permits)
		hs[i] = &holder{
			acquire: func(ctx context.Context) (*redlock.Lock, error) { return sem.Acquire(ctx, k.cfg.ttl) },
			enter:   func() bool { return holding.Add(1) <= int32(k.cfg.permits) },
			leave:   func() { holding.Add(-1) },
			hold:    k.cfg.hold,
			rec:     newRecorder(false, k.cfg.mode),
		}
	}
	k.window(ctx, func(ctx context.Context) { k.runHolders(ctx, hs) })
}

// uncontended runs the uncontended phase of semaphore mode for
// cfg.duration: one worker, on one Client, makes a semaphore round
// (TryAcquire + Unlock) and a mutex round (TryLock + Unlock) in turn,
// each first every other time, so that the machine's changing load
// falls on both alike.
func (k *kindRun) uncontended(ctx context.Context) {
	kr := k.res.kind
	kr.semRound, kr.mutexRound = newHist(), newHist()
	c := k.client(0)
	sem := c.Semaphore(k.prefix+"alone", k.cfg.permits)
	key := k.prefix + "mutex"
	rounds := []func(ctx context.Context) (*redlock.Lock, error){
		func(ctx context.Context) (*redlock.Lock, error) { return sem.TryAcquire(ctx, k.cfg.ttl) },
		func(ctx context.Context) (*redlock.Lock, error) { return c.TryLock(ctx, key, k.cfg.ttl) },
	}
	hists := []*hist{kr.semRound, kr.mutexRound}
	rec := newRecorder(false, k.cfg.mode)
	ctx, cancel := context.WithTimeout(ctx, k.cfg.duration)
	defer cancel()
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		first := i % 2
		tryRound(ctx, rounds[first], hists[first], rec)
		tryRound(ctx, rounds[1-first], hists[1-first], rec)
	}
	kr.uncontended = time.Since(start)
	k.res.errors = append(k.res.errors, errorKinds(rec)...)
}

// tryRound is one round of the uncontended phase: take (one attempt),
// then Unlock, recorded in h as one duration.
func tryRound(ctx context.Context, take func(ctx context.Context) (*redlock.Lock, error), h *hist, rec *recorder) {
	t0 := time.Now()
	l, err := take(ctx)
	if err != nil {
		if ctx.Err() == nil {
			rec.addErr(errKind("uncontended acquire", err), err)
		}
		return
	}
	err = l.Unlock(context.WithoutCancel(ctx))
	if err != nil {
		rec.addErr(errKind("uncontended release", err), err)
		return
	}
	h.record(time.Since(t0))
}

// errorKinds returns a recorder's errors, for merging by merge.
func errorKinds(r *recorder) []*errorKind {
	var out []*errorKind
	for _, e := range r.errs {
		out = append(out, e)
	}
	return out
}

// rwlock measures rwlock mode for cfg.duration: readers take RLock,
// writers Lock, on one read-write lock, and hold it for cfg.hold.
func (k *kindRun) rwlock(ctx context.Context) {
	name := k.prefix + "rwlock"
	var readers, writers atomic.Int32
	var gaps rwGaps
	kr := k.res.kind
	kr.reader, kr.writer = newRecorder(false, k.cfg.mode), newRecorder(false, k.cfg.mode)
	kr.toReaders, kr.toWriter = newHist(), newHist()
	hs := make([]*holder, k.cfg.workers)
	for i := range hs {
		rw := k.client(i).RWLock(name)
		h := &holder{hold: k.cfg.hold, rec: newRecorder(false, k.cfg.mode), gap: newHist()}
		if i < k.cfg.readers {
			h.acquire = func(ctx context.Context) (*redlock.Lock, error) { return rw.RLock(ctx, k.cfg.ttl) }
			h.enter = func() bool {
				alone := readers.Add(1) == 1
				ok := writers.Load() == 0
				gaps.entered(h.gap, alone && ok)
				return ok
			}
			h.leave = func() { gaps.left(readers.Add(-1) == 0 && writers.Load() == 0) }
		} else {
			h.acquire = func(ctx context.Context) (*redlock.Lock, error) { return rw.Lock(ctx, k.cfg.ttl) }
			h.enter = func() bool {
				first := writers.Add(1) == 1 && readers.Load() == 0
				gaps.entered(h.gap, first)
				return first
			}
			h.leave = func() { gaps.left(writers.Add(-1) == 0 && readers.Load() == 0) }
		}
		hs[i] = h
	}
	k.window(ctx, func(ctx context.Context) { k.runHolders(ctx, hs) })
	for i, h := range hs {
		side, gap := kr.writer, kr.toWriter
		if i < k.cfg.readers {
			side, gap = kr.reader, kr.toReaders
		}
		side.acquire.merge(h.rec.acquire)
		side.rounds += h.rec.rounds
		gap.merge(h.gap)
	}
}

// rwGaps times rwlock mode's hand-offs: from the Unlock call of the
// holder that left the lock to no one (by the workers' own count) to the
// next acquisition's return, the first of a readers' turn or a writer's.
// The workers' goroutines call it around their holds.
type rwGaps struct {
	freeSince atomic.Int64 // UnixNano when the last holder left; 0 while held, and once the next one came
}

// left notes a holder leaving, just before its Unlock call; last says
// that no one holds the lock now.
func (g *rwGaps) left(last bool) {
	if last {
		g.freeSince.Store(time.Now().UnixNano())
	}
}

// entered notes an acquisition that returned; first says that no one
// held the lock before it. The first one after the lock was left to no
// one records the gap in into.
func (g *rwGaps) entered(into *hist, first bool) {
	if !first {
		return
	}
	if since := g.freeSince.Swap(0); since != 0 {
		into.record(time.Duration(time.Now().UnixNano() - since))
	}
}
