package redlock

import (
	"context"
	"errors"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/pool"
)

// Split back-off: after a round in which the key was free but no one got a
// quorum (the nodes split their votes between callers), a waiter waits a
// random time in [0, d], d = splitMin doubling with each split in a row up
// to splitMax, unless a release names it first.
const (
	splitMin = time.Millisecond
	splitMax = 32 * time.Millisecond
)

// expiryJitter spreads the waiters that wake when a key runs out.
const expiryJitter = time.Millisecond

// waiter is one Lock call while it waits for its key.
type waiter struct {
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
	queued    bool     // a node may hold its queue entry
	kw        *keyWait // its subscription; nil until it first waits or sends a script round
	// token is what a release sets the key to on a node that hands it to
	// this waiter: the lock's token when a quorum did so. "" when it takes
	// no hand-off (queueing is off, or the lock is fenced).
	token string
	// rounds is how many script rounds it sent (each is numbered, from
	// 1); last is the latest of them, and pending those that were sent and
	// had not settled when last looked.
	rounds  int
	last    *round
	pending []*round
	// counted is set once the Client counts this waiter among the work
	// Close waits for: its leaving the queue is sent even then.
	counted bool

	// Announcements since the last round began: the nodes that released
	// the key and named this waiter or no one, and those that named it.
	mu     sync.Mutex
	heard  uint64 // bit i: node i
	named  uint64
	ignore uint64        // nodes this waiter released itself after its round
	wake   chan struct{} // signalled on every announcement that counts
	// granted[i] is the round named by node i's latest hand-off to this
	// waiter (0 for none): the node set the token after that round ran
	// there.
	granted []int
}

// waiterFor returns w, or the waiter of a Lock call that began at since
// when there is none yet.
func (c *Client) waiterFor(w *waiter, since time.Time, cfg lockConfig) (*waiter, error) {
	if w != nil {
		return w, nil
	}
	return c.newWaiter(since, !cfg.fencing)
}

// newWaiter returns the waiter of a Lock call that began at since (on the
// Client's clock). Its id is "<client id>.<n>", so that the nodes can tell
// which Client to announce a hand-off to; "" when queueing is off. With
// handoff it takes hand-offs, under a token of its own.
func (c *Client) newWaiter(since time.Time, handoff bool) (*waiter, error) {
	w := &waiter{wake: make(chan struct{}, 1), since: since,
		sinceWall: time.Now().UnixMicro() - c.cfg.clock.Now().Sub(since).Microseconds()}
	if c.cfg.window > 0 {
		w.id = c.id + "." + strconv.FormatUint(rand.Uint64(), 36)
		if handoff {
			secret, err := newToken()
			if err != nil {
				return nil, err
			}
			w.token, w.granted = w.id+"/"+secret, make([]int, len(c.pools))
		}
	}
	return w, nil
}

// signal notes that node i released the key and named next: "" for no
// one, "<id>" for a reservation, "<id> <round>" for a hand-off.
func (w *waiter) signal(i int, next string) {
	id, round, handoff := strings.Cut(next, " ")
	if id != w.id && next != "" {
		return // the node keeps the key for another waiter
	}
	bit := uint64(1) << (i % 64) // more than 64 nodes share bits: a quorum is then sooner assumed
	w.mu.Lock()
	switch {
	case handoff:
		if n, err := strconv.Atoi(round); err == nil && i < len(w.granted) {
			w.granted[i] = max(w.granted[i], n)
		}
	case next != "":
		w.heard |= bit
		w.named |= bit
	default:
		w.heard |= bit
	}
	w.mu.Unlock()
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
	w.heard, w.named, w.ignore = 0, 0, 0
	w.mu.Unlock()
}

// released notes the nodes that granted w's failed round: w released them
// itself, so their announcements tell it nothing.
func (w *waiter) released(r *round) {
	if r == nil {
		return
	}
	var mask uint64
	for i, n := range r.nodes {
		if n.Status == NodeOK {
			mask |= uint64(1) << (i % 64)
		}
	}
	w.mu.Lock()
	w.ignore = mask
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
	return bits.OnesCount64(w.heard &^ w.ignore)
}

