package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// maxMultiKeys bounds the keys of one multi-key lock.
const maxMultiKeys = 64

// multiKeys returns keys sorted, without repeats, or why they cannot be
// locked together.
func multiKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, errors.New("redlock: no keys")
	}
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	switch {
	case ks[0] == "":
		return nil, errEmptyName
	case len(ks) > maxMultiKeys:
		return nil, fmt.Errorf("redlock: %d keys: a multi-key lock takes at most %d", len(ks), maxMultiKeys)
	}
	return ks, nil
}

// TryLockMulti makes one attempt to take every key of keys for ttl, or
// none: on each node one script takes them all if none is held, and
// changes nothing otherwise. The quorum, validity, WithMinValidity, the
// release of a failed attempt and WithFencing (a fence per key,
// Lock.Fences) follow TryLock's rules. Keys are sorted and repeats
// dropped; one distinct key is TryLock. It fails before asking any node
// for no keys, an empty key, or more than 64. On a node that is a Redis
// Cluster the keys must share a hash slot (a common hash tag): otherwise
// the node refuses (CROSSSLOT) and the error says so. See
// docs/waiting.md, "Locks over several keys".
func (c *Client) TryLockMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.multi(ctx, keys, ttl, opts, c.TryLock, func(m *multi, cfg lockConfig) (*Lock, time.Time, error) {
		l, err := c.tryMulti(ctx, m, ttl, cfg)
		return l, time.Time{}, err
	})
}

// multi is TryLockMulti and LockMulti: it checks the call, hands one
// distinct key to single (TryLock or Lock), and otherwise takes the keys
// with take, which reports when its first round was refused (zero when
// it was not), and tells the observers.
func (c *Client) multi(ctx context.Context, keys []string, ttl time.Duration, opts []LockOption,
	single func(context.Context, string, time.Duration, ...LockOption) (*Lock, error),
	take func(m *multi, cfg lockConfig) (*Lock, time.Time, error)) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	ks, err := multiKeys(keys)
	if err != nil {
		return nil, err
	}
	if len(ks) == 1 {
		return single(ctx, ks[0], ttl, opts...)
	}
	cfg, err := c.lockConfig(ks[0], ttl, opts)
	if err != nil {
		return nil, err
	}
	since := c.cfg.clock.Now()
	m := &multi{ks: ks, joint: strings.Join(ks, ",")}
	l, refused, err := take(m, cfg)
	c.acquiredAs(KindMulti, m.joint, since, refused, err)
	return l, err
}

// LockMulti is TryLockMulti that waits until it holds every key or ctx
// ends (the error then matches ErrNotAcquired and ctx.Err()), or the
// Client is closed (ErrClosed). Between attempts it sleeps until a
// release of one of the keys is announced, the refusing nodes' keys run
// out, or the back-off (WithRetry) passes. A multi-key call does not
// queue: single-key waiters of the same keys are served in their order,
// and a multi-key waiter takes the keys when it finds them all free. See
// docs/waiting.md, "Locks over several keys".
func (c *Client) LockMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.multi(ctx, keys, ttl, opts, c.Lock, func(m *multi, cfg lockConfig) (*Lock, time.Time, error) {
		return c.waitMulti(ctx, m, ttl, cfg)
	})
}

// DoMulti is Do over several keys: it waits for all of them as LockMulti
// does, runs fn with the lock's context, extends the lock while fn runs,
// and releases every key when fn returns. See Do.
func (c *Client) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	return c.do(ctx, fn, opts, func(ctx context.Context, opts []LockOption) (*Lock, error) {
		return c.LockMulti(ctx, keys, ttl, opts...)
	})
}

// Keys returns the lock's keys, sorted: one for a lock taken by TryLock,
// Lock, Do or Restore (its Key), and for a semaphore's permit or a
// read-write lock's hold.
func (l *Lock) Keys() []string {
	if ks := l.kind.keys(); ks != nil {
		return slices.Clone(ks)
	}
	return []string{l.key}
}

