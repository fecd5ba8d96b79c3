package redlock

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
)

// Lock takes key for ttl, round after round, until it succeeds or ctx
// ends. Its first round is TryLock's; after a refusal it waits without
// polling: it subscribes to the key's release announcements, queues on
// the nodes (WithHandoffWindow) so that waits are served in the order they
// began, and sleeps until a release concerns it or the holder's key runs
// out. A release may hand the key straight to it. When ctx ends first the
// error matches both ErrNotAcquired and ctx.Err(); other errors are as
// for TryLock. See docs/waiting.md.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, err := c.lockConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.lockAs(ctx, mutex{}, key, ttl, cfg)
}

// lockAs is Lock for a lock of kind k on key (a mutex, or an election's
// leadership), whose options cfg are checked.
func (c *Client) lockAs(ctx context.Context, k kind, key string, ttl time.Duration, cfg lockConfig) (*Lock, error) {
	since := c.cfg.clock.Now()
	// The first round is a plain SET NX, so that an uncontended Lock costs
	// what TryLock does; not when the Client already waits for the key
	// (it is likely held, and the script queues) or the lock is fenced.
	var first *round
	var err error
	subscribed, armed := c.notify.state(key)
	if !subscribed && !cfg.fencing {
		var l *Lock
		if l, first, err = c.tryFirst(ctx, k, key, ttl, cfg); err == nil || asRefusal(err) == nil {
			c.acquiredAs(k.is(), k.name(key), since, time.Time{}, err)
			return l, err
		}
	}
	refusal := asRefusal(err)
	w, err := c.newWaiter(k, key, ttl, cfg, since)
	if err != nil {
		c.acquiredAs(k.is(), k.name(key), since, time.Time{}, err)
		return nil, err
	}
	if first != nil {
		w.refused = c.cfg.clock.Now()
		w.pace.note(refusal)
	}
	l, err := w.lock(ctx, first, armed)
	c.acquiredAs(k.is(), k.name(key), since, w.refused, err)
	return l, err
}

