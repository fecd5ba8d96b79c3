package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// acquireRounds counts the acquisition rounds a Client decides.
type acquireRounds struct{ n atomic.Int64 }

func (a *acquireRounds) Round(info *redlock.RoundInfo) {
	if info.Op == redlock.OpAcquire {
		a.n.Add(1)
	}
}
func (a *acquireRounds) Event(redlock.Event) {}

// A node that announces a release of a held key every millisecond (broken,
// or hostile) does not make the waiting calls ask again at that pace:
// announcements that lead to no grant wake a call less and less often,
// and a node that did not refuse the call's round wakes it not at all.
// Each waiting kind is asked for a second: a mutex's Lock, a multi-key
// LockMulti, a semaphore's Acquire and a read-write lock's writer.
func TestWaiters_aNodeThatAnnouncesReleasesItNeverMadeDoesNotMakeThemPoll(t *testing.T) {
	e := newEnv(t, 5)
	holder := e.client()
	ctx := ctxT(t, 30*time.Second)
	for name, tc := range map[string]struct {
		hold    func(key string) error
		wait    func(c *redlock.Client, key string, ctx context.Context) error
		channel func(key string) string
	}{
		"mutex": {
			hold: func(key string) error { _, err := holder.TryLock(ctx, key, longTTL); return err },
			wait: func(c *redlock.Client, key string, ctx context.Context) error {
				_, err := c.Lock(ctx, key, longTTL)
				return err
			},
			channel: wire.ReleaseChannel,
		},
		"mutex, decided by the announcing node": {
			// Nodes 3 and 4 are paused: every round is decided by the
			// refusals of nodes 0 to 2, node 0's among them.
			hold: func(key string) error {
				if _, err := holder.TryLock(ctx, key, longTTL); err != nil {
					return err
				}
				for _, i := range []int{3, 4} {
					if err := e.nodes[i].Pause(); err != nil {
						return err
					}
					t.Cleanup(func() { _ = e.nodes[i].Resume() })
				}
				return nil
			},
			wait: func(c *redlock.Client, key string, ctx context.Context) error {
				_, err := c.Lock(ctx, key, longTTL)
				return err
			},
			channel: wire.ReleaseChannel,
		},
		"multi": {
			hold: func(key string) error { _, err := holder.TryLock(ctx, key+":a", longTTL); return err },
			wait: func(c *redlock.Client, key string, ctx context.Context) error {
				_, err := c.LockMulti(ctx, []string{key + ":a", key + ":b"}, longTTL)
				return err
			},
			channel: func(key string) string { return wire.ReleaseChannel(key + ":a") },
		},
		"semaphore": {
			hold: func(key string) error { _, err := holder.Semaphore(key, 1).TryAcquire(ctx, longTTL); return err },
			wait: func(c *redlock.Client, key string, ctx context.Context) error {
				_, err := c.Semaphore(key, 1).Acquire(ctx, longTTL)
				return err
			},
			channel: wire.ReleaseChannel,
		},
		"rwlock writer": {
			hold: func(key string) error { _, err := holder.RWLock(key).TryRLock(ctx, longTTL); return err },
			wait: func(c *redlock.Client, key string, ctx context.Context) error {
				_, err := c.RWLock(key).Lock(ctx, longTTL)
				return err
			},
			channel: wire.ReleaseChannel,
		},
	} {
		t.Run(name, func(t *testing.T) {
			key := newKey(t)
			require.NoError(t, tc.hold(key))
			rounds := &acquireRounds{}
			waiter := e.client(redlock.WithObserver(rounds))
			// Node 0 announces a release every millisecond.
			pctx, stop := context.WithCancel(ctx)
			defer stop()
			published := make(chan int, 1)
			go func() {
				conn := dialNode(t, e.nodes[0])
				n := 0
				defer func() { published <- n }()
				for range 5000 { // bounded; pctx ends it first
					if pctx.Err() != nil {
						return
					}
					if _, err := conn.Do("PUBLISH", tc.channel(key), ""); err != nil {
						return
					}
					n++
					time.Sleep(time.Millisecond)
				}
			}()
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			require.ErrorIs(t, tc.wait(waiter, key, wctx), redlock.ErrNotAcquired)
			stop()
			n := <-published
			for _, i := range []int{3, 4} {
				_ = e.nodes[i].Resume()
			}
			got := rounds.n.Load()
			t.Logf("%d rounds in a second while node 0 announced %d releases", got, n)
			require.Greater(t, n, 100, "the node announced")
			require.Less(t, got, int64(40), "a waiter asked again at the pace of the announcements")
		})
	}
}
