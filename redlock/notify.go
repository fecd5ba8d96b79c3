package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// Pub/sub connection upkeep.
const (
	// pubsubPing is how often an idle pub/sub connection is pinged; one
	// that has read nothing for pubsubDead is taken for dead and dialled
	// again, so a node that hangs costs its announcements for that long.
	pubsubPing = time.Second
	pubsubDead = 3 * pubsubPing
	// Dialling a node's pub/sub connection again after a failed dial, or
	// after a connection on which the node answered nothing (run), waits
	// from redialMin, doubling, up to redialMax.
	redialMin = 10 * time.Millisecond
	redialMax = time.Second
	// linger is how long a key stays subscribed after its last waiter
	// left: a Client that waits for the same key again soon (a worker
	// that takes a hot key in a loop) does not pay for a new subscription
	// and the round that must follow it.
	linger = time.Second
)

// notifier hears the release announcements of the keys that the Client's
// Lock calls wait for. It keeps one pub/sub connection per node (for the
// pools that implement pool.Subscriber), opened when the first Lock call
// waits and kept until Close. A key's two channels (its announcements to
// everyone, releaseChannel, and the hand-offs to this Client's waiters)
// are subscribed while at least one Lock call waits for it and for linger
// after the last one left, on every node, and again after a connection is
// dialled anew.
type notifier struct {
	c *Client
	// mu guards the subscriptions. Lock order: subNode.wmu, then mu, then
	// a listener's own lock (waiter.mu), which its methods take while mu
	// is held; never the reverse. These three are the only mutexes of a
	// Client taken while another is held: every other (Lock.mu,
	// fenceState.epochMu, warner.mu, round.smu and round.lmu,
	// background.mu, restart safety's per-check mu) is a leaf.
	mu     sync.Mutex
	keys   map[string]*keyWait // by key
	nkeys  atomic.Int32        // len(keys), read without mu
	byChan map[string]*keyWait // by channel: both of every key
	nodes  []*subNode          // nil until the first wait
	subs   int                 // nodes whose pool can subscribe (set with nodes)
	closed bool
	ctx    context.Context // ends with Close: stops dialling
	cancel context.CancelFunc
}

// listener is how the notifier reaches a call that waits for a key (a
// waiter, a multiWaiter): the notifier calls it from its goroutines with
// notifier.mu held, so its methods must return at once and take no lock
// but their own (lock order: notifier.mu, then the listener's).
type listener interface {
	// released: node i released the key, leaving it free for anyone (to
	// is "") or keeping it for the waiter to (a reservation).
	released(i int, to string)
	// handedOff: node i handed the key to the waiter to, after that
	// waiter's round numbered round ran there; conn numbers the pub/sub
	// connection it was heard on (subConn.opened), for restart safety
	// (Client.countsHeard).
	handedOff(i int, to string, round int, conn uint64)
	// poke: the call should count again what it was told (restart safety
	// may count a node now that it did not count when the node spoke).
	poke()
	// subscribed: node i confirmed the key's subscription on a connection
	// (its first, or one dialled anew after the node was out): the node
	// answers again, and a call whose round could not ask it may ask now.
	subscribed(i int)
}

// keyWait is one key's subscription: the calls waiting for it and the
// nodes on which the subscription is confirmed.
type keyWait struct {
	key      string
	channels [2]string // the key's announcements, and the hand-offs to this Client
	waiters  map[listener]struct{}
	acks     []uint8       // per node: bit c set when channels[c] is confirmed on its current connection; bothAcked: the node counts
	count    int           // nodes with bothAcked
	ready    chan struct{} // closed once a quorum of nodes confirmed
	isReady  bool
	idle     clock.Timer // set while no one waits: unsubscribes when it fires
}

// bothAcked is keyWait.acks for a node that confirmed both channels.
const bothAcked = 3

// subNode is one node's pub/sub connection. wmu orders the commands
// written to it; the subscription state is under the notifier's mu, taken
// inside wmu.
type subNode struct {
	i   int
	sub pool.Subscriber
	wmu sync.Mutex
	// Under wmu:
	conn *subConn // nil while disconnected
	// Under notifier.mu:
	subscribed map[string]bool // channels the connection was last told to subscribe
	pending    map[string]int  // SUBSCRIBEs not yet acknowledged, by channel
	// unacked is when the oldest SUBSCRIBE still unacknowledged was sent
	// (zero when none is): a node that leaves one unanswered for
	// pubsubDead, while it answers PING, is dropped (its pending entries
	// would otherwise pile up, two a key).
	unacked time.Time
}

