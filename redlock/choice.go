package redlock

// A choice round (a semaphore's acquisition) asks every node to take one
// of n choices (a permit slot): a reply counts toward the quorum of the
// choice it took, and the round is won by a quorum that took the same
// one. round.go decides it; the counting is here.

// choice is how a choice round reads its replies: which of n choices a
// NodeOK reply took. The round is won by a quorum that took the same one,
// and the lock it takes is on that choice's key.
type choice struct {
	n    int
	read func(reply any) int
	key  func(choice int) string
}

// tally is a choice round's count of the replies read before its
// decision.
type tally struct {
	won    int   // the choice with the most, -1 for none yet
	counts []int // per choice
	picks  []int // per node, the choice it took (-1: none)
}

// newTally returns the count of a choice round among n choices on nodes
// nodes: nothing taken yet.
func newTally(n, nodes int) *tally {
	t := &tally{won: -1, counts: make([]int, n), picks: make([]int, nodes)}
	for i := range t.picks {
		t.picks[i] = -1
	}
	return t
}

// tallied counts o, a NodeOK reply read before the decision, toward the
// choice it took: the round's okCount is the most replies that took one
// choice.
func (r *round) tallied(o outcome) {
	t := r.tally
	c := r.choiceOf(o)
	t.picks[o.i] = c
	if t.counts[c]++; t.counts[c] > r.okCount {
		r.okCount, t.won = t.counts[c], c
	}
}

// won returns the choice with the most replies by the decision of a
// choice round (a quorum's when the round was won); -1 for none, and on
// any other round.
func (r *round) won() int {
	if r.tally == nil {
		return -1
	}
	return r.tally.won
}

// choiceOf returns the choice a reply of a choice round took: -1 for
// none (not NodeOK, or not a choice round).
func (r *round) choiceOf(o outcome) int {
	if r.tally == nil || o.status != NodeOK {
		return -1
	}
	return r.req.choice.read(o.reply)
}

// pick returns the choice node i took by the decision of a choice round;
// -1 for none, and on any other round.
func (r *round) pick(i int) int {
	if r.tally == nil {
		return -1
	}
	return r.tally.picks[i]
}
