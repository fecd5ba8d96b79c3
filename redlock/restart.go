package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

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
