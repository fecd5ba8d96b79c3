package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// MaxLeaderValue is the longest value, in bytes, a leader may announce
// (Campaign, Run): every node keeps it in the leader record.
const MaxLeaderValue = 64 << 10

// ErrNoLeader matches Election.Leader's error when no quorum of nodes
// names one leader: there is none, an election is under way, or too few
// nodes answered to tell. The error also carries the nodes' own errors.
var ErrNoLeader = errors.New("redlock: no leader")

// observeEvery is how often an observer asks the nodes for the leader
// without an announcement: a lost announcement costs at most that long.
const observeEvery = time.Second

// Election is a leader election on a name (Client.Election). Its leader
// holds a fenced mutex on the election's key that extends itself, and
// leads while it holds it; the lock's fence is the leader's term, so every
// leader's term is strictly greater than every earlier leader's. The
// leader writes a record (its value, term and Client ID) to a quorum of
// nodes, which Leader and Observe read. It is safe for concurrent use.
// See docs/kinds.md ("Leader election").
type Election struct {
	c    *Client
	name string
	key  string // the election key: wire.ElectionKey(name)
	err  error  // why every call fails: an empty name
}

// Leader is an election's leader, as a quorum of nodes names it.
type Leader struct {
	Value    string // what the leader gave Campaign or Run
	Term     uint64 // its term: its lock's fence, above every earlier leader's
	ClientID string // the ID of the leader's Client (Client.ID)
}

// Election returns the election name. Nothing is sent until a call; an
// empty name makes every call fail. Every process that takes part uses
// the same name. The election keeps its keys in name's hash slot: the
// election key (a fenced mutex) and the leader record (docs/operations.md).
func (c *Client) Election(name string) *Election {
	e := &Election{c: c, name: name, key: wire.ElectionKey(name)}
	if name == "" {
		e.err, e.key = errors.New("redlock: empty election name"), ""
	}
	return e
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// check checks a call's context and the election.
func (e *Election) check(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	return e.err
}

// checkCampaign checks a campaign's arguments.
func (e *Election) checkCampaign(ctx context.Context, value string, ttl time.Duration) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	switch {
	case value == "":
		return fmt.Errorf("redlock: election %q: empty leader value", e.name)
	case len(value) > MaxLeaderValue:
		return fmt.Errorf("redlock: election %q: leader value of %d bytes is over the %d allowed", e.name, len(value), MaxLeaderValue)
	}
	return e.c.checkTTL(ttl)
}

// Campaign returns once this caller leads the election, with the lock it
// leads by: a fenced lock on the election key taken as Lock takes one,
// which extends itself as Client.Do's does (every ttl/3 unless
// WithAutoExtend in opts says otherwise). Its Fence is the term; its
// Context ends as soon as the leadership may be lost (ErrLockLost,
// ErrExpired); Unlock resigns. After winning the lock, Campaign writes the
// leader record (value, term, the Client's ID) on a quorum of nodes, only
// where the election key still holds the lock, and returns only while
// the lock is still valid; when the record cannot be written or the lock
// ran out meanwhile, it resigns and campaigns again. It fails when ctx
// ends (the error matches ErrNotAcquired and ctx.Err()) or the Client
// closes (pool.ErrClosed). Bad arguments (a nil ctx, an empty election
// name, an empty value or one over MaxLeaderValue, a bad ttl or option)
// fail before any node is asked.
func (e *Election) Campaign(ctx context.Context, value string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if err := e.checkCampaign(ctx, value, ttl); err != nil {
		return nil, err
	}
	opts = campaignOptions(opts)
	if _, err := e.c.lockConfig(e.key, ttl, opts); err != nil {
		return nil, err
	}
	for failures := 1; ; failures++ {
		l, err := e.c.Lock(ctx, e.key, ttl, opts...)
		if err != nil {
			return nil, err
		}
		if err = e.record(ctx, l, value); err == nil {
			return l, nil
		}
		_ = l.Unlock(context.WithoutCancel(ctx))
		if end := e.pause(ctx, failures); end != nil {
			if !errors.Is(err, end) {
				err = errors.Join(err, end)
			}
			return nil, err
		}
	}
}