// Fences returns the fencing token of each key, in the order of Keys;
// nil unless the lock was taken WithFencing.
func (l *Lock) Fences() []uint64 {
	if l.fences == nil && l.fence != 0 {
		return []uint64{l.fence}
	}
	return slices.Clone(l.fences)
}

// multi is the kind of a lock on several keys at once: one script per
// node takes them all or none, extends and releases them all.
type multi struct {
	ks    []string // sorted, distinct
	joint string   // the keys joined by commas: what observers call the lock
}

func (m *multi) is() LockKind                                    { return KindMulti }
func (m *multi) name(string) string                              { return m.joint }
func (m *multi) keys() []string                                  { return m.ks }
func (m *multi) handle(*Lock, *Handle)                           {}
func (m *multi) fenceAt(reply any, n, k int) (wire.Fence, error) { return wire.FenceAt(reply, n, k) }
func (m *multi) undo(_ *Client, _, token string, _ []any, _ int) (*pool.Script, []any) {
	return wire.MultiRelease, wire.MultiReleaseArgs(m.ks, token)
}
func (m *multi) extend(l *Lock, ms int64) (*pool.Script, []any) {
	return wire.MultiExtend, wire.MultiExtendArgs(m.ks, l.token, ms)
}
func (m *multi) release(l *Lock) (*pool.Script, []any) {
	return wire.MultiRelease, wire.MultiReleaseArgs(m.ks, l.token)
}

// restoreMulti restores a Handle of a multi-key lock: its keys, sorted
// and distinct as the lock has them.
func restoreMulti(_ *Client, h *Handle) (kind, string, error) {
	ks, err := multiKeys(h.Keys)
	if err == nil && (!slices.Equal(ks, h.Keys) || len(ks) < 2) {
		err = errors.New("redlock: handle of a multi-key lock: its keys are two or more, sorted and distinct (Lock.Keys)")
	}
	if err != nil {
		return nil, "", err
	}
	return &multi{ks: ks, joint: strings.Join(ks, ",")}, ks[0], nil
}

// multiGrab describes a multi-key acquisition round of ks: one script
// per node takes every key or none.
func (c *Client) multiGrab(m *multi, ttl time.Duration, cfg lockConfig) (grab, error) {
	ks := m.ks
	g := grab{name: m.joint, key: ks[0], ttl: ttl, cfg: cfg, kind: m}
	var err error
	if g.token, err = newTokenWith(c.tokenPrefix); err != nil {
		return g, err
	}
	epoch := ""
	if cfg.fencing {
		if epoch, err = newToken(); err != nil {
			return g, err
		}
	}
	g.req = request{script: wire.MultiAcquire, args: wire.MultiAcquireArgs(ks, g.token, ttl.Milliseconds(), epoch),
		status: grantStatus, keep: true, gate: true}
	return g, nil
}

// tryMulti is one multi-key acquisition round (and, fenced, the
// write-back of each key's fence). Refused, it returns once its undoing
// is done (grab.final), for TryLockMulti and LockMulti alike: a waiting
// multi-key call does not queue, and what its last round left is all it
// leaves.
func (c *Client) tryMulti(ctx context.Context, m *multi, ttl time.Duration, cfg lockConfig) (*Lock, error) {
	g, err := c.multiGrab(m, ttl, cfg)
	if err != nil {
		return nil, err
	}
	g.final = true
	l, _, err := c.take(ctx, &g)
	return l, err
}

// waitMulti takes ks, waiting as LockMulti says; refused is when its
// first round was refused (zero when it was not).
func (c *Client) waitMulti(ctx context.Context, m *multi, ttl time.Duration, cfg lockConfig) (*Lock, time.Time, error) {
	return c.waitUnqueued(ctx, m.ks, wakeOn{}, cfg, func() (*Lock, error) { return c.tryMulti(ctx, m, ttl, cfg) })
}
