package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// errorPause is how long a worker waits after an error that Lock did not
// retry by itself, so that a persistent error cannot spin.
const errorPause = 10 * time.Millisecond

// Values of handoff.last besides a time.
const (
	noUnlockYet = 0  // no Unlock has returned yet
	releasing   = -1 // a holder is in Unlock
)

// handoff is what the workers of contended mode share: when the last
// Unlock was called and when it returned, in nanoseconds since the start
// of measuring (or noUnlockYet, or releasing while a holder is in Unlock),
// and which worker held the lock last. Only the holder of the lock writes
// them; the next holder reads them once its Lock returns.
type handoff struct {
	start  time.Time
	called atomic.Int64 // noUnlockYet before the first Unlock
	last   atomic.Int64
	holder atomic.Int64 // the last holder's worker id
	// holding counts the workers between their Lock returning and their
	// Unlock being called: more than one is an overlap, two holders at
	// once.
	holding atomic.Int32
}

// since returns the time from the start of measuring to t, never 0 (which
// means noUnlockYet).
func (h *handoff) since(t time.Time) int64 { return max(int64(t.Sub(h.start)), 1) }

// takeover is what the workers of takeover mode share: when the key of
// the holder that died last expires, and which worker that was. Each
// acquisition swaps in its own; the previous one is the expiry that
// acquisition took over from.
type takeover struct {
	mu     sync.Mutex
	expiry time.Time // zero until the first acquisition
	holder int64     // the worker that died last
}

// swap records that worker id acquired the lock, which will expire at
// expiry, and returns the previous holder's expiry and id; ok is false
// for the first acquisition, which took over from nobody.
func (t *takeover) swap(id int64, expiry time.Time) (prev time.Time, prevHolder int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, prevHolder = t.expiry, t.holder
	t.expiry, t.holder = expiry, id
	return prev, prevHolder, !prev.IsZero()
}

// worker is one goroutine's loop and its own records: nothing in it is
// shared, so recording takes no lock.
type worker struct {
	id       int64
	client   locker
	key      string
	ttl      time.Duration
	hold     time.Duration
	floor    *floor      // latency mode: a floor round before each lock round
	fault    *faultClock // nil without a fault
	handoff  *handoff    // contended mode only
	takeover *takeover   // takeover mode only
	rec      *recorder
}

// recorder is what one worker measured.
type recorder struct {
	acquire, release *hist
	before, after    *hist    // acquire, split at the fault; nil without one
	handoff          *hist    // contended mode only
	idle             *hist    // contended mode: from an Unlock being called to the next Lock returning
	held             *hist    // contended mode: from Lock returning to Unlock being called
	takeover         *hist    // takeover mode only
	reacquired       int      // contended mode: acquisitions right after this worker's own Unlock
	overlaps         int      // contended mode: acquisitions while another worker held the lock
	restarted        int      // takeover mode: takeovers of this worker's own dead lock
	early            int      // takeover mode: takeovers before the computed expiry
	died             []string // takeover mode: the tokens of the locks this worker died holding
	rounds           int      // lock+unlock rounds with no error; takeover mode: acquisitions
	unfinished       int      // Lock calls cut short by the end of the run
	longestWait      time.Duration
	waitErr          error
	errs             map[string]*errorKind
}

func newRecorder(withFault bool, mode string) *recorder {
	r := &recorder{acquire: newHist(), release: newHist(), errs: map[string]*errorKind{}}
	if withFault {
		r.before, r.after = newHist(), newHist()
	}
	switch mode {
	case modeContended:
		r.handoff, r.held, r.idle = newHist(), newHist(), newHist()
	case modeTakeover:
		r.takeover = newHist()
	}
	return r
}

// addErr counts err under its kind.
func (r *recorder) addErr(kind string, err error) {
	if e, ok := r.errs[kind]; ok {
		e.count++
		return
	}
	r.errs[kind] = &errorKind{kind: kind, count: 1, first: err.Error()}
}

// failed counts an acquisition that failed after took: cut short when
// the run ended while it waited, an error otherwise, after which the
// worker pauses for errorPause.
func (r *recorder) failed(ctx context.Context, err error, took time.Duration) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The run ended while waiting: not an error of the lock.
		r.unfinished++
		if r.waitErr == nil || took > r.longestWait {
			r.longestWait, r.waitErr = took, err
		}
		return
	}
	r.addErr(errKind("acquire", err), err)
	faults.Sleep(ctx, errorPause)
}

// loop takes and releases the lock until ctx ends.
func (w *worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		w.floorRound()
		w.lockRound(ctx)
	}
}

// floorRound makes one floor round, while there is a floor and no fault
// has begun. An error ends the floor: its connections are not usable.
func (w *worker) floorRound() {
	if w.floor == nil || w.floor.err != nil || (w.fault != nil && w.fault.begun(time.Now())) {
		return
	}
	if err := w.floor.round(); err != nil {
		w.floor.err = err
		if w.fault != nil && w.fault.begun(time.Now()) {
			// The fault began during the round: expected, not an error.
			w.floor.err = fmt.Errorf("stopped by the fault: %w", err)
			return
		}
		w.rec.addErr("floor: round failed, floor stopped", err)
	}
}

