package redlock

import (
	"context"
	"errors"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"
)

// The waiting of every call that takes no hand-off: LockMulti (which does
// not queue), a Semaphore's Acquire (whose rounds queue it on each node,
// and whose releases name the longest waiter), an RWLock's RLock and Lock
// (a waiting writer's rounds leave its intent). Their rounds are their
// own (try); between them they sleep here.

// waitUnqueued calls try until a round takes the lock or fails for
// another reason than a refusal, or try ends the wait (endWait), and
// between refused rounds it sleeps as pacing says, or until a release of
// one of keys is announced: one that leaves a key free for anyone, or
// one that wake says is for the call. refused is when the first round
// was refused (zero when it was not).
func (c *Client) waitUnqueued(ctx context.Context, keys []string, wake wakeOn, cfg lockConfig, try func() (*Lock, error)) (l *Lock, refused time.Time, err error) {
	// Subscribed to every key already (an earlier call's subscription
	// lingers): the call listens before its first round, and a release
	// announced while that round runs wakes it. Otherwise it subscribes
	// once refused, and asks again at once (a release in between went
	// unheard).
	mw, err := c.listenEarly(keys, wake)
	if err != nil {
		return nil, refused, err
	}
	again := mw == nil
	defer func() {
		if mw != nil {
			mw.leave()
		}
	}()
	l, err = try()
	if e, ok := err.(endWait); ok {
		return nil, refused, e.err
	}
	qe := asRefusal(err)
	if err == nil || qe == nil {
		return l, refused, err
	}
	refused = c.cfg.clock.Now()
	if again {
		if mw, err = c.listenMulti(keys, wake); err != nil {
			return nil, refused, errors.Join(err, qe)
		}
		mw.heed(qe)
		mw.armed(ctx)
	}
	p := pacing{c: c, retry: cfg.retry}
	p.note(qe)
	return c.waitRefused(ctx, mw, &p, qe, again, refused, try)
}

// listenEarly is listenMulti when the Client's subscriptions to every key
// of ks are armed, with every node counted as refusing until the first
// round says which did (heed); nil, nil otherwise.
func (c *Client) listenEarly(ks []string, wake wakeOn) (*multiWaiter, error) {
	for _, k := range ks {
		if !c.notify.armed(k) {
			return nil, nil
		}
	}
	mw, err := c.listenMulti(ks, wake)
	if mw != nil {
		mw.refusing.Store(^uint64(0))
	}
	return mw, err
}

// waitRefused is waitUnqueued after its first round, refused with qe
// at refused: once at once when again says so, then after each sleep, it
// asks until a round ends the wait.
func (c *Client) waitRefused(ctx context.Context, mw *multiWaiter, p *pacing, qe *QuorumError, again bool, refused time.Time, try func() (*Lock, error)) (*Lock, time.Time, error) {
	futile := 0 // rounds in a row that a wake-up started and that failed
	for failures := 0; ; {
		if !again {
			failures++
			mw.heed(qe)
			d, _ := p.next(qe, failures, mw.isArmed())
			d = p.lag(d, mw.watch.refused(qe))
			woken, err := mw.sleep(ctx, d, futileFloor(futile))
			if err != nil {
				return nil, refused, p.end(err, qe)
			}
			if woken {
				futile++
			} else {
				futile = 0
			}
		}
		again = false
		// The round sees the nodes as they are: what woke the call before
		// it tells it nothing more. The nodes the previous round released
		// stay ignored until this round's replace them: their
		// announcements can come while this round runs.
		mw.drain()
		l, err := try()
		if err == nil {
			return l, refused, nil
		}
		if e, ok := err.(endWait); ok {
			return nil, refused, e.err
		}
		if qe = asRefusal(err); qe == nil {
			return nil, refused, p.cut(err)
		}
		p.note(qe)
	}
}

// endWait is what a waiting call's round returns to waitUnqueued for a
// refusal that waiting cannot overcome (a semaphore of another size on a
// quorum: sizeRefused): the wait ends with err, the round's error, at
// once.
type endWait struct{ err error }