// campaignOptions are a campaign's lock options: automatic extension
// first (so that a WithAutoExtend in opts only sets the interval), then
// opts, then fencing, which a campaign always has.
func campaignOptions(opts []LockOption) []LockOption {
	all := make([]LockOption, 0, len(opts)+2)
	all = append(all, lockOption(func(c *lockConfig) { c.autoExtend = true }))
	all = append(all, opts...)
	return append(all, WithFencing())
}

// record writes l's leader record on a quorum of nodes, where the
// election key still holds l's token, and checks that l is still live.
// The error says why not: a *QuorumError matching ErrNotAcquired, or the
// lock's end.
func (e *Election) record(ctx context.Context, l *Lock, value string) error {
	req := request{script: wire.LeaderWrite, args: wire.LeaderWriteArgs(e.name, l.token, value, l.fence, e.c.id),
		status: doneStatus, after: l.after, gate: true}
	r, err := e.c.run(ctx, req)
	if err != nil {
		return err
	}
	if !r.ok {
		qe := e.c.quorumError(OpAcquire, e.key, r, ErrNotAcquired, 0)
		return fmt.Errorf("redlock: election %q: the leader record was not written on a quorum: %w", e.name, qe)
	}
	e.c.unannounced(e.key, KindElection, r)
	if !l.live() {
		// The lock ran out (or was lost) while the record was written:
		// another may lead by now (etcd's trap).
		return fmt.Errorf("redlock: election %q: the lock ended before the leader record was written: %w", e.name, ErrNotAcquired)
	}
	return nil
}

// pause waits the back-off after the failures-th campaign in a row that
// won the lock but could not lead. It returns ctx's error when ctx ended,
// pool.ErrClosed when the Client closed.
func (e *Election) pause(ctx context.Context, failures int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := e.c.cfg.clock.NewTimer(e.c.cfg.retry.delay(failures))
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.c.bg.closing():
		return pool.ErrClosed
	}
}

// Leader asks every node at once for the election key's holder and its
// leader record, and returns the leader a quorum of nodes agrees on: the
// same holder, with the record that holder wrote. Each node's answer is
// bounded by ctx and by the node timeout, at least 1s. When no quorum
// agrees (no one leads, a campaign is writing its record, a leader is
// resigning, too few nodes answered) it returns an error matching
// ErrNoLeader, never a guess. The answer is a snapshot: the leader may
// change at once, so act on leadership only through the lock Campaign
// returned, and pass its term to the resources it writes (fencing). On a
// closed Client it returns pool.ErrClosed; bad arguments (a nil ctx, an
// empty name) fail before any node is asked.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx); err != nil {
		return Leader{}, err
	}
	n := len(e.c.pools)
	recs, errs := make([]wire.LeaderRecord, n), make([]error, n)
	err := e.c.askEvery(ctx, wire.LeaderRead, wire.LeaderReadArgs(e.name), func(i int, reply any, err error) {
		if err == nil {
			if recs[i], err = wire.ParseLeaderRead(reply); err != nil {
				err = &pool.NodeError{Addr: e.c.pools[i].Addr(), Op: "EVALSHA", Err: err}
			}
		}
		errs[i] = explainDenied(err)
	})
	if err != nil {
		return Leader{}, err
	}
	return e.agreed(recs, errs)
}

// agreed returns the leader a quorum of the nodes' records names, or an
// error matching ErrNoLeader with the nodes' errors.
func (e *Election) agreed(recs []wire.LeaderRecord, errs []error) (Leader, error) {
	count := make(map[wire.LeaderRecord]int, len(recs))
	for i, r := range recs {
		if errs[i] != nil || !r.Current() {
			continue
		}
		if count[r]++; count[r] >= e.c.quorum {
			return Leader{Value: r.Value, Term: r.Term, ClientID: r.Client}, nil
		}
	}
	err := fmt.Errorf("%w: election %q: fewer than %d of the %d nodes name the same leader", ErrNoLeader, e.name, e.c.quorum, len(recs))
	if nodeErrs := errors.Join(errs...); nodeErrs != nil {
		err = errors.Join(err, nodeErrs)
	}
	return Leader{}, err
}
