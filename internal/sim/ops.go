package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// long takes a long key (client 1 only) with a TTL within restart
// safety's bound and extends it past the bound, holding it across the
// faults: the Client must then wait the longer TTL out on a node that
// restarted.
func (wk *worker) long(ctx context.Context) {
	w := wk.w
	key := longKeys[wk.rng.Intn(len(longKeys))]
	ttl := w.set.maxTTL
	l, h := wk.tryHold(ctx, op{kind: "long", key: key, counter: true, ttl: ttl})
	if l == nil {
		return
	}
	long := ttl * time.Duration(2+wk.rng.Intn(3))
	w.noteTTL(long)
	for range 1 + wk.rng.Intn(3) {
		sleep(context.Background(), time.Duration(wk.rng.Intn(int(ttl/time.Millisecond)/2))*time.Millisecond)
		if err := l.Extend(context.Background(), long); err != nil {
			h.notExtended(wk, l, err)
			break
		}
		h.extended(wk, l)
	}
	sleep(context.Background(), time.Duration(wk.rng.Intn(int(long/time.Millisecond)))*time.Millisecond)
	h.finish(wk, l, true, false)
}

// doJob runs a job under Client.Do with auto-extension, longer than the
// TTL; the hold ends when the job's context does or the job returns.
func (wk *worker) doJob(ctx context.Context, ttl time.Duration) {
	w := wk.w
	key := mutexKeys[wk.rng.Intn(len(mutexKeys))]
	w.noteTTL(ttl)
	o := op{kind: "do", key: key, counter: true, wait: true, ttl: ttl}
	cctx, cancel, checked := wk.callContext(ctx, true)
	defer cancel()
	called := w.now()
	job := time.Duration(wk.rng.Intn(int(2 * ttl / time.Millisecond)))
	ran := false
	err := wk.sc.c.Do(cctx, key, ttl, func(jctx context.Context) error {
		ran = true
		start := w.now()
		w.mu.Lock()
		w.acquired++
		w.kinds[o.kind]++
		w.mu.Unlock()
		v := w.store.read("mutex:" + key)
		t := time.NewTimer(job * time.Millisecond)
		defer t.Stop()
		lost := false
		select {
		case <-t.C:
		case <-jctx.Done():
			lost = true
		}
		end := w.now()
		if !lost && jctx.Err() == nil {
			w.store.write("mutex:"+key, v+1)
		}
		w.trace.add(end, fmt.Sprintf("%s do %s ttl=%v job=%v: window %v-%v lost=%v", wk.name, key, ttl, job*time.Millisecond, start, end, lost))
		w.chk.Add(holdOf(o, wk.name, key, start, end, 0))
		return nil
	})
	if err != nil && !ran {
		w.trace.add(w.now(), fmt.Sprintf("%s do %s: %v", wk.name, key, shortErr(err)))
		if checked && ctx.Err() == nil && w.settledNow() {
			w.violate("liveness: %s's Do of %s, begun at %v in the quiet window, not served within %v: %v", wk.name, key, called, livenessBound, shortErr(err))
		}
	}
}

// restore takes a mutex, hands its token to another Client (as another
// process would), which extends and releases it.
func (wk *worker) restore(ctx context.Context, ttl time.Duration) {
	w := wk.w
	key := mutexKeys[wk.rng.Intn(len(mutexKeys))]
	l, h := wk.tryHold(ctx, op{kind: "restore", key: key, counter: true, ttl: ttl})
	if l == nil {
		return
	}
	other := w.clients[(wk.ci+1)%len(w.clients)]
	r := other.c.Restore(l.Key(), l.Token())
	sleep(context.Background(), time.Duration(wk.rng.Intn(100))*time.Millisecond)
	if err := r.Extend(context.Background(), ttl); err == nil {
		// The restored handle's validity, on the other Client's clock.
		h.end = w.now() + other.clk.RealDuration(r.Validity())
		w.trace.add(w.now(), fmt.Sprintf("%s restored %s in %s: held until %v", wk.name, key, other.name, h.end))
	} else {
		if r.Context().Err() != nil && errors.Is(err, redlock.ErrLockLost) {
			h.end = min(h.end, w.now()) // the restored handle was told the lock is gone
		}
		w.trace.add(w.now(), fmt.Sprintf("%s restored extend %s: %v", wk.name, key, shortErr(err)))
	}
	sleep(context.Background(), time.Duration(wk.rng.Intn(100))*time.Millisecond)
	h.finish(wk, r, true, false)
}

