package redlock

// Restart safety: the check of every node that goes out with a Client's
// first acquisition, and the marks of a new deployment.

import (
	"context"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/redlock/internal/wire"
)

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
	if mark, how := c.adoptOK(a, fresh); mark {
		born := ""
		if fresh && a.f.cluster && a.f.marker == "" {
			born = c.shardsNow(a.i) // written with the node's first mark (shards.go)
		}
		c.mark(a.i, a.f.runID, a.f.lineage, born, how)
	}
	c.rs.checking[a.i].Store(false)
	c.checkEnded()
}

// adoptOK is adopt for an answer that came (a.err nil); nothing for one
// that failed.
func (c *Client) adoptOK(a answer, fresh bool) (mark bool, how string) {
	if a.err != nil {
		return false, ""
	}
	return c.adopt(a.i, a.f, fresh)
}

// startChecks checks every node in the background; the answers arrive on
// the channel, n of them.
func (c *Client) startChecks(ctx context.Context) (answers chan answer, n int) {
	n = len(c.pools)
	answers = make(chan answer, n)
	for i := range c.pools {
		c.rs.checking[i].Store(true)
		if !c.bg.goTracked(func() {
			f, err := c.checkNode(ctx, i, "", "", "", c.checkBound())
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
			got[k].f, got[k].err = c.checkNode(ctx, a.i, "", "", "", c.checkBound())
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
func (c *Client) mark(i int, runID, lineage, born, how string) {
	v := c.rs.views[i].Load()
	f, err := c.checkNode(context.Background(), i, wire.MarkerOf(runID, lineage), born, how, c.checkBound())
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
