package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// defaultMaxTTL is the longest lock TTL that restart safety assumes any
// client of the nodes uses, unless WithRestartSafety says otherwise.
const defaultMaxTTL = time.Minute

// ErrNodeRestarted is in the chain of a node's error in a QuorumError
// when restart safety did not count the node: it came back without its
// data (or from an old snapshot) less than the maximum TTL ago, so it
// may have forgotten a lock that is still held. See WithRestartSafety.
var ErrNodeRestarted = errors.New("redlock: node restarted without its data")

// WithRestartSafety sets maxTTL, the longest TTL any client of these nodes
// gives a lock: a node that comes back without its data is not counted
// toward a quorum until maxTTL after it restarted, so that every lock it
// forgot has run out first. A longer TTL used by this Client, to acquire a
// lock or to extend one, raises its own wait to that TTL. Default 1m; give
// every client of a deployment the same value. 0 turns restart safety off:
// a restarted node counts at once, and a second owner can take a lock it
// forgot. See docs/safety.md.
func WithRestartSafety(maxTTL time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.maxTTL = maxTTL })
}

// WithDurableNodes declares that every node persists each write before it
// answers (appendonly yes, appendfsync always): a node that restarted with
// its data is counted at once. A node that restarted empty still waits out
// the maximum TTL. Default: nodes are not assumed durable.
func WithDurableNodes() Option {
	return clientOption(func(c *clientConfig) { c.durable = true })
}

// WithVerifiedGrants makes every grant carry the identity of the dataset
// that made it (its replication id), and count only when the node's
// restart check counted that dataset. Without it, a grant counts on a
// connection the check covered, and a failover the pool does not see (an
// endpoint that keeps client connections open while it moves them to a
// promoted replica) goes unseen. The cost: an INFO replication per grant,
// about 17µs of the node's CPU (docs/benchmarks.md). It needs restart
// safety (WithRestartSafety not 0). Default off; see
// docs/operations.md#replicas-and-failover.
func WithVerifiedGrants() Option {
	return clientOption(func(c *clientConfig) { c.verified = true })
}

// Restart safety. A node that restarts without its data forgets the locks
// it held; counted at once, it lets a second owner take a lock whose
// holder still counts on it. So a Client counts a node toward an
// acquisition only while it trusts the process it talks to:
//
//   - It asks each node (node.lua) for its run id, its uptime, its
//     dataset's lineage (INFO replication's master_replid) and its
//     marker: the run id and lineage a Client stored there once it could
//     count the process. A node whose marker is its run id and lineage is
//     counted. A node without one, on a dataset of its own, is counted
//     once it has been up for the maximum TTL, and then marked. A node
//     whose data came from another process or lineage (a restart from a
//     snapshot or an append-only file, a replica promoted) is counted
//     once the maximum TTL has passed since a check first saw it so, a
//     moment node.lua records on the node (sighted): a promoted replica
//     has run for far longer than it has led. With WithDurableNodes, a
//     node whose marker survived its restart is counted and marked at
//     once (durable nodes do not fail over). A replica's check fails.
//   - A deployment on which no node has a marker is new: nothing can
//     hold a lock on it, and every node is counted and marked at once.
//   - It asks with its first acquisition, and again, in the background,
//     whenever a pool that implements pool.Reconnector opened a new
//     connection since: a node that restarts loses its connections, so a
//     reply on a connection checked before came from the checked process.
//     A reply on an unchecked connection is not counted. A grant from a
//     node that is not counted yet waits for the check under way (until
//     its round's node timeout) instead of failing at once (awaitCheck).
//     A grant counts only when the check says the node counts and no
//     connection was opened between the check and the grant, whichever
//     of the two replies came first: both connections were open at once,
//     so they talked to one process.
//   - The first check goes out beside the first acquisition, not before
//     it: the first lock costs no round trip of its own. On pools that
//     send everything on one connection (async.OneConn: pool.New's) the
//     two share it. Other pools may send them on different connections,
//     so there a grant sent before the node was checked on the pool's
//     connections (the first, or any after the pool opened another) is
//     asked with the identity of the dataset that makes it (wire.Sharded:
//     its replication id, which a restart or a promotion changes; the run
//     id where INFO replication is refused). It counts when that identity
//     is the checked process's, whatever connection it came on
//     (countProved); otherwise it waits for a check that sees it.
//   - A check is bounded by checkPatience, not by the node timeout: a
//     check that answers after the round that started it was decided
//     still settles the node for the next call, which waits for it rather
//     than asking again.
//   - A pool that does not tell (not a pool.Reconnector) gets a generation
//     kept by the Client (suspectGen): it grows with every call to the node
//     that failed without the node's answer, and with a fence epoch that
//     changed, the signs that the pool may be on a new connection. A reply
//     after one counts once the node was checked again.

