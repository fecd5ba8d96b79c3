package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/redlock"
)

// The names the workers lock. Mutexes, multi-key locks and restored
// locks share the mutex keys, so that the kinds are checked against each
// other; the long keys are client 1's only (TTLs past restart safety's
// bound are in model only for the Client that used them).
var (
	mutexKeys = []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	longKeys  = []string{"long1", "long2"}
)

const (
	semName       = "sem"
	semPermits    = 2
	rwName        = "rw"
	electionName  = "el"
	livenessBound = 10 * time.Second // a waiting call in the quiet window is served by then
)

// worker is one goroutine of a Client, taking locks of every kind.
type worker struct {
	w    *world
	sc   *simClient
	ci   int
	name string
	rng  *rand.Rand
}

func (wk *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		wk.once(ctx)
		sleep(ctx, time.Duration(wk.rng.Intn(20))*time.Millisecond)
	}
}

// sleep sleeps for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ttl draws a TTL within every Client's restart-safety bound; now and
// then one of the node timeout, which a slow round can outlast
// (the lock then fails, as its validity ran out during the round).
func (wk *worker) ttl() time.Duration {
	if wk.rng.Intn(20) == 0 {
		return wk.w.set.nodeTimeout
	}
	return []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second}[wk.rng.Intn(3)]
}

// op is one acquisition: what it takes, how the checker sees it.
type op struct {
	kind    string
	key     string // the checker's key
	counter bool   // writes the store's counter of the lock's key
	fenced  bool
	shared  bool
	permits int
	wait    bool // a waiting call (Lock, Acquire, Campaign, ...)
	abandon bool // hold to the end of the validity and never release (a holder that stops)
	ttl     time.Duration
	take    func(ctx context.Context) (*redlock.Lock, error)
}

func (wk *worker) once(ctx context.Context) {
	c := wk.sc.c
	ttl := wk.ttl()
	wait := wk.rng.Intn(2) == 0
	var o op
	if wk.ci == 0 && wk.w.set.longKeys && wk.rng.Intn(100) < 15 {
		wk.long(ctx)
		return
	}
	switch r := wk.rng.Intn(100); {
	case r < 14:
		wk.doJob(ctx, ttl)
		return
	case r < 17:
		wk.leader(ctx)
		return
	case r < 20:
		wk.runLeader(ctx, ttl)
		return
	case r < 26:
		wk.restore(ctx, ttl)
		return
	case r < 31:
		// A holder that keeps the lock to the last moment of its validity
		// and never releases it (it stopped): whoever waits takes the key
		// when the nodes let it expire, which only the drift allowance
		// keeps after the holder's validity.
		key := mutexKeys[wk.rng.Intn(len(mutexKeys))]
		o = op{kind: "mutex", key: key, counter: true, abandon: true, ttl: ttl,
			take: func(ctx context.Context) (*redlock.Lock, error) { return c.TryLock(ctx, key, ttl) }}
	case r < 50:
		key := mutexKeys[wk.rng.Intn(len(mutexKeys))]
		var opts []redlock.LockOption
		fenced := wk.rng.Intn(2) == 0
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		take := c.TryLock
		if wait {
			take = c.Lock
		}
		o = op{kind: "mutex", key: key, counter: true, fenced: fenced, wait: wait, ttl: ttl,
			take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, key, ttl, opts...) }}
	case r < 60:
		k1, k2 := mutexKeys[wk.rng.Intn(len(mutexKeys))], mutexKeys[wk.rng.Intn(len(mutexKeys))]
		keys := []string{k1, k2}
		take := c.TryLockMulti
		if wait {
			take = c.LockMulti
		}
		o = op{kind: "multi", key: "", counter: true, wait: wait, ttl: ttl,
			take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, keys, ttl) }}
	case r < 74:
		s := c.Semaphore(semName, semPermits)
		take := s.TryAcquire
		if wait {
			take = s.Acquire
		}
		o = op{kind: "semaphore", key: semName, counter: true, permits: semPermits, wait: wait, ttl: ttl,
			take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, ttl) }}
	case r < 93:
		rw := c.RWLock(rwName)
		read := wk.rng.Intn(2) == 0
		var take func(context.Context, time.Duration, ...redlock.LockOption) (*redlock.Lock, error)
		switch {
		case read && wait:
			take = rw.RLock
		case read:
			take = rw.TryRLock
		case wait:
			take = rw.Lock
		default:
			take = rw.TryLock
		}
		kind := "rw-write"
		if read {
			kind = "rw-read"
		}
		o = op{kind: kind, key: rwName, counter: !read, shared: read, wait: wait, ttl: ttl,
			take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, ttl) }}
	default:
		e := c.Election(electionName)
		o = op{kind: "election", key: electionName, counter: true, fenced: true, wait: true, ttl: ttl,
			take: func(ctx context.Context) (*redlock.Lock, error) { return e.Campaign(ctx, wk.name, ttl) }}
	}
	wk.acquire(ctx, o)
}