func (e endWait) Error() string { return e.err.Error() }

// futileFloor is how long a waiting call without a queue sleeps before a
// wake-up counts, after n rounds in a row that a wake-up started found the
// keys still taken: none at first, then 1ms doubling to 64ms. Two such
// calls whose keys overlap wake each other with the releases of their
// failed rounds (each takes the keys free on some nodes, then gives them
// back); without the floor they asked again at once, round after round,
// for as long as a third holder kept a key (a simulated seed spun at one
// instant; on real nodes, rounds back to back).
func futileFloor(n int) time.Duration {
	if n == 0 {
		return 0
	}
	return time.Millisecond << min(n-1, 6)
}

// wakeOn says which release announcements are for a waiting call besides
// those for anyone (the zero value: none).
type wakeOn struct {
	// id is the call's id: a release that names it is for it.
	id string
	// kept: a release that names the call keeps a slot for it (a
	// semaphore's), and the call asks at once; otherwise it asks as for
	// a release for anyone (a read-write lock's first waiting writer).
	kept bool
	// side is the To of releases told to the call's side
	// (wire.ForReaders); "" for none.
	side string
}

// multiWaiter is a waiting call's subscription to its keys' release
// announcements (waitUnqueued): a release of any key that leaves it free,
// or that names the call, wakes it.
type multiWaiter struct {
	c      *Client
	wake   wakeOn // the announcements for the call besides those for anyone
	woken  chan struct{}
	kws    []*keyWait
	watch  nodeWatch     // the nodes its latest round could not ask, and those of them back since
	ignore atomic.Uint64 // nodes the latest refused round may have taken keys on (ownNodes): it released them itself
	// refusing is the nodes that refused the latest round: only their
	// releases for anyone wake the call (a node that announces releases
	// it never refused for, broken or hostile, cannot).
	refusing atomic.Uint64
	// heard is the refusing nodes that announced a release for anyone
	// since the round began; need is how many of them let the call ask
	// again at once (a release reaches every node at about the same
	// time, but its announcements come one by one: asking at the first
	// would find the key still held where it has not landed yet).
	heard atomic.Uint64
	need  atomic.Int32
	// urgent: a release that names the call, or a node back, since the
	// round began: the call asks again at once.
	urgent atomic.Bool
	// uncounted: restart safety did not count a node of the latest round.
	uncounted atomic.Bool
}

// heed notes the call's latest refused round qe: whose announcements
// count.
func (mw *multiWaiter) heed(qe *QuorumError) {
	mw.ignore.Store(ownNodes(qe.Nodes))
	mw.refusing.Store(nodeMask(qe.Nodes, isRefused))
	mw.need.Store(int32(min(mw.c.quorum, max(qe.Count(NodeRefused), 1))))
	mw.uncounted.Store(slices.ContainsFunc(qe.Nodes, func(r NodeResult) bool { return notCounted(r.Err) }))
}

// listenMulti subscribes to the announcements of every key of ks, for a
// call that wake describes.
func (c *Client) listenMulti(ks []string, wake wakeOn) (*multiWaiter, error) {
	mw := &multiWaiter{c: c, wake: wake, woken: make(chan struct{}, 1)}
	for _, k := range ks {
		kw := c.notify.join(k, mw)
		if kw == nil {
			mw.leave()
			return nil, ErrClosed
		}
		mw.kws = append(mw.kws, kw)
	}
	return mw, nil
}

// released implements listener: a key left free for anyone, for the
// call's side or for the call by name, by a node that refused the call's
// latest round wakes the call, and a slot kept for it wakes it at once;
// one kept for another waiter or told to the other side does not, nor
// one from a node the call released itself after its latest round.
func (mw *multiWaiter) released(i int, to string) {
	if mw.ignore.Load()&nodeBit(i) != 0 {
		return
	}
	named := to != "" && to == mw.wake.id
	switch {
	case named && mw.wake.kept:
		mw.urgent.Store(true) // the slot is kept for it: it asks at once
		mw.wakeUp()
	case (to == "" || named || to == mw.wake.side) && mw.refusing.Load()&nodeBit(i) != 0:
		// It asks once enough of the nodes announced it (sleep).
		updateMask(&mw.heard, func(m uint64) uint64 { return m | nodeBit(i) })
		mw.wakeUp()
	}
}