// checkPatience is the least time a restart check waits for its node's
// answer (the node timeout when that is longer). It runs in the
// background: a grant waits for it only until its own round is decided.
const checkPatience = 5 * time.Second

// nodeView is what the Client knows of one node's process.
type nodeView struct {
	gen     uint64    // the connection generation the check was made on
	subs    uint64    // restarts.subs when the check began: pub/sub connections opened up to it talk to the checked process
	runID   string    // the process's run id
	lineage string    // its dataset's replication id
	from    time.Time // when the node can be counted; zero: now
	// marking: the node is counted once this Client has marked it.
	marking bool
	why     string // while from is ahead: what the check found
}

// restarts is the Client's restart-safety state.
type restarts struct {
	views    []atomic.Pointer[nodeView] // nil until a check succeeded
	checking []atomic.Bool              // a background check is under way
	gens     []pool.Reconnector         // a *suspectGen for pools that do not tell
	lastErr  []atomic.Pointer[error]    // why the last check failed; nil after one succeeded
	// The check of every node that goes out with the first acquisition:
	// the first caller starts it in the background (allBusy is set while
	// it runs). Nobody waits for it before sending: a grant waits for it
	// in its own round (awaitCheck).
	firstTaken atomic.Bool
	// checked is closed, and replaced, whenever a check ended or changed
	// a node's view: a grant that waits for a check waits on it.
	checked atomic.Pointer[chan struct{}]
	// settled is set once a check of every node had a quorum answer;
	// until then a node's check is a check of all of them (allBusy), so
	// that a deployment that came up after the Client is still seen new.
	settled atomic.Bool
	allBusy atomic.Bool
	longest atomic.Int64 // the longest TTL used, in ns
	// subs counts the pub/sub connections the notifier opened, to any
	// node: each connection is numbered by it (subConn.opened) once its
	// dial succeeded, and each check notes it when it begins.
	subs atomic.Uint64
	// clusters[i] is set once a check found node i in cluster mode: its
	// grants then count shard by shard (shards.go), by shards[i].
	clusters []atomic.Bool
	shards   []shards
	// oneConn[i]: node i's pool sends everything on one connection
	// (pool.New's), so its first grant needs no proof (shards.go, wrapGrant).
	oneConn []bool
}

func (c *Client) initRestarts() {
	c.rs.views = make([]atomic.Pointer[nodeView], len(c.pools))
	c.rs.checking = make([]atomic.Bool, len(c.pools))
	c.rs.gens = make([]pool.Reconnector, len(c.pools))
	c.rs.lastErr = make([]atomic.Pointer[error], len(c.pools))
	c.rs.clusters = make([]atomic.Bool, len(c.pools))
	c.rs.shards = make([]shards, len(c.pools))
	for i := range c.rs.shards {
		c.rs.shards[i].views, c.rs.shards[i].checking = map[string]*shardView{}, map[uint16]bool{}
	}
	ch := make(chan struct{})
	c.rs.checked.Store(&ch)
	for i, p := range c.pools {
		if g, ok := p.(pool.Reconnector); ok {
			c.rs.gens[i] = g
		} else {
			c.rs.gens[i] = new(suspectGen)
		}
	}
}

// suspectGen is the generation of a pool that does not implement
// pool.Reconnector: the count of the signs that it may have opened a new
// connection since (suspect).
type suspectGen struct{ n atomic.Uint64 }

func (g *suspectGen) Generation() uint64 { return g.n.Load() }

// suspect notes a sign that node i's pool may have opened a new
// connection, when the pool does not say so itself: a call that failed
// without the node's answer (a broken or timed-out connection is
// replaced), or a fence epoch that changed. The node's next reply counts
// once the node has been checked again.
func (c *Client) suspect(i int) {
	if g, ok := c.rs.gens[i].(*suspectGen); ok {
		g.n.Add(1)
	}
}

// errNoLineage is why a node's failover goes unseen: its ACL refuses the
// restart check INFO replication.
var errNoLineage = errors.New("the node refused INFO replication (its ACL user needs +info|replication): a replica promoted in its place would be counted as soon as it has run for the maximum TTL (docs/operations.md#acl)")

// roleChanged notes that node i answered as a replica does (READONLY):
// its role changed since it was checked. Promoted again, it would grant
// from another dataset on the same connection, so its next grant counts
// only after a new check (which fails while it is a replica).
func (c *Client) roleChanged(i int) {
	if c.cfg.maxTTL > 0 {
		c.rs.views[i].Store(nil)
		c.suspect(i)
	}
}

// isReadOnly reports a node's READONLY error reply: it is a replica.
func isReadOnly(err error) bool {
	var re pool.ReplyError
	return errors.As(err, &re) && strings.HasPrefix(string(re), "READONLY")
}