// join subscribes l to key's announcements and returns its subscription;
// nil on a closed Client.
func (n *notifier) join(key string, l listener) *keyWait {
	n.mu.Lock()
	if n.closed || !n.startLocked() {
		n.mu.Unlock()
		return nil
	}
	kw, ok := n.keys[key]
	if !ok {
		kw = &keyWait{key: key, channels: [2]string{wire.ReleaseChannel(key), wire.HandoffChannel(n.c.id, key)},
			waiters: map[listener]struct{}{}, acks: make([]uint8, len(n.nodes)),
			ready: make(chan struct{})}
		n.keys[key] = kw
		n.nkeys.Store(int32(len(n.keys)))
		for _, ch := range kw.channels {
			n.byChan[ch] = kw
		}
	}
	if kw.idle != nil {
		kw.idle.Stop()
		kw.idle = nil
	}
	kw.waiters[l] = struct{}{}
	n.mu.Unlock()
	if !ok {
		n.syncAll(kw)
	}
	return kw
}

// leave ends l's subscription kw. When the last waiter of a key leaves,
// the key stays subscribed for linger, then is unsubscribed unless
// someone waits for it again.
func (n *notifier) leave(kw *keyWait, l listener) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(kw.waiters, l)
	if len(kw.waiters) > 0 || n.keys[kw.key] != kw || n.closed {
		return
	}
	kw.idle = n.c.cfg.clock.AfterFunc(linger, func() { n.drop(kw) })
}

// drop unsubscribes kw if still no one waits for it.
func (n *notifier) drop(kw *keyWait) {
	n.mu.Lock()
	t, ok := ticket{}, len(kw.waiters) == 0 && n.keys[kw.key] == kw && !n.closed
	if ok {
		t, ok = n.c.bg.claim()
	}
	if !ok {
		n.mu.Unlock()
		return
	}
	delete(n.keys, kw.key)
	n.nkeys.Store(int32(len(n.keys)))
	for _, ch := range kw.channels {
		delete(n.byChan, ch)
	}
	n.mu.Unlock()
	defer t.done()
	n.syncAll(kw)
}

// armed reports whether key's subscription is confirmed on a quorum of
// nodes (made by this waiter, another of the Client, or a recent one): a
// release from then on is announced on at least one node where it is
// heard, since a release reaches a quorum too.
func (n *notifier) armed(key string) bool {
	_, armed := n.state(key)
	return armed
}

// subscribed reports whether the Client subscribes to key's
// announcements, armed or not: someone waited for it lately.
func (n *notifier) subscribed(key string) bool {
	subscribed, _ := n.state(key)
	return subscribed
}

