package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance or Set is called. Timers and
// AfterFunc callbacks whose time has come fire during that call: channel
// timers receive the fake time (buffered, never blocking), AfterFunc
// callbacks run in their own goroutines, like the real clock's.
//
// A Fake is safe for concurrent use. The zero value is not usable; call
// NewFake.
type Fake struct {
	adv     sync.Mutex // serializes Advance and Set, target included
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is added
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the fake time elapsed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a timer that fires once the fake clock has advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls fn in its own goroutine once the fake clock has advanced
// by d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d and fires every timer that is due,
// in the order of their deadlines.
func (f *Fake) Advance(d time.Duration) {
	f.adv.Lock()
	defer f.adv.Unlock()
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.set(target)
}

// Set moves the clock to t (never backwards) and fires every timer that is
// due, in the order of their deadlines.
func (f *Fake) Set(t time.Time) {
	f.adv.Lock()
	defer f.adv.Unlock()
	f.set(t)
}

// set is Set under f.adv. The AfterFunc callbacks due in one call run one
// after another, in deadline order, in one goroutine of their own.
func (f *Fake) set(t time.Time) {
	var fns []func()
	defer func() {
		if len(fns) > 0 {
			go func() {
				for _, fn := range fns {
					fn()
				}
			}()
		}
	}()
	for {
		f.mu.Lock()
		if t.Before(f.now) {
			f.mu.Unlock()
			return
		}
		sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
		if len(f.timers) == 0 || f.timers[0].when.After(t) {
			f.now = t
			f.mu.Unlock()
			return
		}
		due := f.timers[0]
		f.timers = f.timers[1:]
		due.active = false
		if due.when.After(f.now) {
			f.now = due.when
		}
		now := f.now
		f.mu.Unlock()
		if due.fn != nil {
			fns = append(fns, due.fn)
			continue
		}
		due.fire(now)
	}
}

// Timers returns how many timers are waiting to fire. Tests use it to wait
// until the code under test has scheduled what they are about to trigger.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitTimers blocks until at least n timers are waiting or the done channel
// closes; it reports whether the count was reached.
func (f *Fake) WaitTimers(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		count, changed := len(f.timers), f.changed
		f.mu.Unlock()
		if count >= n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	fn     func()
	when   time.Time
	active bool // guarded by f.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.c <- now:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.removeLocked()
}

func (t *fakeTimer) removeLocked() bool {
	if !t.active {
		return false
	}
	t.active = false
	for i, other := range t.f.timers {
		if other == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			break
		}
	}
	return true
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	was := t.removeLocked()
	t.when = t.f.now.Add(d)
	t.active = true
	t.f.timers = append(t.f.timers, t)
	close(t.f.changed)
	t.f.changed = make(chan struct{})
	t.f.mu.Unlock()
	if d <= 0 {
		t.f.Advance(0)
	}
	return was
}