// maxTTL is the longest TTL a forgotten lock can have: WithRestartSafety, or a
// longer TTL this Client used.
func (c *Client) maxTTL() time.Duration {
	return max(c.cfg.maxTTL, time.Duration(c.rs.longest.Load()))
}

// beforeAcquire readies restart safety for an acquisition with ttl: the
// first one starts the check of every node, in the background. It never
// waits: the acquisition goes out beside the check, and its grants wait
// for the check (awaitCheck).
func (c *Client) beforeAcquire(ctx context.Context, ttl time.Duration) {
	if c.cfg.maxTTL == 0 {
		return
	}
	c.noteTTL(ttl)
	if c.rs.firstTaken.CompareAndSwap(false, true) {
		c.rs.allBusy.Store(true)
		bctx := context.WithoutCancel(ctx)
		if !c.bg.goTracked(func() {
			c.checkAll(bctx)
			c.rs.allBusy.Store(false) // before the poke: a waiter it wakes may ask again
			c.checkEnded()
			c.notify.poke()
		}) {
			c.rs.allBusy.Store(false)
		}
	}
}

// checkEvent returns the channel that the next end of a check closes.
func (c *Client) checkEvent() <-chan struct{} { return *c.rs.checked.Load() }

// checkEnded wakes the grants that wait for a check (awaitCheck): a check
// ended, or a node's view changed.
func (c *Client) checkEnded() {
	ch := make(chan struct{})
	close(*c.rs.checked.Swap(&ch))
}

// checkUnderWay reports whether a check that may settle node i is under
// way: of the node, or of every node.
func (c *Client) checkUnderWay(i int) bool {
	return c.rs.checking[i].Load() || c.rs.allBusy.Load()
}

