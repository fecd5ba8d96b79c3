package redlock

import "sync"

// background owns a Client's background work: goroutines it starts and
// commands whose replies nobody waits for. Close stops new work and waits
// for what runs; every piece of background work goes through it.
type background struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by close
	wg     sync.WaitGroup
}

func newBackground() background { return background{done: make(chan struct{})} }

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

// add counts n pieces of work that will each end with a call to end (a
// command's reply, for one), and reports whether it did: after close it
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

// addHeld counts n more pieces of work for a caller that holds one
// already (so that close is still waiting): it is never refused.
func (b *background) addHeld(n int) { b.wg.Add(n) }

// end ends one piece of work counted by add or addHeld.
func (b *background) end() { b.wg.Done() }

// goHeld runs f in a new goroutine for a caller that holds a count:
// never refused.
func (b *background) goHeld(f func()) {
	b.addHeld(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// closing is closed once close has been called: long-running work stops
// when it is.
func (b *background) closing() <-chan struct{} { return b.done }

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
