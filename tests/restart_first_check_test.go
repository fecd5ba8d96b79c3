package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// A new Client checks its nodes before its first acquisition; a second
// call that comes while that check waits for stalled nodes waits for it
// no longer than its own context allows. The check was a sync.Once: the
// second call waited for the first's check whatever its deadline (found
// by the simulator, where the callers blocked on the Once's mutex stopped
// virtual time: internal/sim's regression seed 2).
func TestRestartSafety_aCallWaitsForTheFirstCheckNoLongerThanItsContext(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(redlock.WithRestartSafety(time.Minute), redlock.WithNodeTimeout(time.Second))
	for _, i := range []int{0, 1, 2} {
		require.NoError(t, e.nodes[i].Pause())
	}
	t.Cleanup(func() {
		for _, i := range []int{0, 1, 2} {
			_ = e.nodes[i].Resume()
		}
	})
	first := make(chan error, 1)
	go func() {
		l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Second)
		if err == nil {
			_ = l.Unlock(context.Background())
		}
		first <- err
	}()
	time.Sleep(50 * time.Millisecond) // the first call is checking the nodes

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryLock(ctx, newKey(t), time.Second)
	took := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Less(t, took, 700*time.Millisecond, "the second call waited for the first call's check past its own deadline")
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call did not return")
	}
}

// checkAfterGrant is a pool over several connections (pool.FromRedigo)
// whose restart check is held until a grant has been answered, or for at
// most hold: a first lock that waited for the check before it sent its
// grant waits out hold.
type checkAfterGrant struct {
	pool.Pool
	hold     time.Duration
	answered chan struct{} // closed once a grant was answered
	once     sync.Once
	byHold   atomic.Bool // a check went out because the hold ran out
}

func (p *checkAfterGrant) Generation() uint64 { return p.Pool.(pool.Reconnector).Generation() }

func (p *checkAfterGrant) Eval(ctx context.Context, s *pool.Script, args ...any) (any, error) {
	if s == wire.NodeCheck {
		t := time.NewTimer(p.hold)
		defer t.Stop()
		select {
		case <-p.answered:
		case <-t.C:
			p.byHold.Store(true)
		}
		return p.Pool.Eval(ctx, s, args...)
	}
	reply, err := p.Pool.Eval(ctx, s, args...)
	p.once.Do(func() { close(p.answered) })
	return reply, err
}

func (p *checkAfterGrant) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	reply, err := p.Pool.Do(ctx, cmd, args...)
	if cmd == "SET" {
		p.once.Do(func() { close(p.answered) })
	}
	return reply, err
}

// On a pool that may send each command on a connection of its own, the
// first lock's grant goes out beside the restart check, not after it: it
// carries the identity of the dataset that made it, and counts once the
// check, on whatever connection, names the same. The first lock waited
// for the check before (a round trip of its own); with the check held
// until a grant is answered, it waited out the hold.
func TestRestartSafety_theFirstLockOnAPoolOfManyConnectionsMakesNoRoundTripOfItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	pools := make([]pool.Pool, len(e.addrs))
	held := make([]*checkAfterGrant, len(e.addrs))
	for i, addr := range e.addrs {
		rp := &redis.Pool{MaxIdle: 8, Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
		t.Cleanup(func() { _ = rp.Close() })
		held[i] = &checkAfterGrant{Pool: pool.FromRedigo(rp, addr), hold: 5 * time.Second, answered: make(chan struct{})}
		pools[i] = held[i]
	}
	c := newClient(t, pools, redlock.WithRestartSafety(time.Minute), redlock.WithNodeTimeout(10*time.Second))
	l, err := c.TryLock(ctxT(t, 20*time.Second), newKey(t), 10*time.Second)
	require.NoError(t, err)
	for i, p := range held {
		require.False(t, p.byHold.Load(), "node %d: the check waited for a grant, which waited for the check", i)
	}
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
}
