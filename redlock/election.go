package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
		e.err, e.key = errEmptyName, ""
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
// the lock is still valid, with more than WithMinValidity left when
// opts give it; when the record cannot be written, or the lock ran out
// (or down to that minimum) meanwhile, it resigns and campaigns again. It fails when ctx
// ends (the error matches ErrNotAcquired and ctx.Err()) or the Client
// closes (ErrClosed). Bad arguments (a nil ctx, an empty election
// name, an empty value or one over MaxLeaderValue, a bad ttl or option)
// fail before any node is asked.
func (e *Election) Campaign(ctx context.Context, value string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	if err := e.checkCampaign(ctx, value, ttl); err != nil {
		return nil, err
	}
	cfg, err := e.c.lockConfig(e.key, ttl, campaignOptions(opts))
	if err != nil {
		return nil, err
	}
	for failures := 1; ; failures++ {
		ld := &leadership{e: e}
		l, err := e.c.lockAs(ctx, ld, e.key, ttl, cfg)
		if err != nil {
			return nil, err
		}
		if err = e.record(ctx, l, ld, value, cfg.minValidity); err == nil {
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
// election key still holds l's token, and checks that l is still live
// with more than minValidity left (WithMinValidity, which the
// acquisition checked before this round); then ld, l's kind, keeps it
// for the extensions. The error says why not: a *QuorumError matching
// ErrNotAcquired, or the lock's end.
func (e *Election) record(ctx context.Context, l *Lock, ld *leadership, value string, minValidity time.Duration) error {
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
	e.c.unannounced(e.name, KindElection, r)
	if !l.live() {
		// The lock ran out (or was lost) while the record was written:
		// another may lead by now (etcd's trap).
		return fmt.Errorf("redlock: election %q: the lock ended before the leader record was written: %w", e.name, ErrNotAcquired)
	}
	if left := l.Validity(); left <= minValidity {
		return fmt.Errorf("redlock: election %q: the lock had %v of validity left once the leader record was written, not more than the minimum validity %v: %w",
			e.name, left, minValidity, ErrNotAcquired)
	}
	// From now on each extension writes the record back on the nodes
	// that hold the key for l but lack the record (one that did not
	// answer now, or lost it since).
	ld.rec.Store(&leaderRecord{name: e.name, value: value, term: l.fence, cid: e.c.id})
	return nil
}

// leadership is the kind of an election's lock: a mutex on the election
// key, whose extensions, once Campaign has written the leader record,
// also write the record back where it is missing.
type leadership struct {
	e   *Election
	rec atomic.Pointer[leaderRecord] // nil until Campaign wrote it
}

func (ld *leadership) is() LockKind       { return KindElection }
func (ld *leadership) name(string) string { return ld.e.name }
func (ld *leadership) keys() []string     { return nil }
func (ld *leadership) fenceAt(reply any, n, k int) (wire.Fence, error) {
	return mutex{}.fenceAt(reply, n, k)
}
func (ld *leadership) undo(c *Client, key, token string, plain []any, keep int) (*pool.Script, []any) {
	return mutex{}.undo(c, key, token, plain, keep)
}
func (ld *leadership) release(l *Lock) (*pool.Script, []any) { return mutex{}.release(l) }

func (ld *leadership) extend(l *Lock, ms int64) (*pool.Script, []any) {
	if rec := ld.rec.Load(); rec != nil {
		return wire.LeaderExtend, rec.extendArgs(l.token, ms)
	}
	return mutex{}.extend(l, ms)
}

func (ld *leadership) handle(_ *Lock, h *Handle) {
	h.Name = ld.e.name
	if r := ld.rec.Load(); r != nil {
		h.Value = r.value
	}
}

// restoreLeadership restores a Handle of a leadership: the election's
// name, and, to write the record back as the leader's extensions do, the
// leader's value and term (its fence).
func restoreLeadership(c *Client, h *Handle) (kind, string, error) {
	e := c.Election(h.Name)
	if e.err != nil {
		return nil, "", e.err
	}
	ld := &leadership{e: e}
	if h.Value != "" {
		if len(h.Fences) != 1 || h.Fences[0] == 0 {
			return nil, "", fmt.Errorf("redlock: handle of the leadership of election %q: a leader's value needs its term (Fences)", h.Name)
		}
		ld.rec.Store(&leaderRecord{name: e.name, value: h.Value, term: h.Fences[0], cid: tokenClient(h.Token)})
	}
	return ld, e.key, nil
}

// leaderRecord is what a leader's extensions write back where its
// record is missing (leader_extend.lua).
type leaderRecord struct {
	name, value, cid string
	term             uint64
}

// extendArgs are the leader extension's arguments for the lock token,
// extended for ms.
func (r *leaderRecord) extendArgs(token string, ms int64) []any {
	return wire.LeaderExtendArgs(r.name, token, ms, r.value, r.term, r.cid)
}

// pause waits the back-off after the failures-th campaign in a row that
// won the lock but could not lead. It returns ctx's error when ctx ended,
// ErrClosed when the Client closed.
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
		return ErrClosed
	}
}

// Leader asks every node at once for the election key's holder and its
// leader record, and returns the leader a quorum of nodes agrees on: the
// same holder, with the record that holder wrote. When a quorum holds
// the key for one holder but some of them lack its record (it reached
// only some nodes, or a node lost it), while another of them has it,
// Leader writes that record there, only where the key still holds that
// holder's token, and names the leader once a quorum has it. Each node's
// answer is bounded by ctx and by the node timeout, at least 1s. When no
// quorum agrees (no one leads, a campaign is writing its record, a
// leader is resigning, too few nodes answered) it returns an error
// matching ErrNoLeader, never a guess. The answer is a snapshot: the
// leader may change at once, so act on leadership only through the lock
// Campaign returned, and pass its term to the resources it writes
// (fencing). On a closed Client it returns ErrClosed; bad arguments
// (a nil ctx, an empty name) fail before any node is asked.
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
	if l, ok := e.agreed(recs, errs); ok {
		return l, nil
	}
	if l, ok, err := e.repair(ctx, recs, errs); ok || err != nil {
		return l, err
	}
	err = fmt.Errorf("%w: election %q: fewer than %d of the %d nodes name the same leader", ErrNoLeader, e.name, e.c.quorum, n)
	if nodeErrs := errors.Join(errs...); nodeErrs != nil {
		err = errors.Join(err, nodeErrs)
	}
	return Leader{}, err
}

