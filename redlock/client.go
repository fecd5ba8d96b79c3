package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"

	"github.com/quorumlock/redlock/pool"
)

// Client takes locks of every kind on a set of independent Redis nodes
// (New): mutexes (TryLock, Lock, Do), locks over several keys
// (TryLockMulti, LockMulti, DoMulti), semaphores (Semaphore), read-write
// locks (RWLock) and leader elections (Election). It holds no lock state
// of its own: each lock is a *Lock handle, which another Client can take
// over (Lock.Handle, RestoreHandle). A Client is safe for concurrent use;
// Close it when done: its background work (late replies, releases owed
// to slow nodes, automatic extensions) stops, and every later call fails
// with ErrClosed. See docs/algorithm.md and docs/kinds.md.
type Client struct {
	pools      []pool.Pool
	quorum     int
	cfg        clientConfig
	starters   []starter   // starters[i]: pools[i]'s, nil when it has none (startersOf)
	txStarters []txStarter // txStarters[i]: the same starter when it sends transactions
	allStart   bool        // every pool has a starter: rounds need no goroutines
	connectors []connector // connectors[i]: pools[i]'s starter when it tells a dial under way (round.graceLeft), else nil
	allTx      bool        // every pool has a txStarter
	// noTx is set once a node refused a transaction's MULTI or EXEC (ACL):
	// waiting calls' first rounds run the script from then on.
	noTx atomic.Bool

	fenceState          // epochs seen by fenced acquisitions (fence.go)
	rs         restarts // restart safety (restart.go)
	warn       warner   // WithLogger's rate limit (log.go)
	notify     notifier // release announcements for waiting Lock calls (notify.go)
	id         string   // random: names the Client's hand-off channels (handoffChannel)
	// tokenPrefix starts the tokens of the Client's rounds: "<id>:", so
	// that Inspect can tell whose a lock is (tokenClient).
	tokenPrefix string
	queue       wire.Queue // the queue scripts' fixed arguments, boxed once

	bg     background // the work Close waits for (background.go)
	timers sync.Pool  // spare clock.Timers for rounds (Client.timer)

	// onExtend, when set (by tests, before any lock is taken), is called
	// after each automatic extension attempt with its error.
	onExtend func(error)
}

// New returns a Client over pools, one per independent Redis node; the
// quorum is len(pools)/2+1. It returns an error when there is no pool, a
// pool is nil, two pools have the same address, or an option is out of
// range. The pools stay the caller's: Close does not close them.
func New(pools []pool.Pool, opts ...Option) (*Client, error) {
	if len(pools) == 0 {
		return nil, errors.New("redlock: no pools: a lock needs at least one Redis node")
	}
	if err := checkPools(pools); err != nil {
		return nil, err
	}
	cfg := clientConfig{
		driftFactor: defaultDriftFactor,
		nodeTimeout: defaultNodeTimeout,
		retry:       backoff{min: defaultRetryMin, max: defaultRetryMax},
		clock:       clock.Real(),
		window:      windowAuto,
		maxTTL:      defaultMaxTTL,
	}
	for _, o := range opts {
		o.applyClient(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.window == windowAuto {
		cfg.window = min(cfg.nodeTimeout, maxAutoWindow)
	}
	c := &Client{
		pools:    append([]pool.Pool(nil), pools...),
		quorum:   len(pools)/2 + 1,
		cfg:      cfg,
		bg:       newBackground(),
		allStart: true,
		allTx:    true,
	}
	c.notify.c = c
	c.initRestarts()
	c.id = strconv.FormatUint(rand.Uint64(), 36)
	c.tokenPrefix = c.id + ":"
	c.queue = wire.NewQueue(c.windowMs(), c.entrySlack().Milliseconds(), c.refresh().Milliseconds())
	c.starters, c.txStarters = startersOf(c.pools)
	c.rs.oneConn = make([]bool, len(c.pools))
	for i := range c.pools {
		c.rs.oneConn[i] = oneConn(c.starters[i])
		c.connectors = append(c.connectors, connectorOf(c.starters[i]))
		c.allStart = c.allStart && c.starters[i] != nil
		c.allTx = c.allTx && c.txStarters[i] != nil
	}
	return c, nil
}

// checkPools fails on a nil pool and on two pools of one node.
func checkPools(pools []pool.Pool) error {
	seen := make(map[string]int, len(pools))
	for i, p := range pools {
		if isNil(p) {
			return fmt.Errorf("redlock: pool %d is nil", i)
		}
		if j, dup := seen[p.Addr()]; dup {
			return fmt.Errorf("redlock: pools %d and %d are the same node %s", j, i, p.Addr())
		}
		seen[p.Addr()] = i
	}
	return nil
}

// Close stops the Client: it waits for the commands still running in the
// background (replies that came after a round was decided, releases of
// failed acquisitions, automatic extensions) and makes later
// calls fail with ErrClosed. Locks still held are not released; they
// expire with their TTL. Automatic extension stops, so their contexts end
// with ErrExpired when their validity runs out. Close does not close the
// pools. The wait is bounded by the node timeout on plain pools, and by
// the pool's I/O timeout (1s by default) on pipelined pools, whose
// commands carry no deadline of their own; a release that waited for its
// acquisition's SET can take twice that.
func (c *Client) Close() error {
	c.bg.close()
	c.notify.close()
	c.bg.wait()
	return nil
}

// isNil reports a nil pool, also a typed nil pointer in the interface
// (the result of a failed pool.New appended without a check).
func isNil(p pool.Pool) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// validUntil is when a lock whose round began at start stops being valid:
// its TTL in whole milliseconds (as the nodes set it) less the drift
// allowance.
func (c *Client) validUntil(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl.Truncate(time.Millisecond) - c.drift(ttl))
}

// drift is the allowance for clock drift set aside from a TTL.
func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.cfg.driftFactor) + driftFloor
}