// state reports subscribed and armed at once.
func (n *notifier) state(key string) (subscribed, armed bool) {
	if n.nkeys.Load() == 0 {
		return false, false // no Lock call of this Client waits: no lock to take
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	kw, ok := n.keys[key]
	return ok, ok && kw.count >= n.c.quorum // isReady is set when count first reaches the quorum
}

// waitArmed waits, at most one node timeout, until kw is armed; it
// reports whether it is.
func (n *notifier) waitArmed(ctx context.Context, kw *keyWait) bool {
	if kw == nil || n.subs < n.c.quorum {
		return false // the Client cannot hear a quorum of nodes
	}
	t := n.c.cfg.clock.NewTimer(n.c.cfg.nodeTimeout)
	defer t.Stop()
	select {
	case <-kw.ready:
		return n.armed(kw.key)
	case <-t.C():
	case <-ctx.Done():
	case <-n.c.bg.closing():
	}
	return false
}

// startLocked makes the node connections on first use: one goroutine per
// node that can subscribe, counted in the Client's background work.
func (n *notifier) startLocked() bool {
	if n.nodes != nil {
		return true
	}
	var subs []*subNode
	for i, p := range n.c.pools {
		if s, ok := p.(pool.Subscriber); ok {
			subs = append(subs, &subNode{i: i, sub: s, subscribed: map[string]bool{}, pending: map[string]int{}})
		}
	}
	n.keys, n.byChan = map[string]*keyWait{}, map[string]*keyWait{}
	n.nodes = make([]*subNode, len(n.c.pools))
	n.subs = len(subs)
	if len(subs) == 0 {
		return true // announcements are never heard: waits use the back-off
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	fs := []func(){n.pinger}
	for _, s := range subs {
		n.nodes[s.i] = s
		fs = append(fs, func() { n.run(s) })
	}
	if !n.c.bg.goAll(fs...) {
		n.cancel()
		return false
	}
	return true
}

// syncAll brings kw's subscriptions on every node in line with whether
// anyone waits for its key.
func (n *notifier) syncAll(kw *keyWait) {
	for _, s := range n.nodes {
		if s != nil {
			n.sync(s, kw.channels[:])
		}
	}
}

// sync subscribes or unsubscribes chans on s's connection, as needed now.
// A node that is not connected subscribes what is wanted when it is.
func (n *notifier) sync(s *subNode, chans []string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.conn == nil {
		return
	}
	var sub, unsub []string
	n.mu.Lock()
	for _, ch := range chans {
		_, want := n.byChan[ch]
		switch {
		case want == s.subscribed[ch]:
		case want:
			s.subscribed[ch] = true
			s.pending[ch]++
			if s.unacked.IsZero() {
				s.unacked = n.c.cfg.clock.Now()
			}
			sub = append(sub, ch)
		default:
			delete(s.subscribed, ch)
			unsub = append(unsub, ch)
		}
	}
	n.mu.Unlock()
	// A failed write breaks the connection: the reader sees it and dials
	// again, and resubscribes what is wanted then.
	if len(sub) > 0 {
		_ = s.conn.Subscribe(sub...)
	}
	if len(unsub) > 0 {
		_ = s.conn.Unsubscribe(unsub...)
	}
}

// subConn is one pub/sub connection of a node, and what its events told.
type subConn struct {
	pool.PubSubConn
	opened atomic.Uint64 // its number among the Client's pub/sub connections (restarts.subs); 0 until the dial succeeded
	heard  atomic.Bool   // the node answered as a subscriber expects
	last   atomic.Int64  // when the latest event arrived (UnixNano)
	ended  chan error    // receives the PubSubClosed event's error
}

// run keeps node s's pub/sub connection up until Close. A connection that
// worked (the node answered as a subscriber expects, for a ping interval
// at least) is dialled again at once when it breaks. A failed dial, or a
// connection that did not work that long (a node at its client limit
// accepts the connection, sends an error and closes it; a broken one
// acknowledges SUBSCRIBE and closes), waits for the back-off first, so
// that such a node is not dialled in a loop.
func (n *notifier) run(s *subNode) {
	clk := n.c.cfg.clock
	backoff := redialMin
	for {
		sc := &subConn{ended: make(chan error, 1)}
		sc.last.Store(clk.Now().UnixNano())
		conn, err := s.sub.DialPubSub(n.ctx, func(ev pool.PubSubEvent) { n.event(s, sc, ev) })
		if err == nil {
			sc.PubSubConn = conn
			sc.opened.Store(n.c.rs.subs.Add(1))
			since := clk.Now() // before SUBSCRIBE: its answer comes after
			if !n.connected(s, sc) {
				conn.Close()
				<-sc.ended
				return
			}
			if n.c.cfg.maxTTL != 0 {
				// What the node announces on the new connection counts once
				// the node was checked after it opened (Client.countsHeard).
				n.c.recheck(s.i)
			}
			err = <-sc.ended
			n.disconnected(s, sc)
			var ne *pool.NodeError
			if errors.As(err, &ne) && ne.Replied() {
				// A refused SUBSCRIBE or PING (a missing permission):
				// waiting Lock calls fall back to their back-off (WithRetry).
				n.c.warnNode(n.c.pools[s.i].Addr(), "node refused a release subscription: waiting falls back to the back-off (WithRetry)", explainDenied(err))
			}
			if n.ctx.Err() != nil {
				return
			}
			if sc.heard.Load() && clk.Since(since) >= pubsubPing {
				backoff = redialMin
				continue
			}
		}
		t := clk.NewTimer(backoff)
		select {
		case <-t.C():
		case <-n.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, redialMax)
	}
}

// connected installs sc as s's connection and subscribes every channel
// wanted now. It returns false after Close.
func (n *notifier) connected(s *subNode, sc *subConn) bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return false
	}
	chans := make([]string, 0, len(n.byChan))
	for ch := range n.byChan {
		chans = append(chans, ch)
		s.subscribed[ch] = true
		s.pending[ch]++
	}
	if len(chans) > 0 {
		s.unacked = n.c.cfg.clock.Now()
	}
	n.mu.Unlock()
	s.conn = sc
	if len(chans) > 0 {
		_ = sc.Subscribe(chans...)
	}
	return true
}