// callContext bounds a call: a waiting call begun in the settled quiet
// window gets livenessBound and must be served by then.
func (wk *worker) callContext(ctx context.Context, wait bool) (context.Context, context.CancelFunc, bool) {
	bound := time.Duration(50+wk.rng.Intn(2000)) * time.Millisecond
	checked := wait && wk.w.settledNow()
	if checked {
		bound = livenessBound
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	return ctx, cancel, checked
}

// acquire takes o's lock, holds it for a while, maybe extends it, writes
// the resource and releases it.
func (wk *worker) acquire(ctx context.Context, o op) {
	w := wk.w
	w.noteTTL(o.ttl)
	cctx, cancel, checked := wk.callContext(ctx, o.wait)
	defer cancel()
	called := w.now()
	l, err := o.take(cctx)
	if err != nil {
		w.trace.add(w.now(), fmt.Sprintf("%s %s %s ttl=%v: %v", wk.name, o.kind, o.key, o.ttl, shortErr(err)))
		if checked && ctx.Err() == nil && w.settledNow() {
			w.violate("liveness: %s's waiting %s of %s, begun at %v in the quiet window, not served within %v: %v", wk.name, o.kind, o.key, called, livenessBound, shortErr(err))
		}
		return
	}
	h := wk.held(o, l, called)
	if o.abandon {
		sleep(context.Background(), h.end-w.now()-time.Millisecond)
		if o.counter {
			ck := h.counterKey(o.key, l)
			w.store.write(ck, h.read[ck]+1)
		}
		w.record(wk, h, l, h.end)
		return
	}
	hold := time.Duration(wk.rng.Intn(150)) * time.Millisecond
	sleep(context.Background(), hold)
	if o.kind == "election" {
		if wk.rng.Intn(2) == 0 {
			// Its record round reached only a quorum.
			i := wk.rng.Intn(len(w.nodes))
			w.count(i, fRecordLost, 0)
			w.loseRecord(i)
		}
		// A leader leads on: it extends its lease a few times (each
		// extension writes its record back where it is missing).
		for range wk.rng.Intn(5) {
			if err := l.Extend(context.Background(), o.ttl); err != nil {
				h.notExtended(wk, l, err)
				break
			}
			h.extended(wk, l)
			sleep(context.Background(), time.Duration(wk.rng.Intn(int(o.ttl/time.Millisecond)/2))*time.Millisecond)
		}
	} else if wk.rng.Intn(4) == 0 {
		ttl := wk.ttl()
		if err := l.Extend(context.Background(), ttl); err == nil {
			h.extended(wk, l)
		} else {
			h.notExtended(wk, l, err)
		}
		sleep(context.Background(), time.Duration(wk.rng.Intn(100))*time.Millisecond)
	}
	if o.kind != "election" && !h.extendFailed && wk.rng.Intn(6) == 0 {
		// Not after a failed extension: its commands may land after the
		// new holder's extension and end the key sooner than the new
		// holder's validity says (docs/kinds.md, "Handing a lock to
		// another process"; seed 534100211 found it).
		l = wk.handOver(o, l, h)
	}
	h.finish(wk, l, o.counter, o.fenced)
}

// handOver hands the lock l of any kind to the next Client by its Handle
// (as a process hands it to another), which extends it; the hold goes on
// under the restored lock, which writes and releases as the original
// would. A failed extension leaves the restored lock without validity:
// its holder stops there.
func (wk *worker) handOver(o op, l *redlock.Lock, h *holding) *redlock.Lock {
	w := wk.w
	other := w.clients[(wk.ci+1)%len(w.clients)]
	r, err := other.c.RestoreHandle(l.Handle())
	if err != nil {
		w.violate("%s's %s %v: its Handle was not restored: %v", wk.name, o.kind, h.keys, err)
		return l
	}
	if err := r.Extend(context.Background(), o.ttl); err == nil {
		// The restored lock's validity, on the other Client's clock.
		h.end = w.now() + other.clk.RealDuration(r.Validity())
		w.trace.add(w.now(), fmt.Sprintf("%s handed %s %v to %s: held until %v", wk.name, o.kind, h.keys, other.name, h.end))
		// The new holder works under it for a while.
		sleep(context.Background(), time.Duration(wk.rng.Int63n(int64(o.ttl/2))))
	} else {
		h.end = min(h.end, w.now())
		w.trace.add(w.now(), fmt.Sprintf("%s handed %s %v to %s, whose extension failed: %v", wk.name, o.kind, h.keys, other.name, shortErr(err)))
	}
	return r
}

// shortErr is err's text, cut for the trace.
func shortErr(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// holding is a hold in progress.
type holding struct {
	o      op
	keys   []string // the checker's keys (a multi-key lock's every key)
	start  time.Duration
	end    time.Duration // the validity's end, in real (virtual) time
	called time.Duration
	fence  uint64
	read   map[string]int64 // the counters read when the hold began
	ctxEnd time.Time        // a leader's: when its lock's context ended (under w.mu)
	// extendFailed: an extension of the lock failed; its commands may
	// still land on nodes (a stalled client's come late).
	extendFailed bool
}

// realUntil is when l's validity ends (Until) in real time, also when
// that has passed: a validity that a failed extension cut may have ended
// before the call returned.
func (wk *worker) realUntil(l *redlock.Lock) time.Duration {
	now := wk.w.now()
	until := l.Until()
	if until.IsZero() {
		return now
	}
	return now + wk.sc.clk.RealDuration(until.Sub(wk.sc.clk.Now()))
}

// realValidity is the validity left on l in real time.
func (wk *worker) realValidity(l *redlock.Lock) time.Duration {
	return wk.sc.clk.RealDuration(l.Validity())
}

func (wk *worker) held(o op, l *redlock.Lock, called time.Duration) *holding {
	w := wk.w
	now := w.now()
	h := &holding{o: o, start: now, end: now + wk.realValidity(l), called: called, keys: []string{o.key}, fence: l.Fence(), read: map[string]int64{}}
	if h.end <= now {
		// An acquisition succeeds only with validity left (and no time
		// passes in the simulation between its decision and here).
		w.violate("%s's %s of %s returned a lock with no validity left (token %s)", wk.name, o.kind, o.key, tokenTail(l.Token()))
	}
	if o.kind == "multi" {
		h.keys = l.Keys()
	}
	for _, k := range h.keys {
		ck := h.counterKey(k, l)
		h.read[ck] = w.store.read(ck)
	}
	w.mu.Lock()
	w.acquired++
	w.kinds[o.kind]++
	w.mu.Unlock()
	w.trace.add(now, fmt.Sprintf("%s %s %v ttl=%v: held until %v fence=%d token=%s", wk.name, o.kind, h.keys, o.ttl, h.end, l.Fence(), tokenTail(l.Token())))
	if o.fenced {
		w.mu.Lock()
		w.fencedOps = append(w.fencedOps, fencedOp{key: o.kind + ":" + o.key, call: called, ret: now, fence: l.Fence()})
		w.mu.Unlock()
	}
	if o.kind == "election" {
		w.noteLeader(l.Token(), h)
		// The lock extends itself until its context ends: the hold lasts
		// that long (finish).
		context.AfterFunc(l.Context(), func() {
			w.mu.Lock()
			h.ctxEnd = time.Now()
			w.mu.Unlock()
		})
	}
	return h
}

func tokenTail(t string) string {
	if len(t) > 8 {
		return t[len(t)-8:]
	}
	return t
}

// notExtended ends the hold where a failed extension left the lock's
// validity: none when the holder was told its lock is lost, the shorter
// TTL's when the extension asked for less (the nodes may have run it);
// after a failure that proves nothing the validity it had stands.
func (h *holding) notExtended(wk *worker, l *redlock.Lock, err error) {
	w := wk.w
	h.extendFailed = true
	h.end = min(h.end, wk.realUntil(l))
	w.trace.add(w.now(), fmt.Sprintf("%s extend %s %v: %v (held until %v)", wk.name, h.o.kind, h.keys, shortErr(err), h.end))
}

// counterKey is the store's key for the lock's key k: the checker's, or a
// semaphore's permit slot (each guards its own resource).
func (h *holding) counterKey(k string, l *redlock.Lock) string {
	if h.o.kind == "semaphore" {
		return "sem:" + l.Key()
	}
	return h.o.kind0() + ":" + k
}

// extended moves the hold's end to what an extension gave it: the new
// validity replaces the old one, shorter or longer (an extension to a
// shorter TTL shortens the key's life on the nodes).
func (h *holding) extended(wk *worker, l *redlock.Lock) {
	h.end = wk.w.now() + wk.realValidity(l)
	wk.w.trace.add(wk.w.now(), fmt.Sprintf("%s extended %s %v: held until %v", wk.name, h.o.kind, h.keys, h.end))
}

// finish writes the resource while the lock is still valid, releases the
// lock and records the hold.
func (h *holding) finish(wk *worker, l *redlock.Lock, counter, fenced bool) {
	w := wk.w
	if v := wk.realValidity(l); v > 0 {
		// A leader's lock extends itself (Campaign): its validity is the
		// newest extension's.
		h.end = max(h.end, w.now()+v)
	}
	w.mu.Lock()
	if !h.ctxEnd.IsZero() {
		// Its context ended (lost, expired): it held until then.
		h.end = max(h.end, h.ctxEnd.Sub(w.start))
	}
	w.mu.Unlock()
	if w.now() < h.end-2*time.Millisecond {
		for _, k := range h.keys {
			ck := h.counterKey(k, l)
			if counter {
				w.store.write(ck, h.read[ck]+1)
			}
			if fenced && !w.store.fencedWrite(h.o.kind+":"+ck, l.Fence()) {
				w.mu.Lock()
				w.fenceRefusals = append(w.fenceRefusals, fmt.Sprintf("fenced write of %s by %s with fence %d refused at %v while its lock was valid (until %v)", ck, wk.name, l.Fence(), w.now(), h.end))
				w.mu.Unlock()
			}
		}
	}
	release := w.now()
	if err := l.Unlock(context.Background()); err != nil && !errors.Is(err, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrExpired) {
		w.trace.add(w.now(), fmt.Sprintf("%s unlock %s %v: %v", wk.name, h.o.kind, h.keys, shortErr(err)))
	}
	w.record(wk, h, l, min(h.end, release))
}

// record adds a hold to the checker.
func (w *world) record(wk *worker, h *holding, l *redlock.Lock, end time.Duration) {
	w.trace.add(w.now(), fmt.Sprintf("%s released %s %v (window %v-%v)", wk.name, h.o.kind, h.keys, h.start, end))
	for _, k := range h.keys {
		w.chk.Add(faults.Hold{Key: h.o.kind0() + ":" + k, Kind: h.o.kind, Worker: wk.name, Shared: h.o.shared,
			Permits: h.o.permits, Start: h.start, End: end, Fence: l.Fence()})
	}
}

// kind0 is the checker's namespace of a kind: mutexes, multi-key and
// restored locks share one.
func (o op) kind0() string {
	switch o.kind {
	case "mutex", "multi", "restore", "do", "long":
		return "mutex"
	case "rw-read", "rw-write":
		return "rw"
	}
	return o.kind
}