func (c *Client) checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("redlock: ttl %v is under the 1ms Redis resolution", ttl)
	}
	if d := c.drift(ttl); ttl <= d {
		return fmt.Errorf("redlock: ttl %v leaves no validity after the clock-drift allowance %v", ttl, d)
	}
	return nil
}

func (c *Client) lockConfig(key string, ttl time.Duration, opts []LockOption) (lockConfig, error) {
	cfg := lockConfig{retry: c.cfg.retry}
	if key == "" {
		return cfg, errEmptyName
	}
	if err := c.checkTTL(ttl); err != nil {
		return cfg, err
	}
	if len(opts) > 0 {
		cfg = cfg.with(opts)
	}
	if cfg.minValidity < 0 {
		return cfg, fmt.Errorf("redlock: minimum validity %v must not be negative", cfg.minValidity)
	}
	if cfg.minValidity >= ttl {
		return cfg, fmt.Errorf("redlock: minimum validity %v is not below the ttl %v", cfg.minValidity, ttl)
	}
	if err := cfg.retry.validate(); err != nil {
		return cfg, err
	}
	if err := cfg.validateSection(ttl, c.drift(ttl)); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// newLock returns the handle of the lock g's round r (or the hand-offs
// that followed it) acquired, valid until until.
func (c *Client) newLock(ctx context.Context, g *grab, r *round, until time.Time) *Lock {
	l := &Lock{c: c, key: g.key, kind: g.kind, token: g.token, until: until, since: r.start,
		acquired: r.start, parent: ctx, ttl: g.ttl, margin: g.cfg.margin, plainArgs: r.keyToken()}
	l.after.add(r)
	if g.adopt != nil {
		g.adopt(l, r)
	}
	// The lock's context and automatic extension (context.go,
	// autoextend.go) cost nothing unless asked for.
	if g.cfg.maxHold > 0 {
		l.holdEnd = r.start.Add(g.cfg.maxHold)
	}
	if g.cfg.autoExtend {
		l.startExtender(g.cfg)
	}
	return l
}

// tellAfter sends script with args to every node as background work,
// owed until each node answers (for as long as a queue place lives): a
// follow-up nobody waits for, such as a waiting call leaving its queues.
// On a node where one of the rounds after (nil for none) has not settled,
// it goes once they have (debt.oweAfter). After Close it sends nothing.
// With wait (a call that ends without the lock), it returns once every
// node has answered, or a node timeout has passed since the message went
// to it (done when returned).
func (c *Client) tellAfter(ctx context.Context, script *pool.Script, args []any, after *pending, wait bool) {
	t, ok := c.bg.claim()
	if !ok {
		return
	}
	defer t.done()
	d := &debt{c: c, ctx: context.WithoutCancel(ctx), script: script, args: args,
		until: c.cfg.clock.Now().Add(c.refresh() + c.entrySlack())}
	if wait {
		d.waited()
	}
	if bound := d.oweAfter(after); wait {
		d.awaitFirst(context.Background(), bound) // the call's ctx has likely ended: that is why it leaves
	}
}