// disconnected drops s's ended connection: nothing is confirmed on it
// any more.
func (n *notifier) disconnected(s *subNode, sc *subConn) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.conn = nil
	sc.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(s.subscribed)
	clear(s.pending)
	s.unacked = time.Time{}
	for _, kw := range n.keys {
		if kw.acks[s.i] == bothAcked {
			kw.count--
		}
		kw.acks[s.i] = 0
	}
}

// event handles what arrives on node s's connection sc: announcements,
// acknowledgements of SUBSCRIBE, the answers to the pinger's PING, and
// the end of the connection.
func (n *notifier) event(s *subNode, sc *subConn, ev pool.PubSubEvent) {
	if ev.Kind == pool.PubSubClosed {
		sc.ended <- ev.Err
		return
	}
	sc.heard.Store(true)
	sc.last.Store(n.c.cfg.clock.Now().UnixNano())
	switch ev.Kind {
	case pool.PubSubMessage:
		n.announce(s.i, sc.opened.Load(), ev.Channel, ev.Data)
	case pool.PubSubSubscribed:
		n.confirm(s, ev.Channel)
	}
}

// confirm notes the node's acknowledgement of a SUBSCRIBE of ch.
func (n *notifier) confirm(s *subNode, ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.pending[ch]--; s.pending[ch] > 0 {
		return // a later SUBSCRIBE is still on its way
	}
	delete(s.pending, ch)
	if len(s.pending) == 0 {
		s.unacked = time.Time{}
	} else {
		// The others were sent after this one: now is a late bound for
		// the oldest of them.
		s.unacked = n.c.cfg.clock.Now()
	}
	kw, ok := n.byChan[ch]
	if !ok || !s.subscribed[ch] || kw.acks[s.i] == bothAcked {
		return
	}
	if ch == kw.channels[0] {
		kw.acks[s.i] |= 1
	} else {
		kw.acks[s.i] |= 2
	}
	if kw.acks[s.i] != bothAcked {
		return // the other channel is not confirmed yet
	}
	kw.count++
	for l := range kw.waiters {
		l.subscribed(s.i)
	}
	if kw.count >= n.c.quorum && !kw.isReady {
		kw.isReady = true
		close(kw.ready)
	}
}

// announce tells the waiters of ch's key what node i announced there
// (wire.ParseAnnouncement), on the pub/sub connection numbered conn.
func (n *notifier) announce(i int, conn uint64, ch, msg string) {
	a := wire.ParseAnnouncement(msg)
	n.mu.Lock()
	defer n.mu.Unlock()
	if kw, ok := n.byChan[ch]; ok {
		for l := range kw.waiters {
			if a.Handoff {
				l.handedOff(i, a.To, a.Round, conn)
			} else {
				l.released(i, a.To)
			}
		}
	}
}

// poke wakes every waiting Lock call, so that it counts again what the
// nodes handed to it (restart safety may count a node now that it did not
// count when the hand-off was announced).
func (n *notifier) poke() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, kw := range n.keys {
		for l := range kw.waiters {
			l.poke()
		}
	}
}

// pinger keeps the connections talking, so that a dead one is noticed.
func (n *notifier) pinger() {
	clk := n.c.cfg.clock
	t := clk.NewTimer(pubsubPing)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			t.Reset(pubsubPing) // a ticker: the next ping is due a period after this one
		case <-n.ctx.Done():
			return
		}
		for _, s := range n.nodes {
			if s == nil {
				continue
			}
			s.wmu.Lock()
			n.mu.Lock()
			stuck := !s.unacked.IsZero() && clk.Since(s.unacked) >= pubsubDead
			n.mu.Unlock()
			if c := s.conn; c != nil {
				if stuck || clk.Since(time.Unix(0, c.last.Load())) >= pubsubDead {
					// A SUBSCRIBE left unanswered, or nothing read for
					// pubsubDead: the connection ends, and run dials again
					// after the back-off.
					c.Close()
				} else {
					_ = c.Ping()
				}
			}
			s.wmu.Unlock()
		}
	}
}

// close stops the connections; Close then waits for their goroutines.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	nodes := n.nodes
	n.mu.Unlock()
	if n.cancel != nil {
		n.cancel()
	}
	for _, s := range nodes {
		if s == nil {
			continue
		}
		s.wmu.Lock()
		if s.conn != nil {
			s.conn.Close() // the reader fails and returns
		}
		s.wmu.Unlock()
	}
}