// noteTTL raises the longest TTL this Client used (maxTTL) to ttl, before
// a round that gives a key ttl is sent (an acquisition, an extension). A
// node forgets such a key only when its process dies after the round
// reached it; the process that replaces it is checked after it started,
// so after the raise, and waits at least ttl. A view set before the raise,
// with a shorter wait, is of a process that was already running: it does
// not hold the key (it restarted empty and was not counted, so the round's
// quorum is on other nodes), or it got the key from this round and keeps
// it until it restarts, which gives it a new view.
func (c *Client) noteTTL(ttl time.Duration) {
	if c.cfg.maxTTL == 0 {
		return
	}
	for {
		cur := c.rs.longest.Load()
		if int64(ttl) <= cur || c.rs.longest.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}

// counts reports whether node i's reply to an acquisition counts toward
// the quorum: nil when it does, otherwise why not. It never blocks; a
// check it finds missing is started in the background.
func (c *Client) counts(i int) error {
	_, err := c.countAt(i, c.generation(i), true)
	return err
}

// generation returns node i's connection generation now.
func (c *Client) generation(i int) uint64 { return c.rs.gens[i].Generation() }

// countAt reports whether a reply of node i read at connection generation
// gen counts toward a quorum: err is nil when it does, otherwise why not.
// When it does not count for want of a check, start starts one in the
// background (unless one is under way), and wait says that a check under
// way may still make it count (awaitCheck). It never blocks.
func (c *Client) countAt(i int, gen uint64, start bool) (wait bool, err error) {
	return c.countProved(i, gen, "", start)
}

// countProved is countAt for a grant that came with proof, the identity
// of the dataset that made it (wire.Sharded; "" for none): a grant whose
// identity is the checked process's counts whatever connection it came
// on, and one whose identity is another's waits for a check that sees it.
func (c *Client) countProved(i int, gen uint64, proof string, start bool) (wait bool, err error) {
	if c.cfg.maxTTL == 0 {
		return false, nil
	}
	v := c.rs.views[i].Load()
	for v == nil || v.marking || c.stale(i, v, gen, proof) {
		// Not checked, being marked, or checked on an older connection
		// than the reply's (or of another dataset than the proof's): a
		// check that runs now sees the reply's process (while no
		// connection was opened since the reply).
		if start {
			c.recheck(i)
		}
		if c.checkUnderWay(i) {
			return true, c.uncheckedWaiting(i)
		}
		// A check that ended between the look and now (the one just
		// started may have) changed the view: look again.
		if now := c.rs.views[i].Load(); now != v {
			v, start = now, false
			continue
		}
		return false, c.unchecked(i)
	}
	if proof == "" && gen < v.gen {
		// Checked on a connection opened after the reply was read: the
		// check says nothing of the reply's.
		return false, errUnchecked
	}
	if proof != "" && start && gen > v.gen {
		// Proved; the pool opened a connection since the check: check
		// again in the background, so that later grants need no proof.
		c.recheck(i)
	}
	return c.countView(i, v)
}

// stale reports whether node i's view v says nothing of a reply read at
// connection generation gen with proof (countProved): a connection was
// opened since the check, or, with a proof, it names another dataset. On a
// cluster node the proof is the shard's, which the shard gate checks.
func (c *Client) stale(i int, v *nodeView, gen uint64, proof string) bool {
	switch {
	case proof == "":
		return gen > v.gen
	case c.rs.clusters[i].Load():
		return false
	}
	return wire.ShardOf(v.runID, v.lineage) != proof
}

// countView reports whether node i counts by its view v (checked, marked,
// of the reply's process): err is nil when it does, otherwise why not.
func (c *Client) countView(i int, v *nodeView) (wait bool, err error) {
	if v.from.IsZero() {
		return false, nil
	}
	now := c.cfg.clock.Now()
	if now.Before(v.from) {
		return false, &restartedError{left: v.from.Sub(now), why: v.why}
	}
	// The wait is over: mark the node, so that other clients count it at
	// once too.
	if c.rs.views[i].CompareAndSwap(v, &nodeView{gen: v.gen, runID: v.runID, lineage: v.lineage, subs: v.subs}) {
		c.bg.goTracked(func() { c.mark(i, v.runID, v.lineage, "") })
	}
	return false, nil
}

// awaitWakes bounds how many times awaitCheck looks again at a node after
// a check ended: each look is one check's end, and a grant needs at most
// the check under way, then one of the connection it came on.
const awaitWakes = 8

// awaitCheck waits for a check of node i that may make its grant, read at
// connection generation gen with proof (countProved), count (countProved
// said wait), until deadline (its round's node timeout) or Close, and
// returns why the grant does not count, or nil when it does. After a
// check under way ended, it starts one more when the node was checked on
// an older connection than the grant's, or saw another dataset.
func (c *Client) awaitCheck(i int, gen uint64, proof string, deadline time.Time) error {
	t := c.cfg.clock.NewTimer(max(deadline.Sub(c.cfg.clock.Now()), 0))
	defer t.Stop()
	var err error
	for range awaitWakes {
		ev := c.checkEvent() // before looking: a check that ends after the look closes it
		var wait bool
		if wait, err = c.countProved(i, gen, proof, true); !wait {
			return err
		}
		select {
		case <-ev:
		case <-t.C():
			return err
		case <-c.bg.closing():
			return err
		}
	}
	_, err = c.countProved(i, gen, proof, false)
	return err
}

// countsHeard reports whether what node i announced on the pub/sub
// connection numbered conn (subConn.opened; 0: unknown) counts toward a
// quorum now: the node counts, and it was checked after that connection
// opened. A node that restarts loses its pub/sub connection too, and the
// notifier dials the new process at once, while the Client's command
// connection may not have noticed yet: until a check on it, that process
// is not known to be the one counted. Otherwise it starts a check in the
// background; the node's waiters count again when it is done.
func (c *Client) countsHeard(i int, conn uint64) bool {
	if c.counts(i) != nil || c.clustered(i) {
		return false // on a cluster node, a hand-off does not say which shard made it (shards.go)
	}
	if c.cfg.maxTTL == 0 {
		return true
	}
	if v := c.rs.views[i].Load(); conn != 0 && v != nil && v.subs >= conn {
		return true
	}
	c.recheck(i)
	return false
}

// errUnchecked is the error of a node whose connection has not been
// checked for a restart yet.
var errUnchecked = errors.New("redlock: node not checked for a restart yet (new connection); counted once checked")

// notCounted reports whether err is restart safety's reason not to count
// a node (ErrNodeRestarted, errUnchecked). It is only given to a node
// that granted (nodeCall.Receive).
func notCounted(err error) bool {
	return errors.Is(err, ErrNodeRestarted) || errors.Is(err, errUnchecked)
}

// unchecked returns node i's error while it is not checked: errUnchecked,
// with why its last check failed when one did (a user without the
// permissions the check needs, for example).
func (c *Client) unchecked(i int) error {
	if e := c.rs.lastErr[i].Load(); e != nil {
		return &uncheckedError{last: *e}
	}
	return errUnchecked
}

// uncheckedWaiting is unchecked for a node whose check is under way: the
// grant was not counted because the check had not answered by the time
// its round was decided.
func (c *Client) uncheckedWaiting(i int) error {
	e := &uncheckedError{waiting: true}
	if last := c.rs.lastErr[i].Load(); last != nil {
		e.last = *last
	}
	return e
}

// uncheckedError is errUnchecked with the last check's error, and
// whether a check was under way.
type uncheckedError struct {
	last    error
	waiting bool
}

func (e *uncheckedError) Error() string {
	msg := errUnchecked.Error()
	if e.waiting {
		msg += "; its check had not answered yet"
	}
	if e.last != nil {
		msg += "; the last check failed: " + e.last.Error()
	}
	return msg
}

func (e *uncheckedError) Unwrap() []error {
	if e.last == nil {
		return []error{errUnchecked}
	}
	return []error{errUnchecked, e.last}
}

// restartedError is the error of a node restart safety does not count.
type restartedError struct {
	left time.Duration
	why  string
}

func (e *restartedError) Error() string {
	return fmt.Sprintf("%v, or may have: %s; not counted toward a quorum for another %v (restart safety, WithRestartSafety; see docs/operations.md#restarts-and-upgrades)",
		ErrNodeRestarted, e.why, e.left.Round(time.Millisecond))
}

func (e *restartedError) Unwrap() error { return ErrNodeRestarted }

// nodeFacts is a node's answer to the restart check.
type nodeFacts struct {
	runID   string
	lineage string        // the dataset's replication id
	uptime  time.Duration // at most the true uptime (uptimeFloor), or the time since a copied dataset was first seen
	copied  bool          // the dataset came from another process or lineage (uptime is since it was first seen)
	cluster bool          // the node runs in cluster mode: the marker is one slot's (shards.go)
	born    string        // the shards that ran when the deployment was new (wire.BornOf)
	own     bool          // the lineage began in this process
	marker  string        // the run id when marked; "~": another process's or lineage's marker; "+": a marker of a later form; "": none
	gen     uint64
	subs    uint64    // restarts.subs when the check began
	at      time.Time // when the answer came, on the Client's clock
}

// checkFailed notes why node i's restart check failed, err, and returns
// it as the Client reports it; a node that refused the check is logged
// and reported to the observers, as it is counted toward no quorum.
func (c *Client) checkFailed(i int, err error) error {
	err = explainDenied(err)
	c.rs.lastErr[i].Store(&err)
	if replied(err) {
		c.warnNode(c.pools[i].Addr(), "node refused the restart check: it is not counted toward any quorum", err)
		if c.observing() {
			c.emit(Event{Kind: EventNodeExcluded, Node: c.pools[i].Addr(), Err: err})
		}
	}
	return err
}

// checkBound is how long a check in the background waits for its node:
// the node timeout, or checkPatience when that is longer.
func (c *Client) checkBound() time.Duration { return max(c.cfg.nodeTimeout, checkPatience) }

// checkNode runs the restart check on node i, marking it with mark first
// when that is its run id ("" to only read), for at most bound, and no
// longer than until Close. The answer vouches for the pool's connections
// (its gen) only when they were open throughout: no connection was
// opened while it ran, or the pool had none before and opened exactly
// one, the check's (a fresh pool's first command); otherwise its gen is
// 0. A check that failed without the node's answer (a broken connection)
// asks once more.
func (c *Client) checkNode(ctx context.Context, i int, mark, born string, bound time.Duration) (nodeFacts, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	c.cancelOnClose(ctx, cancel)
	var err error
	retried := false
	for range 2 {
		var f nodeFacts
		g := c.rs.gens[i]
		var before uint64
		if g != nil {
			before = g.Generation()
		}
		subs := c.rs.subs.Load()
		var reply any
		reply, err = c.pools[i].Eval(ctx, wire.NodeCheck, wire.NodeCheckArgs(mark, born)...)
		if err != nil {
			if !replied(err) {
				c.suspect(i)
				if !retried && ctx.Err() == nil {
					// The connection broke (the node restarted, and the
					// pool's idle connection died with it): the pool dials
					// anew for the next command. Ask once more.
					retried = true
					continue
				}
			}
			return f, c.checkFailed(i, err)
		}
		if f, err = parseFacts(reply); err != nil {
			err = &pool.NodeError{Addr: c.pools[i].Addr(), Op: "EVALSHA", Err: err}
			c.rs.lastErr[i].Store(&err)
			return f, err
		}
		c.noteFacts(i, f)
		f.at, f.subs = c.cfg.clock.Now(), subs
		if g == nil {
			return f, nil
		}
		f.gen = c.vouched(i, before, g.Generation())
		return f, nil
	}
	return nodeFacts{}, err
}

// noteFacts notes what node i's check f tells beside its process: that
// the node is a cluster (its grants then count shard by shard), that its
// lineage is unknown (logged), and that the check succeeded.
func (c *Client) noteFacts(i int, f nodeFacts) {
	if f.cluster {
		c.rs.clusters[i].Store(true)
		c.noteBorn(i, f.born)
	}
	if f.lineage == wire.UnknownLineage {
		c.warnNode(c.pools[i].Addr(), "restart safety cannot see a failover on this node", errNoLineage)
	}
	c.rs.lastErr[i].Store(nil)
}

// cancelOnClose calls cancel, which ends a check's ctx, once the Client
// has been closing for the node timeout. A check under way when Close is
// called is given that long to end: the mark it may be writing lands, so
// that a Client closed right after its first lock on a new deployment
// does not leave a node unmarked, which every other Client would then
// wait out for the maximum TTL. Close waits no longer for a stalled node.
func (c *Client) cancelOnClose(ctx context.Context, cancel context.CancelFunc) {
	go func() {
		select {
		case <-c.bg.closing():
		case <-ctx.Done():
			return
		}
		t := c.cfg.clock.NewTimer(c.cfg.nodeTimeout)
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
}

// vouched is the connection generation a check of node i that began at
// generation before and answered at after vouches for: after, when no
// connection was opened on the way (or the check's was the pool's
// first); otherwise 0, none (a grant that went out beside the check may
// have opened one): only grants that prove their dataset count
// (countProved) until a check on connections that stay, which such a
// grant starts in the background.
func (c *Client) vouched(i int, before, after uint64) uint64 {
	if after == before || c.firstConnection(i, before, after) {
		return after
	}
	return 0
}

// firstConnection reports whether a check of node i that began at
// connection generation before and answered at after ran on the only
// connection its pool ever opened: a pool.Reconnector that had opened
// none opened exactly one, so the check's reply came on it. A generation
// the Client keeps itself (suspectGen) counts signs, not connections: it
// says no such thing.
func (c *Client) firstConnection(i int, before, after uint64) bool {
	if _, own := c.rs.gens[i].(*suspectGen); own {
		return false
	}
	return before == 0 && after == 1
}

// uptimeFloor is the least true uptime of a node that reports up seconds.
// Redis reports the difference of two times each cut to a whole second,
// the start and the present, which exceeds the true uptime by up to a
// second (started at 9.9s, asked at 10.0s: 1s). Counted from the report
// alone, a restarted node would count up to a second early.
func uptimeFloor(up int64) time.Duration {
	return max(time.Duration(up-1)*time.Second, 0)
}

// parseFacts reads {run id, uptime, marker}.
func parseFacts(reply any) (nodeFacts, error) {
	w, err := wire.ParseNodeCheck(reply)
	if err != nil {
		return nodeFacts{}, err
	}
	f := nodeFacts{runID: w.RunID, uptime: uptimeFloor(w.Uptime), marker: w.Marked, lineage: w.Lineage, cluster: w.Cluster, born: w.Born, own: w.Own}
	if w.Sighted >= 0 {
		// A dataset that came from elsewhere (a promoted replica, a
		// restart from a snapshot): what it missed is counted from when
		// it was first seen so, which a process's start may long precede.
		f.uptime = min(f.uptime, uptimeFloor(w.Sighted))
		f.copied = true
	}
	return f, nil
}

// firstCheckGrace is the least time the first restart check waits for
// the remaining nodes once a quorum answered.
const firstCheckGrace = 10 * time.Millisecond

// answer is one node's answer to the restart check.
type answer struct {
	i   int
	f   nodeFacts
	err error
}

// checkAll checks every node at once, before the first acquisition, and
// returns once every node replied, or a short grace after a quorum
// answered or so many failed that no quorum can: the others are taken in
// the background as their answers come. When a
// quorum answered and none of them has a marker, the deployment is new:
// no lock can be held on it (a lock held on a quorum that lost its data
// would need a node that kept its marker among any quorum, unless more
// than N-quorum nodes lost their data at once). Every node is then
// counted and marked at once. A node that answered with a marker is
// adopted as soon as it answered: a marker says the deployment is not
// new, whatever the others answer, and a first grant that rode along
// with the check need not wait for the slowest node.
func (c *Client) checkAll(ctx context.Context) {
	began := c.cfg.clock.Now()
	answers, n := c.startChecks(ctx)
	var early errgroup.Group
	got, took := c.firstAnswers(answers, n, func(a answer) {
		early.Go(func() error { c.adoptAnswer(a, false, began); return nil })
	})
	ok, adopted := 0, make([]bool, len(got)) // adopted: went to early
	for k, a := range got {
		if a.err == nil {
			ok++
		}
		adopted[k] = marked(a)
	}
	if ok >= c.quorum {
		c.rs.settled.Store(true)
	}
	// A quorum answered and none of them has a marker: a new deployment.
	fresh := ok >= c.quorum && !slices.Contains(adopted, true)
	if !fresh && c.freshBeingMarked(got) {
		// Another Client may be marking a new deployment right now: ask
		// the unmarked nodes again once its marks have landed.
		c.askUnmarkedAgain(ctx, got, took)
	}
	// Marked before they are counted: another Client that checks now
	// sees the deployment as used.
	var g errgroup.Group
	for k, a := range got {
		if !adopted[k] { // asked again meanwhile, maybe (askUnmarkedAgain)
			g.Go(func() error { c.adoptAnswer(a, fresh, began); return nil })
		}
	}
	_, _ = g.Wait(), early.Wait()
	if late := n - len(got); late > 0 {
		// Held, not tracked: checkAll runs as background work, and the
		// late answers are adopted (and marked) even after Close.
		c.bg.goHeld(func() {
			for range late {
				c.adoptAnswer(<-answers, fresh, began)
			}
		})
	}
}

// marked reports whether a is a node's answer with a marker in place.
func marked(a answer) bool { return a.err == nil && a.f.marker != "" }

// adoptAnswer turns one answer of checkAll into node i's view (adopt),
// marks the node when it is to be, and ends its check. fresh says the
// deployment is new, as checkAll found it; began is when checkAll began.
func (c *Client) adoptAnswer(a answer, fresh bool, began time.Time) {
	if fresh && a.err == nil && a.f.marker == "" {
		c.noteFresh(a.i, began) // before the node counts (shards.go)
	}
	if a.err == nil && c.adopt(a.i, a.f, fresh) {
		born := ""
		if fresh && a.f.cluster && a.f.marker == "" {
			born = c.shardsNow(a.i) // written with the node's first mark (shards.go)
		}
		c.mark(a.i, a.f.runID, a.f.lineage, born)
	}
	c.rs.checking[a.i].Store(false)
	c.checkEnded()
}

// startChecks checks every node in the background; the answers arrive on
// the channel, n of them.
func (c *Client) startChecks(ctx context.Context) (answers chan answer, n int) {
	n = len(c.pools)
	answers = make(chan answer, n)
	for i := range c.pools {
		c.rs.checking[i].Store(true)
		if !c.bg.goTracked(func() {
			f, err := c.checkNode(ctx, i, "", "", c.checkBound())
			answers <- answer{i, f, err}
		}) {
			c.rs.checking[i].Store(false)
			n--
		}
	}
	return answers, n
}

// firstAnswers collects the answers of startChecks. Once a quorum answered
// (or so many failed that none can), the others get a short grace, so
// that a healthy node is not left unchecked for the first round, while a
// stalled one costs the first acquisition little. took is how long the
// nodes that answered took, the slowest of them: the grace and any
// second asking (askUnmarkedAgain) scale with it, not with the nodes that
// failed, which may have taken a whole node timeout. An answer with a
// marker goes to early as it comes, and is in got too.
func (c *Client) firstAnswers(answers chan answer, n int, early func(answer)) (got []answer, took time.Duration) {
	var grace <-chan time.Time
	start, ok := c.cfg.clock.Now(), 0
	for len(got) < n {
		select {
		case a := <-answers:
			if a.err == nil {
				ok++
				took = c.cfg.clock.Since(start)
			}
			if marked(a) {
				early(a)
			}
			got = append(got, a)
			decided := ok >= c.quorum || len(got)-ok > len(c.pools)-c.quorum
			if decided && grace == nil {
				t := c.cfg.clock.NewTimer(max(4*took, firstCheckGrace))
				defer t.Stop()
				grace = t.C()
			}
		case <-grace:
			return got, took
		}
	}
	return got, took
}

// askUnmarkedAgain checks again the nodes among got that answered without
// a marker, after a grace of four times took, the time they took to
// answer (firstAnswers).
func (c *Client) askUnmarkedAgain(ctx context.Context, got []answer, took time.Duration) {
	t := c.cfg.clock.NewTimer(max(4*took, firstCheckGrace))
	select {
	case <-t.C():
	case <-c.bg.closing():
		t.Stop()
	}
	for k, a := range got {
		if a.err == nil && a.f.marker == "" {
			got[k].f, got[k].err = c.checkNode(ctx, a.i, "", "", c.checkBound())
		}
	}
}

// freshBeingMarked reports whether the answers look like a new
// deployment that another Client is marking: some node has no marker, and
// every node has been up for less than the maximum TTL.
func (c *Client) freshBeingMarked(got []answer) bool {
	unmarked := false
	for _, a := range got {
		if a.err != nil {
			continue
		}
		if a.f.uptime >= c.maxTTL() {
			return false
		}
		unmarked = unmarked || a.f.marker == ""
	}
	return unmarked
}

// mark stores node i's run id and lineage as its marker, when the node
// still runs that process on that lineage, with born (the shards of a new
// deployment, wire.BornOf; "") when the mark is the node's first. A node
// that waits to be marked (a new deployment's) is counted once its marker
// is in place, or checked again if that failed.
func (c *Client) mark(i int, runID, lineage, born string) {
	v := c.rs.views[i].Load()
	f, err := c.checkNode(context.Background(), i, wire.MarkerOf(runID, lineage), born, c.checkBound())
	if v == nil || !v.marking {
		return // counted already
	}
	if err == nil && f.runID == runID && f.lineage == lineage && f.marker == runID {
		c.rs.views[i].CompareAndSwap(v, &nodeView{gen: f.gen, runID: runID, lineage: lineage, subs: f.subs})
	} else {
		c.rs.views[i].CompareAndSwap(v, nil) // checked again at its next reply
	}
	c.checkEnded()
}

// recheck checks node i in the background, unless a check is under way.
func (c *Client) recheck(i int) {
	if !c.rs.settled.Load() {
		// No check of all nodes has had a quorum answer yet (they were
		// down when the Client started): check them all again.
		if c.rs.allBusy.CompareAndSwap(false, true) {
			if !c.bg.goTracked(func() {
				c.checkAll(context.Background())
				c.rs.allBusy.Store(false) // before the poke: a waiter it wakes may ask again
				c.checkEnded()
				c.notify.poke()
			}) {
				c.rs.allBusy.Store(false)
			}
		}
		return
	}
	if !c.rs.checking[i].CompareAndSwap(false, true) {
		return
	}
	if !c.bg.goTracked(func() {
		f, err := c.checkNode(context.Background(), i, "", "", c.checkBound())
		if err == nil && c.adopt(i, f, false) {
			c.mark(i, f.runID, f.lineage, "")
		}
		// Done before the poke: a waiter it wakes that still needs a check
		// (a hand-off heard on a pub/sub connection opened after this check
		// began) starts one.
		c.rs.checking[i].Store(false)
		c.checkEnded()
		if err == nil {
			c.notify.poke() // a hand-off from the node may count now
		}
	}) {
		c.rs.checking[i].Store(false)
	}
}

// adopt turns node i's check into the Client's view of it; fresh says
// the deployment is new. It reports whether the node is to be marked.
func (c *Client) adopt(i int, f nodeFacts, fresh bool) (mark bool) {
	v := &nodeView{gen: f.gen, runID: f.runID, lineage: f.lineage, subs: f.subs}
	in := checked{f: f, fresh: fresh, durable: c.cfg.durable, shared: c.cfg.maxTTL, longest: c.maxTTL(), node: true}
	if old := c.rs.views[i].Load(); old != nil {
		in.prev.runID, in.prev.lineage, in.prev.from = old.runID, old.lineage, old.from
	}
	d := verdictOf(in)
	if d.wait > 0 {
		v.from, v.why = f.at.Add(d.wait), d.why
	}
	// On a new deployment a node is counted only once it is marked (mark,
	// then count), so that a Client that checks meanwhile does not take
	// the deployment for new when a lock may already be held on it. A
	// node marked for another reason (it waited out the maximum TTL, or
	// kept its data on durable nodes) counts at once.
	v.marking = d.mark && fresh
	c.rs.views[i].Store(v)
	if d.reset {
		c.nodeReset(i, errRunIDChanged)
	}
	if v.why != "" && c.observing() {
		c.emit(Event{Kind: EventNodeExcluded, Node: c.pools[i].Addr(), Duration: d.wait, Err: errors.New(v.why)})
	}
	return d.mark
}

// restartedSince checks the nodes of failed in round r (an extension of
// a lock) that failed without an answer, at once: those that now run
// another process than the one the Client counted, and did not keep
// their data, are marked NodeRefused with why. It reports whether any was.
func (c *Client) restartedSince(ctx context.Context, r *round) bool {
	if c.cfg.maxTTL == 0 {
		return false
	}
	var mu sync.Mutex
	var g errgroup.Group
	found := false
	for i, n := range r.nodes {
		if n.Status != NodeFailed || replied(n.Err) {
			continue
		}
		old := c.rs.views[i].Load()
		if old == nil {
			continue
		}
		g.Go(func() error {
			f, err := c.checkNode(ctx, i, "", "", c.cfg.nodeTimeout)
			if err != nil || f.runID == old.runID {
				return nil
			}
			kept := c.cfg.durable && f.marker != ""
			c.adopt(i, f, false)
			if kept {
				return nil
			}
			mu.Lock()
			r.nodes[i].Status = NodeRefused
			r.nodes[i].Err = fmt.Errorf("%w %v ago: the lock is gone from it", ErrNodeRestarted, f.uptime)
			found = true
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return found
}

// nodeReset counts that node i lost its data (its fence counters among
// them), and logs why (WithLogger).
func (c *Client) nodeReset(i int, why error) {
	c.epochMu.Lock()
	c.resets++
	c.epochMu.Unlock()
	c.warnNode(c.pools[i].Addr(), "node lost its data", why)
	if c.observing() {
		c.emit(Event{Kind: EventNodeReset, Node: c.pools[i].Addr(), Err: why})
	}
}

// Why nodeReset is called: the signs of a node that lost its data.
var (
	errEpochChanged = errors.New("its fence epoch changed: fences stay monotonic only while fewer than a quorum of nodes lose their last counter (docs/fencing.md)")
	errRunIDChanged = errors.New("it came back under a new run id, from a snapshot or an append-only file (docs/operations.md#restarts-and-upgrades)")
)
