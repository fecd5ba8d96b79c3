// Package turns is the check that a call is done when it returns: two
// Clients take turns on one name, in a loop. In each turn one of them
// takes the lock, the other is refused, and the holder releases it; the
// next turn the other takes it at once. A release that left the key on
// a node that answered it, or a refusal whose token stayed behind, fails
// a later step of the loop. The tests run it on in-process nodes
// (redlocktest) and on real redis-server processes (tests/).
package turns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// Kind is a kind of lock as the loop takes it: Take is a call that does
// not wait (TryLock and its kin) and succeeds when the name is free;
// Refuse is the other Client's call while the name is held, and must
// fail with ErrNotAcquired. turn numbers the turn, so a kind can vary
// its calls (a reader's refusal, then a writer's).
type Kind struct {
	Name   string
	Take   func(ctx context.Context, c *redlock.Client, name string, turn int) (*redlock.Lock, error)
	Refuse func(ctx context.Context, c *redlock.Client, name string, turn int) error
}

// TTL is the TTL of every lock the loop takes: far longer than a run,
// so that nothing left behind expires before the next step finds it.
const TTL = 30 * time.Second

// Kinds are the kinds of lock the loop covers: a mutex, a multi-key
// lock, a semaphore of one permit, a read-write lock's writer (refused
// as a reader, then as a writer, in turn), and an election, whose
// refused campaign ends by its deadline (refuseWithin) and whose
// winning campaign must not wait for what a refusal left (takeWithin).
var Kinds = []Kind{
	{
		Name: "mutex",
		Take: func(ctx context.Context, c *redlock.Client, name string, _ int) (*redlock.Lock, error) {
			return c.TryLock(ctx, name, TTL)
		},
		Refuse: func(ctx context.Context, c *redlock.Client, name string, _ int) error {
			return refused(c.TryLock(ctx, name, TTL))
		},
	},
	{
		Name: "multi",
		Take: func(ctx context.Context, c *redlock.Client, name string, _ int) (*redlock.Lock, error) {
			return c.TryLockMulti(ctx, multiKeys(name), TTL)
		},
		Refuse: func(ctx context.Context, c *redlock.Client, name string, _ int) error {
			return refused(c.TryLockMulti(ctx, multiKeys(name), TTL))
		},
	},
	{
		Name: "semaphore",
		Take: func(ctx context.Context, c *redlock.Client, name string, _ int) (*redlock.Lock, error) {
			return c.Semaphore(name, 1).TryAcquire(ctx, TTL)
		},
		Refuse: func(ctx context.Context, c *redlock.Client, name string, _ int) error {
			return refused(c.Semaphore(name, 1).TryAcquire(ctx, TTL))
		},
	},
	{
		Name: "rwlock",
		Take: func(ctx context.Context, c *redlock.Client, name string, _ int) (*redlock.Lock, error) {
			return c.RWLock(name).TryLock(ctx, TTL)
		},
		Refuse: func(ctx context.Context, c *redlock.Client, name string, turn int) error {
			if turn%2 == 0 {
				return refused(c.RWLock(name).TryRLock(ctx, TTL))
			}
			return refused(c.RWLock(name).TryLock(ctx, TTL))
		},
	},
	{
		Name: "election",
		Take: func(ctx context.Context, c *redlock.Client, name string, _ int) (*redlock.Lock, error) {
			ctx, cancel := context.WithTimeout(ctx, takeWithin)
			defer cancel()
			return c.Election(name).Campaign(ctx, "leader", TTL)
		},
		Refuse: func(ctx context.Context, c *redlock.Client, name string, _ int) error {
			ctx, cancel := context.WithTimeout(ctx, refuseWithin)
			defer cancel()
			return refused(c.Election(name).Campaign(ctx, "leader", TTL))
		},
	},
}

// An election has no call that does not wait: the refused campaign is
// one cut short, and the winning one may wait, but not for what the
// refused one left behind (a queue place that took the hand-off), which
// holds it for a place's life: with a node timeout of 1s, as the tests
// give, 6.1s, twice takeWithin.
const (
	refuseWithin = 2 * time.Millisecond
	takeWithin   = 3 * time.Second
)

// multiKeys are the keys of the multi-key lock of name: one hash slot.
func multiKeys(name string) []string {
	return []string{"{" + name + "}:a", "{" + name + "}:b"}
}

// refused returns nil when err says the lock was not acquired (and
// releases l, should the call have taken it after all); otherwise an
// error that says what the call did instead.
func refused(l *redlock.Lock, err error) error {
	switch {
	case err == nil:
		_ = l.Unlock(context.Background())
		return errors.New("acquired a lock the other Client held")
	case !errors.Is(err, redlock.ErrNotAcquired):
		return fmt.Errorf("failed otherwise than refused: %w", err)
	}
	return nil
}

// Run takes n turns of kind k on name with Clients a and b, and returns
// the first step that failed, with its turn and what the call said.
func Run(ctx context.Context, k Kind, a, b *redlock.Client, name string, n int) error {
	clients := [2]*redlock.Client{a, b}
	names := [2]string{"a", "b"}
	for turn := range n {
		h, o := turn%2, 1-turn%2
		l, err := k.Take(ctx, clients[h], name, turn)
		if err != nil {
			if turn == 0 {
				return fmt.Errorf("%s turn 0: %s could not take the free name %q: %w", k.Name, names[h], name, err)
			}
			return fmt.Errorf("%s turn %d: %s could not take %q once %s's Unlock had returned: %w", k.Name, turn, names[h], name, names[o], err)
		}
		if err := k.Refuse(ctx, clients[o], name, turn); err != nil {
			_ = l.Unlock(context.Background())
			return fmt.Errorf("%s turn %d: %s's call while %s held %q: %w", k.Name, turn, names[o], names[h], name, err)
		}
		if err := l.Unlock(ctx); err != nil {
			return fmt.Errorf("%s turn %d: %s's Unlock of %q: %w", k.Name, turn, names[h], name, err)
		}
	}
	return nil
}

// Env names the variable that sets how many turns each kind takes
// (make turns sets it; the tests' defaults are short).
const Env = "REDLOCK_TURNS"

// Count is the number of turns per kind: $REDLOCK_TURNS, or def when it
// is unset. A value that is not a positive number is an error.
func Count(def int) (int, error) {
	s := os.Getenv(Env)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number of turns", Env, s)
	}
	return n, nil
}