// lockRound is one Lock (retrying until acquired or ctx ends), a hold, and
// an Unlock; in takeover mode the holder dies instead of the Unlock.
func (w *worker) lockRound(ctx context.Context) {
	r := w.rec
	t0 := time.Now()
	l, err := w.client.Lock(ctx, w.key, w.ttl)
	t1 := time.Now()
	took := t1.Sub(t0)
	if err != nil {
		r.failed(ctx, err, took)
		return
	}
	r.acquire.record(took)
	if w.fault != nil {
		if w.fault.begun(t1) {
			r.after.record(took)
		} else {
			r.before.record(took)
		}
	}
	if w.takeover != nil {
		w.die(ctx, l, t1)
		return
	}
	if w.handoff != nil {
		if w.handoff.holding.Add(1) != 1 {
			r.overlaps++
		}
		w.recordHandoff(t1)
	}
	holdFor(ctx, w.hold)

	// A lock that was taken is always released, even after the run ended:
	// Unlock's own node timeout bounds it.
	t2 := time.Now()
	if w.handoff != nil {
		w.handoff.holding.Add(-1)
		w.handoff.holder.Store(w.id)
		w.handoff.last.Store(releasing)
		w.handoff.called.Store(w.handoff.since(t2))
		r.held.record(t2.Sub(t1))
	}
	err = l.Unlock(context.WithoutCancel(ctx))
	t3 := time.Now()
	if w.handoff != nil {
		w.handoff.last.CompareAndSwap(releasing, w.handoff.since(t3))
	}
	r.release.record(t3.Sub(t2))
	if err != nil {
		r.addErr(errKind("release", err), err)
		return
	}
	r.rounds++
}

// recordHandoff records the time from the previous holder's Unlock
// returning to this worker's Lock returning at t1 (a previous holder
// still in Unlock counts as a hand-off of 0), and from that Unlock being
// called: how long the lock sat between two critical sections while the
// workers wanted it. It also counts the acquisitions that went back to
// the worker that released last.
func (w *worker) recordHandoff(t1 time.Time) {
	h := w.handoff
	now := h.since(t1)
	if called := h.called.Load(); called != noUnlockYet {
		w.rec.idle.record(time.Duration(now - called))
	}
	switch last := h.last.Load(); last {
	case noUnlockYet:
		return
	case releasing:
		w.rec.handoff.record(0)
	default:
		w.rec.handoff.record(time.Duration(now - last))
	}
	if h.holder.Load() == w.id {
		w.rec.reacquired++
	}
}

// die is the rest of a takeover-mode round, from the Lock that returned
// at t1: record the takeover, hold the lock, and die holding it. A dead
// holder never calls Unlock: it sits out until its key has expired (its
// SETs landed before t1, so on a quorum by t1+ttl at the latest, to the
// nodes' millisecond precision), then takes part again, like a process
// that restarted.
func (w *worker) die(ctx context.Context, l heldLock, t1 time.Time) {
	expiry := t1.Add(w.ttl)
	w.recordTakeover(t1, expiry)
	w.rec.died = append(w.rec.died, l.Token())
	w.rec.rounds++
	holdFor(ctx, w.hold)
	faults.Sleep(ctx, time.Until(expiry))
}

// recordTakeover records, for an acquisition at t1 whose key expires at
// expiry, the time from the previous holder's key expiring to t1: how
// long the expired lock sat free while the workers wanted it. An
// acquisition before that expiry (a node's key can expire a little
// before it: its SET landed before the holder's Lock returned) counts as
// 0, and as early. It also counts the takeovers by the worker that had
// died holding the lock.
func (w *worker) recordTakeover(t1, expiry time.Time) {
	prev, holder, ok := w.takeover.swap(w.id, expiry)
	if !ok {
		return
	}
	d := t1.Sub(prev)
	if d < 0 {
		d = 0
		w.rec.early++
	}
	w.rec.takeover.record(d)
	if holder == w.id {
		w.rec.restarted++
	}
}

// errorKind counts the errors of one kind.
type errorKind struct {
	kind  string
	count int
	first string // the first error's text
}

// errKind names the kind of an error from Lock ("acquire") or Unlock
// ("release"), of the redlock client or of the polling one.
func errKind(op string, err error) string {
	var qe *redlock.QuorumError
	var pe *pollError
	switch {
	case errors.Is(err, pool.ErrClosed):
		return op + ": client closed"
	case errors.As(err, &pe):
		return op + ": " + pe.kind()
	case !errors.As(err, &qe):
		return op + ": other"
	case qe.Count(redlock.NodeRefused) > len(qe.Nodes)-qe.Quorum:
		if op == "acquire" {
			return op + ": held by another owner"
		}
		return op + ": not held any more (expired or taken)"
	case qe.Count(redlock.NodeOK) >= qe.Quorum:
		return op + ": too little validity left"
	case qe.Count(redlock.NodeFailed) > 0:
		return op + ": node errors"
	default:
		return op + ": nodes did not reply within the node timeout"
	}
}