// tryFirst is Lock's first round, TryLock's.
func (c *Client) tryFirst(ctx context.Context, k kind, key string, ttl time.Duration, cfg lockConfig) (*Lock, *round, error) {
	g, err := c.mutexGrab(k, key, ttl, cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	return c.take(ctx, &g)
}

// waiter is one Lock call that waits for its key: its place in the
// nodes' queues, its subscription to the key's announcements, its rounds,
// and what the nodes announced to it since the latest one. Its methods
// are the waiting algorithm (docs/waiting.md); lock runs it. Only the
// call's goroutine uses it, but for the announcements under mu, which the
// notifier writes (it implements listener).
type waiter struct {
	c    *Client
	kind kind // of the lock it waits for: a mutex, or an election's leadership
	key  string
	ttl  time.Duration
	cfg  lockConfig

	// id is its entry in the key's queue on the nodes; "" when queueing is
	// off (WithHandoffWindow(0)).
	id string
	// since is when the Lock call began: its place in the queues is the
	// wall-clock time then (µs), the same for every node, so that all
	// nodes order the waiters alike; with it goes how long it has waited
	// on the monotonic clock, so that a node can tell a client whose
	// clock is far off.
	since     time.Time
	sinceWall int64
	refused   time.Time // when its first round was refused; zero until then
	queued    bool      // a node may hold its queue entry
	leaving   ticket    // queued while the Client was open: Close waits for its leaving the queues
	kw        *keyWait  // its subscription; nil until it first listens
	// token is what a release sets the key to on a node that hands it to
	// this waiter: the lock's token when a quorum did so. "" when it takes
	// no hand-off (queueing is off, or the lock is fenced).
	token string
	// rounds is the number of its latest script round (numbered from 1
	// before it is sent); last is the latest round sent; sent those a
	// later command must not overtake.
	rounds int
	last   *round
	sent   pending
	pace   pacing
	owedBy *superseder // with a hand-off token: its rounds' releases, each undoing the earlier ones'
	watch  nodeWatch   // the nodes its latest round could not ask, and those of them back since
	// backNew: a node w's latest round could not ask came back while w
	// slept (written by the notifier).
	backNew atomic.Bool

	// mu guards what the notifier writes: the announcements since the
	// latest round began. Lock order: notifier.mu, then waiter.mu; nothing
	// else is taken under it (restart safety's counts are read after it
	// is released).
	mu     sync.Mutex
	heard  uint64 // bit i: node i released the key and named this waiter or no one
	named  uint64 // bit i: node i kept the key for this waiter
	ignore uint64 // nodes this waiter released itself after its round
	// refusing is the nodes that refused its latest round (another
	// holds the key there): only their anonymous releases count, so that
	// a node that announces releases it never refused for cannot wake it.
	refusing uint64
	// granted[i] is the round named by node i's latest hand-off to this
	// waiter (0 for none): the node set the token after that round ran
	// there. heardOn[i] numbers the pub/sub connection it was heard on
	// (restart safety: Client.countsHeard).
	granted []int
	heardOn []uint64
	wake    chan struct{} // signalled on every announcement that counts, and on pokes
}

// newWaiter returns the waiter of a Lock call that began at since (on the
// Client's clock). Its id is "<client id>.<n>", so that the nodes can tell
// which Client to announce a hand-off to; "" when queueing is off. Unless
// the lock is fenced, it takes hand-offs, under a token of its own.
func (c *Client) newWaiter(k kind, key string, ttl time.Duration, cfg lockConfig, since time.Time) (*waiter, error) {
	w := &waiter{c: c, kind: k, key: key, ttl: ttl, cfg: cfg, wake: make(chan struct{}, 1), since: since,
		sinceWall: time.Now().UnixMicro() - c.cfg.clock.Now().Sub(since).Microseconds(),
		pace:      pacing{c: c, retry: cfg.retry}}
	if c.cfg.window > 0 {
		w.id = c.id + "." + strconv.FormatUint(rand.Uint64(), 36)
		if !cfg.fencing {
			secret, err := newToken()
			if err != nil {
				return nil, err
			}
			w.token, w.granted, w.heardOn = w.id+"/"+secret, make([]int, len(c.pools)), make([]uint64, len(c.pools))
			w.owedBy = newSuperseder(len(c.pools))
		}
	}
	return w, nil
}

// lock waits for the key: ask, and after a refusal sleep until a release
// concerns w, the holder's key runs out, or the back-off says; then ask
// again. It returns once a round or a quorum of hand-offs gives w the
// lock, or with the error that ends the wait. first is Lock's refused
// plain round (nil for none), armed whether the key's announcements were
// heard before it.
func (w *waiter) lock(ctx context.Context, first *round, armed bool) (l *Lock, err error) {
	defer func() { w.end(ctx, l) }()
	checked := false
	if first != nil {
		// The plain round neither queued w nor heard the holder's TTL: once
		// subscribed, w asks again at once, with the script.
		w.ignoreOwn(first)
		w.listen()
		if !armed {
			checked = true
			w.c.notify.waitArmed(ctx, w.kw)
		}
	}
	futile := 0 // rounds in a row that a release announcement started and that were refused
	for failures := 0; ; {
		if l := w.handoff(ctx); l != nil {
			return l, nil
		}
		armed := w.c.notify.armed(w.key)
		l, qe, err := w.round(ctx)
		if qe == nil {
			return l, w.pace.cut(err)
		}
		w.pace.note(qe)
		if !armed && !checked {
			// A release between the refusal and the subscription would go
			// unheard: once subscribed, ask again at once.
			checked = true
			if w.c.notify.waitArmed(ctx, w.kw) {
				continue
			}
		}
		if w.rounds == 1 && w.token != "" && freeOnSome(qe) {
			// The first round queued w without taking a key it found
			// free (waiter.round): a script round takes it, or gives it
			// to the head of the queue, at once.
			continue
		}
		failures++
		woken, err := w.sleep(ctx, qe, failures, futileFloor(futile))
		if err != nil {
			return nil, err
		}
		if woken {
			futile++
		} else {
			futile = 0
		}
	}
}

// round is one acquisition round by the script, which queues w when the
// key is held and reports the holder's TTL. It returns the lock, or the
// refusal (a *QuorumError) that w may wait out, or another error.
func (w *waiter) round(ctx context.Context) (*Lock, *QuorumError, error) {
	if w.token != "" {
		// A node may hand the key to w as soon as the round queued it
		// there: w listens before it asks.
		w.listen()
	}
	w.forget()
	ww := w.next()
	var g grab
	if ww.Round == 1 && w.token != "" && w.c.txReady() {
		// The first round queues w with a transaction, cheaper for the
		// node than the script (docs/benchmarks.md); it takes no key,
		// and a free key makes w ask again at once.
		g = w.c.queueGrab(w.kind, w.key, w.ttl, w.cfg, ww)
	} else {
		var err error
		if g, err = w.c.mutexGrab(w.kind, w.key, w.ttl, w.cfg, &ww); err != nil {
			return nil, nil, err
		}
	}
	if w.owedBy != nil {
		g.owedBy, g.seq = w.owedBy, int64(ww.Round)
	}
	g.adopt = func(l *Lock, r *round) {
		w.queuedBy(r)
		l.queueID, l.after = w.id, w.sent
		l.handoffToken = w.token // a node may yet hand the key to w
	}
	l, r, err := w.c.take(ctx, &g)
	if err == nil {
		return l, nil, nil
	}
	w.queuedBy(r) // even if Lock ends now: the script may have queued it
	qe := asRefusal(err)
	if qe == nil {
		return nil, nil, err
	}
	if w.refused.IsZero() {
		w.refused = w.c.cfg.clock.Now()
	}
	w.ignoreOwn(r)
	w.listen()
	return nil, qe, nil
}

// freeOnSome reports whether a node refused qe's round with a key that
// had no time left: free, as the first round of a waiter reports a key
// it found free (wire.QueueTxReply), or running out.
func freeOnSome(qe *QuorumError) bool {
	for _, n := range qe.Nodes {
		if n.Status == NodeRefused && n.TTL == 0 && !n.Reserved {
			return true
		}
	}
	return false
}

// next numbers w's next round, once, before it is sent, and returns what
// the acquisition script is told of w for it.
func (w *waiter) next() wire.Waiter {
	w.rounds++
	return wire.Waiter{ID: w.id, Since: w.sinceWall, Waited: w.c.cfg.clock.Now().Sub(w.since).Microseconds(),
		Round: w.rounds, Handoff: w.token}
}

// listen subscribes w to the key's announcements, once.
func (w *waiter) listen() {
	if w.kw == nil {
		w.kw = w.c.notify.join(w.key, w)
	}
}

// queuedBy notes that w's round r ran the acquisition script: the nodes
// that refused it queued it (r is nil when no round was sent). While
// queued, w counts as work Close waits for, so that leaving the queue is
// sent.
func (w *waiter) queuedBy(r *round) {
	if r == nil {
		return
	}
	w.last = r
	w.sent.add(r)
	if w.id != "" && !w.queued {
		w.queued = true
		w.leaving, _ = w.c.bg.claim()
	}
}

// handoff returns the lock when a quorum of nodes handed the key to w
// after its latest round ran there; nil otherwise. Its validity counts
// from the start of that round, which may have begun up to the refresh
// interval + the entry slack before the hand-off: with less than half the
// TTL left (or no more than WithMinValidity), nil, and a round takes the
// key afresh on the nodes that handed it over.
func (w *waiter) handoff(ctx context.Context) *Lock {
	c := w.c
	n, _, start := w.handoffs()
	if n < c.quorum {
		return nil
	}
	until := c.validUntil(start, w.ttl)
	if left := until.Sub(c.cfg.clock.Now()); left <= w.cfg.minValidity || left < w.ttl/2 {
		return nil
	}
	// The lock's token is what the nodes that handed the key over after
	// the round set.
	g := grab{name: w.kind.name(w.key), key: w.key, kind: w.kind, token: handedOffToken(w.token, w.rounds), ttl: w.ttl, cfg: w.cfg,
		adopt: func(l *Lock, _ *round) {
			l.queueID, l.after = w.id, w.sent
			l.handoffToken = w.token // a node may hold a hand-off after an earlier round, or an earlier round's token
		}}
	l := c.newLock(ctx, &g, w.last, until)
	if c.observing() {
		w.observeHandoff(start, until)
	}
	return l
}

// observeHandoff tells the observers of the lock w holds by hand-offs
// that followed its round begun at start, valid until until.
func (w *waiter) observeHandoff(start, until time.Time) {
	c := w.c
	now := c.cfg.clock.Now()
	info := RoundInfo{Op: OpHandoff, Key: w.kind.name(w.key), Start: start, Duration: now.Sub(start),
		Nodes: make([]NodeResult, len(c.pools)), Won: true, Validity: until.Sub(now), Drift: c.drift(w.ttl)}
	for i, p := range c.pools {
		info.Nodes[i].Addr = p.Addr()
	}
	var buf [inlineNodes]grant
	for _, g := range w.grantedNodes(buf[:0]) {
		if c.countsHeard(g.i, g.conn) {
			info.Nodes[g.i].Status = NodeOK
		}
	}
	for _, ob := range c.cfg.observers {
		ob.Round(&info)
	}
}

// sleep waits after the refused round qe, the failures-th in a row (see
// pacing), until a release concerns w. It returns the error that ends the
// wait (pacing.end).
//
// floor is how long an anonymous release must wait before it counts: a
// node that announces releases that lead to no grant (broken, or
// hostile, publishing on the key's channel) cannot make w ask more often
// than that. woken says whether an announcement ended the sleep.
func (w *waiter) sleep(ctx context.Context, qe *QuorumError, failures int, floor time.Duration) (woken bool, err error) {
	d, split := w.pause(qe, failures)
	// A release goes to every node at once, but its announcements arrive
	// one by one. A release that keeps the key for w names it: w goes at
	// the first such announcement. One that frees the key for anyone
	// wakes w when as many nodes announced it as refused this round (at
	// most a quorum), or a short while after the first: asking at once
	// would find the key still held where the release has not landed yet.
	// After a split vote only a release that names w ends the sleep.
	need := min(w.c.quorum, max(qe.Count(NodeRefused), 1))
	woken, err = w.await(ctx, d, need, split, floor)
	if err != nil {
		return false, w.pace.end(err, qe)
	}
	return woken, nil
}

// pause returns how long w sleeps after the refused round qe, the
// failures-th in a row, and whether it was a split vote (pacing.next),
// and notes the nodes qe could not ask: one of them that confirms the
// key's subscription wakes w (subscribed). One that did so already, and
// that qe could still not reach (its command connection dials again),
// cuts the sleep to lagRetry's (pacing.lag); one that restart safety
// excludes, or that timed out, does not.
func (w *waiter) pause(qe *QuorumError, failures int) (time.Duration, bool) {
	d, split := w.pace.next(qe, failures, w.c.notify.armed(w.key))
	lagging := w.watch.refused(qe)
	w.backNew.Store(false)
	return w.pace.lag(d, lagging), split
}

// await waits d, or until a node announced that it keeps the key for w,
// or until need nodes announced a release that counts for w (with
// namedOnly, only the former counts), or a grace period after the first
// such announcement (never past d), or until a node that w's latest round
// could not ask confirmed the key's subscription (it is back), or until
// ctx ends (its error) or the Client closes (ErrClosed). An anonymous
// release ends the wait no sooner than floor (never past d). woken says
// whether an announcement ended it.
func (w *waiter) await(ctx context.Context, d time.Duration, need int, namedOnly bool, floor time.Duration) (woken bool, err error) {
	c, clk := w.c, w.c.cfg.clock
	start := clk.Now()
	s := &slumber{clk: clk, end: start.Add(d), earliest: start.Add(min(floor, d)), t: clk.NewTimer(d)}
	defer func() { s.t.Stop() }()
	for {
		select {
		case <-s.t.C():
			return s.woken, nil
		case <-w.wake:
			if w.wakes(s, need, namedOnly) {
				return true, nil
			}
		case <-ctx.Done():
			return false, ctx.Err()
		case <-c.bg.closing():
			return false, ErrClosed
		}
	}
}

// slumber is one await: its timer, when it ends, the earliest an
// anonymous release may end it, whether a grace period began, and
// whether an announcement set the timer (woken).
type slumber struct {
	clk           clock.Clock
	t             clock.Timer
	end, earliest time.Time
	graced, woken bool
}

// at ends the slumber at when (woken), at once when that has come: it
// reports whether it has; otherwise it sets the timer for it (never past
// the end).
func (s *slumber) at(when time.Time) bool {
	left := when.Sub(s.clk.Now())
	if left <= 0 {
		return true
	}
	if left < s.end.Sub(s.clk.Now()) {
		s.t.Stop()
		s.t = s.clk.NewTimer(left)
	}
	s.woken = true
	return false
}

// wakes reads what the nodes announced to w during its slumber s, and
// reports whether w asks again now. A quorum handed the key to w: it
// holds it. A node that keeps the key for w (a reservation) names it: go,
// the release reached the other nodes at about the same time. need
// refusing nodes that announced a release end it (no sooner than the
// floor); fewer, after a grace period: the others' announcements are
// likely on their way, and a round then takes what was handed over.
func (w *waiter) wakes(s *slumber, need int, namedOnly bool) bool {
	h, others, _ := w.handoffs()
	n := w.announced(namedOnly)
	switch {
	case h >= w.c.quorum || w.announced(true) > 0 || w.backNew.Swap(false):
		return true
	case n >= need:
		return s.at(s.earliest)
	case (n > 0 || others > 0) && !s.graced:
		s.graced = true
		return s.at(maxTime(s.clk.Now().Add(w.c.grace()), s.earliest))
	}
	return false
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// grace is how long a waiter that heard a release from some nodes waits
// for the others' announcements before it asks anyway (a node's
// announcement can be lost, for example while its pub/sub connection is
// dialled again).
func (c *Client) grace() time.Duration { return min(c.cfg.nodeTimeout/4, 5*time.Millisecond) }

// end ends w's wait: it drops its subscription and, when Lock failed (l
// is nil), takes it out of the queues in the background, also when the
// Client is closing. A waiter that got the lock stays queued until its
// release: on a node that missed the release its entry runs out by itself.
func (w *waiter) end(ctx context.Context, l *Lock) {
	c := w.c
	if w.kw != nil {
		c.notify.leave(w.kw, w)
		w.kw = nil
	}
	if w.leaving == (ticket{}) {
		return // never queued, or the Client was closed before it could be
	}
	defer w.leaving.done()
	if l != nil {
		return
	}
	// The release of what was handed to it, if anything (a reservation,
	// or a token of one of its rounds): it passes to the next waiter.
	owned, alt := wire.Reservation(w.id), w.token
	// Owed until each node answers: a node that missed it would keep
	// the call queued, and what was handed to it held. The call returns
	// once every node answered, or a node timeout passed (done when
	// returned).
	d := (&debt{c: c, ctx: context.WithoutCancel(ctx), script: wire.Release,
		args:  c.queue.ReleaseArgs(w.key, owned, w.id, alt),
		until: c.cfg.clock.Now().Add(max(w.ttl, c.refresh()+c.entrySlack()))}).waited()
	// After w's rounds: sent before one of them settled, the release
	// could come first and the round put w back in the queue.
	d.awaitFirst(context.Background(), d.oweAfter(&w.sent)) // ctx has likely ended: that is why w leaves
}

// released implements listener: node i released the key, leaving it free
// (to is "") or keeping it for the waiter to.
func (w *waiter) released(i int, to string) {
	if to != "" && to != w.id {
		return // the node keeps the key for another waiter
	}
	bit := nodeBit(i)
	w.mu.Lock()
	w.heard |= bit
	if to != "" {
		w.named |= bit
	}
	w.mu.Unlock()
	w.poke()
}

// handedOff implements listener: node i handed the key to the waiter to
// after that waiter's round ran there, as heard on the pub/sub connection
// numbered conn.
func (w *waiter) handedOff(i int, to string, round int, conn uint64) {
	if to != w.id {
		return
	}
	w.mu.Lock()
	if i < len(w.granted) && round >= w.granted[i] {
		w.granted[i], w.heardOn[i] = round, conn
	}
	w.mu.Unlock()
	w.poke()
}

// subscribed implements listener: node i confirmed the key's
// subscription. When w's latest round could not ask it, the node is back,
// and w asks again (await); a round that still cannot ask it is paced by
// lagRetry (pacing.lag).
func (w *waiter) subscribed(i int) {
	if w.watch.confirmed(i) {
		w.backNew.Store(true)
		w.poke()
	}
}

// poke implements listener: w counts again what it heard.
func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// forget drops announcements from before the round about to start: that
// round sees the nodes as they are.
func (w *waiter) forget() {
	select {
	case <-w.wake:
	default:
	}
	w.mu.Lock()
	w.heard, w.named, w.ignore, w.refusing = 0, 0, 0, 0
	w.mu.Unlock()
}

// ignoreOwn notes the nodes that may have granted w's failed round (ownNodes):
// w released them itself, so their announcements tell it nothing.
func (w *waiter) ignoreOwn(r *round) {
	if r == nil {
		return
	}
	mask, refusing := ownNodes(r.nodes), nodeMask(r.nodes, isRefused)
	w.mu.Lock()
	w.ignore, w.refusing = mask, refusing
	w.mu.Unlock()
}

// announced returns how many nodes announced a release that counts for w
// since the round began; with namedOnly, only those that named it.
func (w *waiter) announced(namedOnly bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if namedOnly {
		return bits.OnesCount64(w.named &^ w.ignore)
	}
	return bits.OnesCount64(w.heard & w.refusing &^ w.ignore)
}

// grant is a node's hand-off to a waiter: the node, and the pub/sub
// connection it was heard on (waiter.heardOn).
type grant struct {
	i    int
	conn uint64
}

// grantedNodes appends to dst the nodes that handed the key to w after
// its latest round ran there.
func (w *waiter) grantedNodes(dst []grant) []grant {
	k := w.rounds
	if w.token == "" || k == 0 || w.last == nil {
		return dst
	}
	w.mu.Lock()
	for i, r := range w.granted {
		if r == k {
			dst = append(dst, grant{i, w.heardOn[i]})
		}
	}
	w.mu.Unlock()
	return dst
}

// handoffs returns how many nodes that count (restart safety, for the
// connection each was heard on: Client.countsHeard) handed the key to w
// after its latest round ran there, and when that round began:
// each of those nodes holds w's token for its TTL from then at least.
// others counts those among them that w did not release itself after
// that round (a node that w released hands the key back to w when w
// heads its queue: that tells w nothing new). Restart safety is asked
// outside w.mu.
func (w *waiter) handoffs() (n, others int, start time.Time) {
	var buf [inlineNodes]grant // room for a round's nodes without allocating
	nodes := w.grantedNodes(buf[:0])
	if len(nodes) == 0 {
		return 0, 0, time.Time{}
	}
	w.mu.Lock()
	ignore := w.ignore
	w.mu.Unlock()
	for _, g := range nodes {
		if w.c.countsHeard(g.i, g.conn) {
			n++
			if ignore&nodeBit(g.i) == 0 {
				others++
			}
		}
	}
	return n, others, w.last.start
}