// leader asks who leads the election, and checks the answer.
func (wk *worker) leader(ctx context.Context) {
	w := wk.w
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	called := w.now()
	ld, err := wk.sc.c.Election(electionName).Leader(cctx)
	ret := w.now()
	a := leaderAnswer{client: wk.ci, call: called, ret: ret, term: ld.Term, value: ld.Value, err: err}
	w.mu.Lock()
	stalled := time.Now().Before(w.unstalledFrom[wk.ci])
	w.mu.Unlock()
	if err != nil && errors.Is(err, redlock.ErrNoLeader) && !stalled {
		// (A stalled client's nodes answer it too late.)
		a.onQuorum = w.leaderOnQuorum(called)
	}
	w.trace.add(ret, fmt.Sprintf("%s Leader: term=%d value=%q err=%v", wk.name, ld.Term, ld.Value, err))
	w.mu.Lock()
	w.leaders = append(w.leaders, a)
	w.mu.Unlock()
}

// errResign ends an election Run after one term.
var errResign = errors.New("sim: resign")

// runLeader leads through Election.Run for one term: the hold is the
// time its function runs, until it returns or its context ends (the
// lease was lost).
func (wk *worker) runLeader(ctx context.Context, ttl time.Duration) {
	w := wk.w
	w.noteTTL(ttl)
	o := op{kind: "election", key: electionName, counter: true, ttl: ttl}
	cctx, cancel, checked := wk.callContext(ctx, true)
	defer cancel()
	called := w.now()
	ran := false
	err := wk.sc.c.Election(electionName).Run(cctx, wk.name, ttl, func(lctx context.Context, term uint64) error {
		ran = true
		start := w.now()
		w.mu.Lock()
		w.acquired++
		w.kinds["run"]++
		w.mu.Unlock()
		v := w.store.read("election:" + electionName)
		sleep(lctx, time.Duration(wk.rng.Intn(int(2*ttl/time.Millisecond)))*time.Millisecond)
		end := w.now()
		if lctx.Err() == nil {
			w.store.write("election:"+electionName, v+1)
		}
		w.trace.add(end, fmt.Sprintf("%s run %s term=%d: window %v-%v lost=%v", wk.name, electionName, term, start, end, lctx.Err() != nil))
		w.chk.Add(holdOf(o, wk.name, electionName, start, end, term))
		w.mu.Lock()
		w.fencedOps = append(w.fencedOps, fencedOp{key: "election:" + electionName, call: called, ret: start, fence: term})
		w.mu.Unlock()
		return errResign
	})
	if !ran && err != nil {
		w.trace.add(w.now(), fmt.Sprintf("%s run %s: %v", wk.name, electionName, shortErr(err)))
		if checked && ctx.Err() == nil && w.settledNow() {
			w.violate("liveness: %s's Run of %s, begun at %v in the quiet window, not served within %v: %v", wk.name, electionName, called, livenessBound, shortErr(err))
		}
	}
}

// observeRead bounds how long before its delivery Observe read a leader:
// one read of every node, each bounded by the node timeout, at least 1s.
const observeRead = time.Second

// observe records every leader Observe delivers to client sc, and checks
// that terms only rise on one channel.
func (w *world) observe(ctx context.Context, ci int, sc *simClient) {
	var last uint64
	for ld := range sc.c.Election(electionName).Observe(ctx) {
		now := w.now()
		w.trace.add(now, fmt.Sprintf("%s Observe: term=%d value=%q", sc.name, ld.Term, ld.Value))
		w.mu.Lock()
		// What Observe delivers it read from the nodes some time before:
		// up to a read's bound (at least 1s), more when its client stalled.
		w.leaders = append(w.leaders, leaderAnswer{client: ci, call: max(now-observeRead, 0), ret: now, term: ld.Term, value: ld.Value})
		if ld.Term <= last {
			w.observeBack = append(w.observeBack, fmt.Sprintf("Observe (client %d) delivered term %d after term %d at %v", ci+1, ld.Term, last, now))
		}
		w.mu.Unlock()
		last = ld.Term
	}
}

// tryHold takes o's key with one TryLock and starts its hold; nil when
// the lock was not taken.
func (wk *worker) tryHold(ctx context.Context, o op) (*redlock.Lock, *holding) {
	w := wk.w
	w.noteTTL(o.ttl)
	cctx, cancel, _ := wk.callContext(ctx, false)
	defer cancel()
	called := w.now()
	l, err := wk.sc.c.TryLock(cctx, o.key, o.ttl)
	if err != nil {
		w.trace.add(w.now(), fmt.Sprintf("%s %s %s: %v", wk.name, o.kind, o.key, shortErr(err)))
		return nil, nil
	}
	return l, wk.held(o, l, called)
}