// handedOff returns how many nodes that counts (restart safety) handed
// the key to w after its latest round ran there, and when that round began: each of those nodes holds
// w's token for its TTL from then at least. others counts those among
// them that w did not release itself after that round (a node that w
// released hands the key back to w when w heads its queue: that tells w
// nothing new).
func (w *waiter) handedOff(counts func(i int) bool) (n, others int, start time.Time) {
	k := w.rounds
	if w.token == "" || k == 0 {
		return 0, 0, time.Time{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range w.granted {
		if r == k && counts(i) {
			n++
			if w.ignore&(uint64(1)<<(i%64)) == 0 {
				others++
			}
		}
	}
	return n, others, w.last.start
}

// queuedBy notes that w's round r ran the acquisition script: the nodes
// that refused it queued it (r is nil when no round was sent). While
// queued, w counts as work Close waits for, so that leaving the queue is
// sent.
func (c *Client) queuedBy(w *waiter, r *round) {
	if r == nil {
		return
	}
	w.rounds, w.last = w.rounds+1, r
	if r.sent {
		w.pending = append(w.unsettled(), r)
	}
	if w.id != "" && !w.queued {
		w.queued, w.counted = true, c.begin(1)
	}
}

// unsettled returns w's rounds that were sent and have not settled, and
// keeps only those.
func (w *waiter) unsettled() []*round {
	keep := w.pending[:0]
	for _, r := range w.pending {
		select {
		case <-r.settled:
		default:
			keep = append(keep, r)
		}
	}
	clear(w.pending[len(keep):])
	w.pending = keep
	return keep
}

// earlier returns w's unsettled rounds other than r, for the lock that r
// (or the hand-offs that followed it) won.
func (w *waiter) earlier(r *round) []*round {
	var out []*round
	for _, p := range w.unsettled() {
		if p != r {
			out = append(out, p)
		}
	}
	return out
}

// handoff returns the lock when a quorum of nodes handed key to w after
// its latest round ran there; nil otherwise. Its validity counts from the
// start of that round, before any of the nodes set the token. That round
// may have begun up to the refresh interval + the entry slack before the
// hand-off: with less than half the TTL left (or no more than
// WithMinValidity), nil, and a round takes the key afresh on the nodes
// that handed it over.
func (c *Client) handoff(ctx context.Context, key string, ttl time.Duration, cfg lockConfig, w *waiter) *Lock {
	n, _, start := w.handedOff(c.countsNow)
	if n < c.quorum {
		return nil
	}
	until := c.validUntil(start, ttl)
	if left := until.Sub(c.cfg.clock.Now()); left <= cfg.minValidity || left < ttl/2 {
		return nil
	}
	// The release of the lock must not overtake the call's rounds on a
	// node that has not answered them yet.
	l := c.newLock(ctx, key, w.token, ttl, w.last, until, cfg)
	l.waited, l.earlier = w.id, w.earlier(w.last)
	return l
}

// Lock takes key for ttl, trying round after round until it succeeds or ctx
// ends. Its first round is a plain SET NX, as TryLock's. It does not poll:
// after a refused round it subscribes to the key's release announcements
// (ReleaseChannel, and the hand-offs to its Client) on every node, asks
// again with a script that also reports the holder's TTL, and sleeps until
// a release that concerns it is announced, or until the holder's key would
// run out, whichever comes first. While it waits it is queued on the
// nodes (WithHandoffWindow), so that a release gives the key to the
// longest waiter instead of whoever asks first; waits are served in the
// order they began. A release hands the key over by setting the waiter's
// own token: once a quorum of nodes did so, Lock returns the lock without
// another round, its token that hand-off token and its validity counted
// from the start of the waiter's latest round, provided at least half the
// TTL is left (otherwise one more round takes the key afresh). After a split vote (the
// key was free, but no caller got a quorum) it waits a random time that
// grows with each split in a row, from about 1ms to 32ms.
//
// The back-off (WithRetry) sets the wait when
// the nodes cannot tell how long the key has left (they failed, or did not
// answer in time) and, as a ceiling, while release announcements are not
// available (pools that do not implement pool.Subscriber, or while the
// subscription is being made); a strategy that gives up ends Lock with the
// last round's error. When ctx ends first the error matches both
// ErrNotAcquired and ctx.Err(). Each round uses a new token, so that a late
// release from a failed round can never remove what a later round set.
// Other errors are as for TryLock.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, err := c.lockConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	// The waiter is made when Lock first has to wait (or its first round
	// runs the script): an uncontended Lock costs what TryLock does.
	since := c.cfg.clock.Now()
	var w *waiter
	var l *Lock
	defer func() {
		if w != nil {
			c.endWait(ctx, key, w, l)
		}
	}()
	splits, checked := 0, false
	for failures := 1; ; failures++ {
		// The first round is a plain SET NX, unless the Client already
		// waits for the key (it is likely held, and the script queues) or
		// the lock is fenced.
		subscribed, armed := c.notify.state(key)
		plain := failures == 1 && !cfg.fencing && !subscribed
		if !plain {
			if w, err = c.waiterFor(w, since, cfg); err != nil {
				return nil, err
			}
		}
		if w != nil && w.kw == nil && w.token != "" {
			// A node may hand the key to w as soon as its round queued it
			// there: w listens before it asks.
			w.kw = c.notify.join(key, w)
		}
		if w != nil {
			// A quorum of nodes that handed the key to w since its last
			// round: w holds it, no round needed.
			if l = c.handoff(ctx, key, ttl, cfg, w); l != nil {
				return l, nil
			}
		}
		if w != nil {
			w.forget()
		}
		var r *round
		l, r, err = c.acquire(ctx, key, ttl, cfg, w, plain)
		if !plain {
			c.queuedBy(w, r) // even if Lock ends now: the script may have queued it
		}
		if err == nil {
			if w != nil {
				l.waited, l.earlier = w.id, w.earlier(r)
				l.alt = w.token // a node may yet hand the key to w
			}
			return l, nil
		}
		var qe *QuorumError // declared here: an uncontended Lock does not allocate it
		if !errors.As(err, &qe) || qe.Cause != nil {
			return nil, err
		}
		delay := cfg.retry.delay(failures)
		if w, err = c.waiterFor(w, since, cfg); err != nil {
			return nil, err
		}
		w.released(r)
		if w.kw == nil {
			w.kw = c.notify.join(key, w)
		}
		if !armed && !checked {
			// A release between this round's refusal and the subscription
			// would go unheard: once subscribed, ask again at once.
			checked = true
			if c.notify.waitArmed(ctx, w.kw) {
				failures-- // the same attempt, asked again
				continue
			}
		}
		if plain {
			failures--
			continue // ask with the script: it queues and tells the TTL
		}
		wait, namedOnly := delay, false
		switch refused := qe.Count(NodeRefused); {
		case qe.Count(NodeOK) > 0 && refused < c.quorum && !answeredWithError(qe):
			// A split vote (or too little validity left): the others'
			// releases name the longest waiter, who goes at once. A node
			// that answered with an error (read-only, out of memory, no
			// permission) is no split and will not change soon: the retry
			// strategy paces those rounds.
			splits++
			d := min(splitMin<<min(splits-1, 16), splitMax)
			wait, namedOnly = rand.N(d+1), true
		default:
			splits = 0
			if qe.retryKnown {
				wait = min(qe.RetryAfter, c.refresh()) + rand.N(expiryJitter+1)
			}
		}
		if !c.notify.armed(key) {
			wait = min(wait, delay) // no announcements: do not sleep past the back-off
		}
		// A release goes to every node at once, but its announcements
		// arrive one by one. A release that keeps the key for w names it:
		// w goes at the first such announcement. A release that frees the
		// key for anyone wakes w when as many nodes announced it as
		// refused this round (at most a quorum), or a short while after
		// the first: asking at once would find the key still held on the
		// nodes the release has not reached yet.
		need := min(c.quorum, max(qe.Count(NodeRefused), 1))
		if err := c.sleep(ctx, w, wait, need, namedOnly); err != nil {
			if errors.Is(err, pool.ErrClosed) {
				return nil, errors.Join(pool.ErrClosed, qe)
			}
			qe.Cause = err
			return nil, qe
		}
	}
}

// answeredWithError reports whether a node of the round answered with an
// error reply.
func answeredWithError(qe *QuorumError) bool {
	for _, n := range qe.Nodes {
		if n.Status == NodeFailed && replied(n.Err) {
			return true
		}
	}
	return false
}

// sleep waits d, or until a node announced that it keeps the key for w,
// or until need nodes announced a release that counts for w (with
// namedOnly, only the former counts), or a grace period after the first
// such announcement (never past d), or until ctx ends (its error) or the
// Client closes (pool.ErrClosed).
func (c *Client) sleep(ctx context.Context, w *waiter, d time.Duration, need int, namedOnly bool) error {
	clk := c.cfg.clock
	end := clk.Now().Add(d)
	t := clk.NewTimer(d)
	defer func() { t.Stop() }()
	graced := false
	for {
		select {
		case <-t.C():
			return nil
		case <-w.wake:
			// A quorum handed the key to w: it holds it.
			h, others, _ := w.handedOff(c.countsNow)
			if h >= c.quorum {
				return nil
			}
			// A node that keeps the key for w (a reservation) names it:
			// go. The release reached the other nodes at about the same
			// time, before w's round can.
			n := w.announced(namedOnly)
			if n >= need || w.announced(true) > 0 {
				return nil
			}
			// Hand-offs from some nodes: the others' are likely on their
			// way, and after the grace period a round takes what was
			// handed over.
			if (n > 0 || others > 0) && !graced {
				graced = true
				if g := c.grace(); g < end.Sub(clk.Now()) {
					t.Stop()
					t = clk.NewTimer(g)
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return pool.ErrClosed
		}
	}
}

// grace is how long a waiter that heard a release from some nodes waits
// for the others' announcements before it asks anyway (a node's
// announcement can be lost, for example while its pub/sub connection is
// dialled again).
func (c *Client) grace() time.Duration { return min(c.cfg.nodeTimeout/4, 5*time.Millisecond) }

// endWait ends w's wait: it drops its subscription and, when Lock failed,
// takes it out of the queues in the background, also when the Client is
// closing. A waiter that got the lock stays queued until its release: on
// a node that missed the release its entry runs out by itself.
func (c *Client) endWait(ctx context.Context, key string, w *waiter, l *Lock) {
	if w.kw != nil {
		c.notify.leave(w)
	}
	if w.counted {
		defer c.bg.Done()
	}
	if !w.queued || l != nil {
		return
	}
	// The release of what was handed to it, if anything: it passes to
	// the next waiter.
	owned, alt := reservedPrefix+w.id, ""
	if w.token != "" {
		owned, alt = w.token, owned
	}
	args := c.releaseArgs(key, owned, w.id, alt)
	rounds := w.unsettled()
	for i, p := range c.pools {
		// Counted by w (c.bg is above zero), these go out even on a
		// closed Client, before Close returns.
		if w.counted {
			c.bg.Add(1)
		} else if !c.begin(1) {
			return
		}
		if unsettledOn(i, rounds...) {
			// A round of w has not reached its end on this node: sent after
			// it, the release could come first and the round put w back in
			// the queue (pools with several connections a node).
			go func() {
				awaitSettled(rounds...)
				c.sendBackground(ctx, p, args)
			}()
			continue
		}
		c.sendBackground(ctx, p, args)
	}
}

// sendBackground sends the release script with args to p, for work
// counted in c.bg, which it ends with the reply.
func (c *Client) sendBackground(ctx context.Context, p pool.Pool, args []any) {
	if s, ok := p.(pool.Starter); ok {
		s.StartEval(bgCall{c}, releaseScript, args...)
		return
	}
	go func() {
		defer c.bg.Done()
		c.evalBounded(ctx, p, releaseScript, args)
	}()
}

// bgCall receives the reply of a background command that nobody reads.
type bgCall struct{ c *Client }

func (b bgCall) Receive(any, error) { b.c.bg.Done() }