// agreed returns the leader a quorum of the nodes' records names.
func (e *Election) agreed(recs []wire.LeaderRecord, errs []error) (Leader, bool) {
	count := make(map[wire.LeaderRecord]int, len(recs))
	for i, r := range recs {
		if errs[i] != nil || !r.Current() {
			continue
		}
		if count[r]++; count[r] >= e.c.quorum {
			return leaderOf(r), true
		}
	}
	return Leader{}, false
}

// repair writes the record of the key's holder on the nodes that hold
// the key for it but lack its record, when a quorum of the nodes hold the
// key for it and one of them has its record; it returns that leader when
// a quorum has the record now. The write is leader_write.lua's: only
// where the key still holds the holder's token. A node whose write failed
// gets that error in errs. It returns ErrClosed on a closed Client.
func (e *Election) repair(ctx context.Context, recs []wire.LeaderRecord, errs []error) (Leader, bool, error) {
	held := make(map[string]int, len(recs))
	for i, r := range recs {
		if errs[i] == nil && r.Token != "" {
			held[r.Token]++
		}
	}
	var rec wire.LeaderRecord // a record of a holder of a quorum
	have := 0                 // the nodes that have it
	for i, r := range recs {
		if errs[i] == nil && r.Current() && held[r.Token] >= e.c.quorum && (have == 0 || r == rec) {
			rec = r
			have++
		}
	}
	var lack []int // the nodes that hold the key for rec's token without its record
	for i, r := range recs {
		if have > 0 && errs[i] == nil && r.Token == rec.Token && !r.Current() {
			lack = append(lack, i)
		}
	}
	if have == 0 || have+len(lack) < e.c.quorum {
		return Leader{}, false, nil
	}
	wrote := make([]bool, len(recs))
	args := wire.LeaderWriteArgs(e.name, rec.Token, rec.Value, rec.Term, rec.Client)
	err := e.c.askSome(ctx, lack, wire.LeaderWrite, args, func(i int, reply any, err error) {
		if err == nil {
			var d wire.Done
			if d, err = wire.ParseDone(reply); err != nil {
				err = &pool.NodeError{Addr: e.c.pools[i].Addr(), Op: "EVALSHA", Err: err}
			}
			wrote[i] = d.OK // written, announced or not
		}
		errs[i] = explainDenied(err)
	})
	if err != nil {
		return Leader{}, false, err
	}
	for _, i := range lack {
		if wrote[i] {
			have++
		}
	}
	if have < e.c.quorum {
		return Leader{}, false, nil
	}
	return leaderOf(rec), true, nil
}

// askSome is askEvery on the nodes numbered in which only.
func (c *Client) askSome(ctx context.Context, which []int, script *pool.Script, args []any, read func(i int, reply any, err error)) error {
	ran := c.bg.do(func() {
		var wg sync.WaitGroup
		for _, i := range which {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nctx, cancel := context.WithTimeout(ctx, c.operatorTimeout())
				defer cancel()
				reply, err := c.pools[i].Eval(nctx, script, args...)
				read(i, reply, err)
			}()
		}
		wg.Wait()
	})
	if !ran {
		return ErrClosed
	}
	return nil
}

// leaderOf is the leader a node's record names.
func leaderOf(r wire.LeaderRecord) Leader {
	return Leader{Value: r.Value, Term: r.Term, ClientID: r.Client}
}
