package redlock

import "sync"

// background owns a Client's background work: goroutines it starts and
// commands whose replies nobody waits for. Close stops new work and waits
// for what runs; every piece of background work goes through one of its
// verbs, and nothing else counts work. The Client's goroutines are:
//   - the notifier's: one per node that can subscribe (notifier.run) and
//     a pinger, from the first waiting call until Close (notify.go);
//   - per round on pools that start no commands of their own (not
//     pool.New's nodes), one per node call, bounded by the node timeout;
//     a command that must follow an unsettled round on its node waits for
//     it in one (round.go);
//   - a reply on a connection restart safety has not checked yet waits
//     for the check in one (nodeCall.Receive);
//   - owed releases: one reads a failed round's late replies, one per owed
//     node retries (owed.go); a failed waiter leaves the queues behind its
//     unsettled rounds in one per such node (waiter.end);
//   - restart safety's checks and markings (restart.go);
//   - automatic extension, one per lock that has it (autoextend.go).
//
// Timers of the Client's clock run a lock context's expiry (context.go)
// and the end of a key's linger (notify.go).
type background struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by close
	wg     sync.WaitGroup
}

func newBackground() background { return background{done: make(chan struct{})} }

// add counts n pieces of work and reports whether it did: after close it
// does not.
func (b *background) add(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(n)
	return true
}

// goTracked runs f in a new goroutine counted as background work, and
// reports whether it did: after close it does not.
func (b *background) goTracked(f func()) bool {
	if !b.add(1) {
		return false
	}
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// goAll runs each of fs in a new goroutine, all counted at once as
// background work, and reports whether it did: after close none runs.
func (b *background) goAll(fs ...func()) bool {
	if !b.add(len(fs)) {
		return false
	}
	for _, f := range fs {
		go func() {
			defer b.wg.Done()
			f()
		}()
	}
	return true
}

// goHeld runs f in a new goroutine for a caller that holds a ticket (so
// that close is still waiting): never refused.
func (b *background) goHeld(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// do runs f, counted as background work while it runs, and reports
// whether it did: after close it does not.
func (b *background) do(f func()) bool {
	if !b.add(1) {
		return false
	}
	defer b.wg.Done()
	f()
	return true
}

// ticket is one piece of counted work that ends when done is called,
// once; the zero ticket counts nothing.
type ticket struct{ b *background }

// claim counts one piece of work that ends with the ticket's done (a
// waiter's leaving its queues); ok is false after close.
func (b *background) claim() (t ticket, ok bool) {
	if !b.add(1) {
		return ticket{}, false
	}
	return ticket{b}, true
}

// claimHeld is claim for a caller that holds a ticket: never refused.
func (b *background) claimHeld() ticket {
	b.wg.Add(1)
	return ticket{b}
}

// done ends the ticket's work.
func (t ticket) done() {
	if t.b != nil {
		t.b.wg.Done()
	}
}

// Receive implements async.Receiver: a command whose reply nobody reads
// ends the ticket's work when its reply comes.
func (t ticket) Receive(any, error) { t.done() }

// expect counts the replies of n commands about to be sent (a round's),
// each ended by replied; false after close.
func (b *background) expect(n int) bool { return b.add(n) }

// replied ends one reply counted by expect.
func (b *background) replied() { b.wg.Done() }

// closing is closed once close has been called: long-running work stops
// when it is.
func (b *background) closing() <-chan struct{} { return b.done }

// isClosing reports whether Close was called.
func (b *background) isClosing() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// close refuses new work from now on; wait waits for the work under way.
func (b *background) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
	b.mu.Unlock()
}

// wait waits until every piece of counted work has ended.
func (b *background) wait() { b.wg.Wait() }