// handedOff implements listener: a hand-off goes to a single-key waiter,
// never to a multi-key call.
func (mw *multiWaiter) handedOff(int, string, int, uint64) {}

// subscribed implements listener: node i confirmed a key's subscription;
// when the call's latest round could not ask it, the node is back, and
// the call asks again.
func (mw *multiWaiter) subscribed(i int) {
	if mw.watch.confirmed(i) {
		mw.urgent.Store(true)
		mw.wakeUp()
	}
}

// drain drops a wake-up that came before the round about to start.
func (mw *multiWaiter) drain() {
	select {
	case <-mw.woken:
	default:
	}
	mw.heard.Store(0)
	mw.urgent.Store(false)
}

// poke implements listener: restart safety may count a node now that it
// did not count. The call asks again when its latest round had such a
// node; a round refused by holders and waiters has nothing to count
// again.
func (mw *multiWaiter) poke() {
	if mw.uncounted.Load() {
		mw.urgent.Store(true)
		mw.wakeUp()
	}
}

// wakeUp ends the call's sleep, or the next one.
func (mw *multiWaiter) wakeUp() {
	select {
	case mw.woken <- struct{}{}:
	default:
	}
}

// armed waits, at most one node timeout, until every key's subscription
// is confirmed on a quorum.
func (mw *multiWaiter) armed(ctx context.Context) {
	for _, kw := range mw.kws {
		if !mw.c.notify.waitArmed(ctx, kw) {
			return
		}
	}
}

// isArmed reports whether every key's subscription is confirmed on a
// quorum: a release of any of them is then heard.
func (mw *multiWaiter) isArmed() bool {
	for _, kw := range mw.kws {
		if !mw.c.notify.armed(kw.key) {
			return false
		}
	}
	return true
}

// sleep waits d, or, once floor has passed, until a release that names
// the call or a node back wakes it, or need of the refusing nodes
// announced a release for anyone, or a grace period after the first of
// them (woken); or until ctx ends (its error) or the Client closes
// (ErrClosed).
func (mw *multiWaiter) sleep(ctx context.Context, d, floor time.Duration) (woken bool, err error) {
	if floor = min(floor, d); floor > 0 {
		// A wake-up meanwhile stays in mw.woken for the wait below.
		t := mw.c.timer(floor)
		select {
		case <-t.C():
		case <-ctx.Done():
			mw.c.putTimer(t)
			return false, ctx.Err()
		case <-mw.c.bg.closing():
			mw.c.putTimer(t)
			return false, ErrClosed
		}
		mw.c.putTimer(t)
		d -= floor
	}
	clk := mw.c.cfg.clock
	end := clk.Now().Add(d)
	t := mw.c.timer(d)
	defer func() { mw.c.putTimer(t) }()
	graced := false
	for {
		select {
		case <-t.C():
			return graced, nil
		case <-mw.woken:
			if mw.urgent.Load() || bits.OnesCount64(mw.heard.Load()&mw.refusing.Load()) >= int(mw.need.Load()) {
				return true, nil
			}
			// Some of the refusing nodes announced a release: the others'
			// are likely on their way; after the grace period the call
			// asks anyway (an announcement can be lost).
			if !graced {
				graced = true
				if g := mw.c.grace(); g < end.Sub(clk.Now()) {
					mw.c.putTimer(t)
					t = mw.c.timer(g)
				}
			}
		case <-ctx.Done():
			return false, ctx.Err()
		case <-mw.c.bg.closing():
			return false, ErrClosed
		}
	}
}

// leave ends the subscriptions.
func (mw *multiWaiter) leave() {
	for _, kw := range mw.kws {
		mw.c.notify.leave(kw, mw)
	}
	mw.kws = nil
}
