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

	"github.com/google/uuid"

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

// waiter is one Lock call that waits for its key: its place in the
// nodes' queues, its subscription to the key's announcements, its rounds,
// and what the nodes announced to it since the latest one. Its methods
// are the waiting algorithm (docs/waiting.md); lock runs it.
type waiter struct {
	c   *Client
	key string
	ttl time.Duration
	cfg lockConfig

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
	counted   bool     // queued while the Client was open: Close waits for its leaving the queue
	kw        *keyWait // its subscription; nil until it first listens
	// token is what a release sets the key to on a node that hands it to
	// this waiter: the lock's token when a quorum did so. "" when it takes
	// no hand-off (queueing is off, or the lock is fenced).
	token string
	// rounds is how many script rounds it sent (each is numbered, from
	// 1); last is the latest of them; sent those a later command must not
	// overtake.
	rounds int
	last   *round
	sent   pending
	splits int // split votes in a row

	// Announcements since the latest round began: the nodes that released
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

// newWaiter returns the waiter of a Lock call that began at since (on the
// Client's clock). Its id is "<client id>.<n>", so that the nodes can tell
// which Client to announce a hand-off to; "" when queueing is off. Unless
// the lock is fenced, it takes hand-offs, under a token of its own.
func (c *Client) newWaiter(key string, ttl time.Duration, cfg lockConfig, since time.Time) (*waiter, error) {
	w := &waiter{c: c, key: key, ttl: ttl, cfg: cfg, wake: make(chan struct{}, 1), since: since,
		sinceWall: time.Now().UnixMicro() - c.cfg.clock.Now().Sub(since).Microseconds()}
	if c.cfg.window > 0 {
		w.id = c.id + "." + strconv.FormatUint(rand.Uint64(), 36)
		if !cfg.fencing {
			secret, err := newToken()
			if err != nil {
				return nil, err
			}
			w.token, w.granted = w.id+"/"+secret, make([]int, len(c.pools))
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
		w.released(first)
		w.listen()
		if !armed {
			checked = true
			w.c.notify.waitArmed(ctx, w.kw)
		}
	}
	for failures := 0; ; {
		if l := w.handoff(ctx); l != nil {
			return l, nil
		}
		armed := w.c.notify.armed(w.key)
		l, qe, err := w.round(ctx)
		if qe == nil {
			return l, err
		}
		if !armed && !checked {
			// A release between the refusal and the subscription would go
			// unheard: once subscribed, ask again at once.
			checked = true
			if w.c.notify.waitArmed(ctx, w.kw) {
				continue
			}
		}
		failures++
		if err := w.sleep(ctx, qe, failures); err != nil {
			return nil, err
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
	l, r, err := w.c.acquire(ctx, w.key, w.ttl, w.cfg, w, false)
	w.queuedBy(r) // even if Lock ends now: the script may have queued it
	if err == nil {
		l.waited, l.after = w.id, w.sent
		l.alt = w.token // a node may yet hand the key to w
		return l, nil, nil
	}
	qe := asRefusal(err)
	if qe == nil {
		return nil, nil, err
	}
	w.released(r)
	w.listen()
	return nil, qe, nil
}

// asRefusal returns err as a round that did not reach a quorum, which
// waiting may overcome; nil for anything else.
func asRefusal(err error) *QuorumError {
	if err == nil {
		return nil
	}
	var qe *QuorumError
	if errors.As(err, &qe) && qe.Cause == nil {
		return qe
	}
	return nil
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
	w.rounds, w.last = w.rounds+1, r
	w.sent.add(r)
	if w.id != "" && !w.queued {
		w.queued, w.counted = true, w.c.bg.add(1)
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
	n, _, start := w.handedOff(c.countsNow)
	if n < c.quorum {
		return nil
	}
	until := c.validUntil(start, w.ttl)
	if left := until.Sub(c.cfg.clock.Now()); left <= w.cfg.minValidity || left < w.ttl/2 {
		return nil
	}
	l := c.newLock(ctx, w.key, w.token, w.ttl, w.last, until, w.cfg)
	l.waited, l.after = w.id, w.sent
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
	info := RoundInfo{Op: opHandoff, Key: w.key, Start: start, Duration: now.Sub(start),
		Nodes: make([]NodeResult, len(c.pools)), Quorum: true, Validity: until.Sub(now), Drift: c.drift(w.ttl)}
	w.mu.Lock()
	for i, p := range c.pools {
		info.Nodes[i].Addr = p.Addr()
		if w.granted[i] == w.rounds && c.countsNow(i) {
			info.Nodes[i].Status = NodeOK
		}
	}
	w.mu.Unlock()
	for _, ob := range c.cfg.observers {
		ob.Round(&info)
	}
}

// sleep waits after the refused round qe, the failures-th in a row (see
// pause), until a release concerns w. It returns the error that ends the
// wait: qe with the caller's context error as its cause, or pool.ErrClosed
// joined with qe.
func (w *waiter) sleep(ctx context.Context, qe *QuorumError, failures int) error {
	d, need, namedOnly := w.pause(qe, failures)
	err := w.await(ctx, d, need, namedOnly)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pool.ErrClosed):
		return errors.Join(pool.ErrClosed, qe)
	}
	qe.Cause = err
	return qe
}

// pause returns how long w sleeps after the refused round qe, and which
// announcements end the sleep sooner: need nodes announcing a release
// that counts for w, or with namedOnly one that keeps the key for w.
func (w *waiter) pause(qe *QuorumError, failures int) (d time.Duration, need int, namedOnly bool) {
	c := w.c
	delay := w.cfg.retry.delay(failures)
	d = delay
	switch refused := qe.Count(NodeRefused); {
	case qe.Count(NodeOK) > 0 && refused < c.quorum && !answeredWithError(qe):
		// A split vote (or too little validity left): the others' releases
		// name the longest waiter, who goes at once. A node that answered
		// with an error (read-only, out of memory, no permission) is no
		// split and will not change soon: the back-off paces those rounds.
		w.splits++
		ceiling := min(splitMin<<min(w.splits-1, 16), splitMax)
		d, namedOnly = rand.N(ceiling+1), true
	default:
		w.splits = 0
		if qe.retryKnown {
			d = min(qe.RetryAfter, c.refresh()) + rand.N(expiryJitter+1)
		}
	}
	if !c.notify.armed(w.key) {
		d = min(d, delay) // no announcements: do not sleep past the back-off
	}
	// A release goes to every node at once, but its announcements arrive
	// one by one. A release that keeps the key for w names it: w goes at
	// the first such announcement. One that frees the key for anyone
	// wakes w when as many nodes announced it as refused this round (at
	// most a quorum), or a short while after the first: asking at once
	// would find the key still held where the release has not landed yet.
	return d, min(c.quorum, max(qe.Count(NodeRefused), 1)), namedOnly
}

// await waits d, or until a node announced that it keeps the key for w,
// or until need nodes announced a release that counts for w (with
// namedOnly, only the former counts), or a grace period after the first
// such announcement (never past d), or until ctx ends (its error) or the
// Client closes (pool.ErrClosed).
func (w *waiter) await(ctx context.Context, d time.Duration, need int, namedOnly bool) error {
	c, clk := w.c, w.c.cfg.clock
	end := clk.Now().Add(d)
	t := clk.NewTimer(d)
	defer func() { t.Stop() }()
	graced := false
	for {
		select {
		case <-t.C():
			return nil
		case <-w.wake:
			h, others, _ := w.handedOff(c.countsNow)
			n := w.announced(namedOnly)
			// A quorum handed the key to w: it holds it. A node that keeps
			// the key for w (a reservation) names it: go, the release
			// reached the other nodes at about the same time.
			if h >= c.quorum || n >= need || w.announced(true) > 0 {
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
		case <-c.bg.closing():
			return pool.ErrClosed
		}
	}
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
		c.notify.leave(w)
	}
	if !w.counted {
		return // never queued, or the Client was closed before it could be
	}
	defer c.bg.end()
	if l != nil {
		return
	}
	// The release of what was handed to it, if anything: it passes to
	// the next waiter.
	owned, alt := reservation(w.id), ""
	if w.token != "" {
		owned, alt = w.token, owned
	}
	args := c.releaseArgs(w.key, owned, w.id, alt)
	for i, p := range c.pools {
		if !w.sent.on(i) {
			c.sendBackground(ctx, p, args)
			continue
		}
		// A round of w has not settled on this node: sent after it, the
		// release could come first and the round put w back in the queue
		// (pools with several connections a node).
		c.bg.goHeld(func() {
			w.sent.await()
			c.sendBackground(ctx, p, args)
		})
	}
}

// sendBackground sends the release script with args to p as background
// work, and drops the reply. The caller holds a count of background work,
// so that Close waits for this one too.
func (c *Client) sendBackground(ctx context.Context, p pool.Pool, args []any) {
	if s, ok := p.(starter); ok {
		c.bg.addHeld(1)
		s.StartEval(bgCall{c}, releaseScript, args...)
		return
	}
	c.bg.goHeld(func() { c.evalBounded(ctx, p, releaseScript, args) })
}

// bgCall receives the reply of a background command that nobody reads.
type bgCall struct{ c *Client }

func (b bgCall) Receive(any, error) { b.c.bg.end() }

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

// roundToken returns the token of a round: a new random one after the
// Client's id ("<client id>:<uuid>", so that Inspect can tell whose it
// is), or for the script round of a waiter that takes hand-offs, its
// hand-off token + "/" + the round's number. A lock that waited can thus be released by its
// token alone (Restore): the token names the Lock call and its hand-off
// token (waitToken).
func (c *Client) roundToken(w *waiter, plain bool) (string, error) {
	if plain || w == nil || w.token == "" {
		return newTokenWith(c.tokenPrefix)
	}
	return w.token + "/" + strconv.Itoa(w.rounds+1), nil
}

// waitToken reads a token made for a Lock call that waited: its hand-off
// token ("<call id>/<uuid>") or a round token of it ("<hand-off
// token>/<round>"). It returns the call's id, and the hand-off token when
// token is a round token; ok is false for any other token.
func waitToken(token string) (id, handoff string, ok bool) {
	id, rest, found := strings.Cut(token, "/")
	if !found || !waiterID(id) {
		return "", "", false
	}
	secret, round, isRound := strings.Cut(rest, "/")
	if _, err := uuid.Parse(secret); err != nil || len(secret) != 36 {
		return "", "", false
	}
	if !isRound {
		return id, "", true
	}
	if n, err := strconv.Atoi(round); err != nil || n < 1 || strconv.Itoa(n) != round {
		return "", "", false
	}
	return id, id + "/" + secret, true
}

// waiterID reports whether id has the form of a Lock call's id: a Client
// id, a dot, a number in base 36.
func waiterID(id string) bool {
	cid, n, found := strings.Cut(id, ".")
	return found && base36(cid) && base36(n)
}

func base36(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return true
}
