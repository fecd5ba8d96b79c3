package redlock

// pending is the rounds that a command to the same key must not overtake
// on a node: rounds that went out and that the node had not answered when
// they were decided. Sent before such a round's command is read, a
// release (or a round's undoing) would find nothing, and the late command
// would then land and stay. A lock's Extend and Unlock wait for the Lock
// call's rounds, a waiter's leaving the queue for its own, on the nodes
// where one has not settled. The zero value holds no round.
type pending struct {
	last    *round   // the latest round; nil for none
	earlier []*round // earlier rounds not settled when last looked
}

// add makes r (when it was sent) the latest round, and keeps of the
// others only those that have not settled.
func (p *pending) add(r *round) {
	if r == nil || !r.sent {
		return
	}
	if p.last != nil && !p.last.settledAll() {
		p.earlier = append(p.earlier, p.last)
	}
	p.last = r
	keep := p.earlier[:0]
	for _, e := range p.earlier {
		if !e.settledAll() {
			keep = append(keep, e)
		}
	}
	clear(p.earlier[len(keep):])
	p.earlier = keep
}

// on reports whether one of the rounds has not settled on node i.
func (p *pending) on(i int) bool {
	if p.last.unsettled(i) {
		return true
	}
	for _, r := range p.earlier {
		if r.unsettled(i) {
			return true
		}
	}
	return false
}

// await waits until every round has settled; each is bounded by the node
// timeout.
func (p *pending) await() {
	p.last.await()
	for _, r := range p.earlier {
		r.await()
	}
}
