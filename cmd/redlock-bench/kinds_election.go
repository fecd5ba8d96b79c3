package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Election mode: -workers candidates, each on a Client of its own, take
// part in one election. Each leader leads for -hold, then ends its term,
// alternately by resigning (Unlock of its Campaign's lock) and by dying;
// then it campaigns again. A death is the end of the leader's process as
// the API lets a process end without resigning: its Client is closed
// (Client.Close stops the automatic extension and leaves held locks to
// expire with their TTL, without releasing them), and the candidate
// comes back on a new Client on the same connections, like a process
// that restarted. The run measures the time from each end to the next
// leader's Campaign returning, and ends after -terms such successions
// (or -duration).

// succession is what the candidates share: how and when the last term
// ended, the terms seen, and the successions measured.
type succession struct {
	mu          sync.Mutex
	endedAt     time.Time // zero: no ended term waits for a successor
	died        bool      // the last term ended by death, not resignation
	leaders     int       // Campaign wins
	lastTerm    uint64
	regressions int // terms not above the one before: 0 unless fencing failed
	lost        int // terms that ended by themselves before the leader ended them
	death       *hist
	resign      *hist
	want        int                // successions to measure
	stop        context.CancelFunc // ends the run once they are
}

// won records a Campaign that returned at t with the given term, and
// returns whether this leader is to die (rather than resign): the
// leaders do each in turn.
func (s *succession) won(t time.Time, term uint64) (die bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if term <= s.lastTerm {
		s.regressions++
	}
	s.lastTerm = term
	s.leaders++
	if !s.endedAt.IsZero() {
		h := s.resign
		if s.died {
			h = s.death
		}
		h.record(t.Sub(s.endedAt))
		s.endedAt = time.Time{}
	}
	if s.death.count()+s.resign.count() >= int64(s.want) {
		s.stop()
	}
	return s.leaders%2 == 0
}

// end records that the leader ends its term now, by death or by
// resignation; it is called before the Close or Unlock that ends it.
func (s *succession) end(die bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endedAt, s.died = time.Now(), die
}

// lose records a term that ended by itself: its successor is not
// measured.
func (s *succession) lose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost++
	s.endedAt = time.Time{}
}

// candidate is one process taking part in the election.
type candidate struct {
	k     *kindRun
	name  string
	value string
	pools []pool.Pool // its connections, kept across deaths
	c     *redlock.Client
	s     *succession
	rec   *recorder
}

// election measures election mode: the candidates campaign until the
// successions are measured or cfg.duration passes.
func (k *kindRun) election(ctx context.Context) error {
	kr := k.res.kind
	kr.death, kr.resign = newHist(), newHist()
	cands := make([]*candidate, k.cfg.workers)
	for i := range cands {
		cands[i] = &candidate{k: k, name: k.prefix + "election", value: fmt.Sprintf("candidate-%d", i),
			pools: k.cs.pools[i], c: k.client(i), rec: newRecorder(false, k.cfg.mode)}
	}
	var err error
	k.window(ctx, func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		kr.succession = &succession{death: kr.death, resign: kr.resign, want: k.cfg.terms, stop: cancel}
		err = runCandidates(ctx, cands, kr.succession)
	})
	recs := make([]*recorder, len(cands))
	for i, c := range cands {
		recs[i] = c.rec
		c.c.Close() // the last life's Client; the first ones close with k.cs
	}
	k.res, _ = merge(k.res, recs)
	return err
}

// runCandidates runs every candidate until ctx ends; it fails only when a
// candidate cannot come back after a death.
func runCandidates(ctx context.Context, cands []*candidate, s *succession) error {
	var g errgroup.Group
	for _, c := range cands {
		c.s = s
		g.Go(func() error { return c.loop(ctx) })
	}
	return g.Wait()
}

// loop campaigns, leads and ends its term until ctx ends.
func (c *candidate) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := c.term(ctx); err != nil {
			return err
		}
	}
	return nil
}

// term is one campaign and, when it wins, one term: lead for cfg.hold,
// then die or resign as the succession says. A term that ends with the
// run resigns, unmeasured.
func (c *candidate) term(ctx context.Context) error {
	cfg := c.k.cfg
	t0 := time.Now()
	l, err := c.c.Election(c.name).Campaign(ctx, c.value, cfg.ttl)
	t1 := time.Now()
	if err != nil {
		c.rec.failed(ctx, err, t1.Sub(t0))
		return nil
	}
	c.rec.acquire.record(t1.Sub(t0))
	die := c.s.won(t1, l.Fence())
	holdFor(ctx, cfg.hold)
	switch {
	case l.Context().Err() != nil:
		c.s.lose()
	case ctx.Err() == nil && die:
		c.s.end(true)
		return c.die()
	case ctx.Err() == nil:
		c.s.end(false)
	}
	t2 := time.Now()
	if err := l.Unlock(context.WithoutCancel(ctx)); err != nil && l.Context().Err() == nil {
		c.rec.addErr(errKind("release", err), err)
	}
	c.rec.release.record(time.Since(t2))
	c.rec.rounds++
	return nil
}

// die ends the candidate's process while it leads, without resigning:
// its Client closes, which stops the lock's extension and leaves the
// election key to expire with its TTL. The candidate comes back on a new
// Client on the same pools.
func (c *candidate) die() error {
	c.c.Close()
	c.rec.rounds++
	nc, err := redlock.New(c.pools, clientOptions(c.k.cfg, c.k.ns)...)
	if err != nil {
		return fmt.Errorf("a new Client after a death: %w", err)
	}
	c.c = nc
	return nil
}
