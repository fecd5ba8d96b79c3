package faults

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Hold is one holder's time with a lock, on the Mono clock.
type Hold struct {
	Key    string // the lock's key, or the name of a semaphore or read-write lock
	Kind   string // the kind of lock ("mutex", "semaphore", ...), for reports
	Worker string // who held it, for reports
	// Shared marks a reader's hold: it may overlap other shared holds of
	// the key, never an exclusive one.
	Shared bool
	// Permits is how many holds of the key may overlap (a semaphore's
	// permits); 0 or 1: one (a mutex, a read-write lock).
	Permits int
	Start   time.Duration // when the acquisition returned
	// End is when the hold stopped counting as exclusive: the earlier of
	// the validity's end (as the holder's clock measured it, converted to
	// real time) and the moment the holder began to release.
	End   time.Duration
	Fence uint64 // the lock's fence; 0 when not fenced
	// LastWrite is when the holder last wrote to the protected resource
	// under this lock; 0 when it did not write.
	LastWrite time.Duration
}

// Overlap is two holds of one key whose windows intersect although at
// least one of them is exclusive: mutual exclusion failed.
type Overlap struct{ A, B Hold }

// String describes the overlap.
func (o Overlap) String() string {
	return fmt.Sprintf("key %s: %s held [%v, %v], %s held [%v, %v] (overlap %v)", o.A.Key,
		o.A.Worker, o.A.Start, o.A.End, o.B.Worker, o.B.Start, o.B.End, min(o.A.End, o.B.End)-max(o.A.Start, o.B.Start))
}

// Checker collects holds from every worker and finds what went wrong.
// Its methods are safe for concurrent use.
type Checker struct {
	mu    sync.Mutex
	holds map[string][]Hold
	n     int
}

// NewChecker returns an empty Checker.
func NewChecker() *Checker { return &Checker{holds: map[string][]Hold{}} }

// Add records a hold. A hold whose End is not after its Start (the
// validity was gone when the acquisition returned) is counted but held
// nothing.
func (c *Checker) Add(h Hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds[h.Key] = append(c.holds[h.Key], h)
	c.n++
}

// Len returns the number of holds recorded.
func (c *Checker) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// sorted returns the holds per key, ordered by Start, and the keys in order.
func (c *Checker) sorted() ([]string, map[string][]Hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.holds))
	out := make(map[string][]Hold, len(c.holds))
	for k, hs := range c.holds {
		keys = append(keys, k)
		hs = slices.Clone(hs)
		slices.SortFunc(hs, func(a, b Hold) int { return cmpDur(a.Start, b.Start) })
		out[k] = hs
	}
	slices.Sort(keys)
	return keys, out
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Overlaps returns every pair of holds of one key whose windows
// [Start, End] intersect and that are not both Shared, by key and start.
// Keys of more than one permit are Crowds' to check.
func (c *Checker) Overlaps() []Overlap {
	keys, holds := c.sorted()
	var out []Overlap
	for _, k := range keys {
		hs := holds[k]
		if hs[0].Permits > 1 {
			continue
		}
		var longest time.Duration
		for _, h := range hs {
			longest = max(longest, h.End-h.Start)
		}
		for i, b := range hs {
			if b.End <= b.Start {
				continue
			}
			// Earlier holds still open when b began: none began more
			// than the longest window before it.
			for j := i - 1; j >= 0 && b.Start-hs[j].Start <= longest; j-- {
				if a := hs[j]; a.End > b.Start && a.End > a.Start && !(a.Shared && b.Shared) {
					out = append(out, Overlap{A: a, B: b})
				}
			}
		}
	}
	return out
}

// LateWrites returns the holds that wrote to the resource after their
// window ended while another holder of the key held it: the write of a
// holder that stalled past its validity (a GC pause), which only a fenced
// resource can refuse. Keys of more than one permit are left out.
func (c *Checker) LateWrites() []Overlap {
	keys, holds := c.sorted()
	var out []Overlap
	for _, k := range keys {
		hs := holds[k]
		if hs[0].Permits > 1 {
			continue // a semaphore's holders each write their own slot's resource
		}
		for _, a := range hs {
			if a.LastWrite <= a.End {
				continue
			}
			for _, b := range hs {
				if b != a && b.Start < a.LastWrite && b.Start >= a.Start && b.End > b.Start {
					out = append(out, Overlap{A: a, B: b})
					break
				}
			}
		}
	}
	return out
}

// FenceInversions returns the pairs of fenced holds of one key, one after
// the other by Start, whose fences do not strictly increase.
func (c *Checker) FenceInversions() []Overlap {
	keys, holds := c.sorted()
	var out []Overlap
	for _, k := range keys {
		var prev *Hold
		for _, h := range holds[k] {
			if h.Fence == 0 {
				continue
			}
			if prev != nil && h.Fence <= prev.Fence {
				out = append(out, Overlap{A: *prev, B: h})
			}
			prev = &h
		}
	}
	return out
}

// SharedOverlaps returns how many pairs of Shared holds of one key
// overlapped: readers that held together, which a read-write lock allows
// (a run where none did checked less than it may seem).
func (c *Checker) SharedOverlaps() int {
	keys, holds := c.sorted()
	n := 0
	for _, k := range keys {
		hs := holds[k]
		var longest time.Duration
		for _, h := range hs {
			longest = max(longest, h.End-h.Start)
		}
		for i, b := range hs {
			for j := i - 1; j >= 0 && b.Start-hs[j].Start <= longest; j-- {
				if a := hs[j]; a.Shared && b.Shared && a.End > b.Start && a.End > a.Start && b.End > b.Start {
					n++
				}
			}
		}
	}
	return n
}

// Crowd is a moment when more holds of a key were open than it has
// permits: Holds are the open ones, the last of them the one that began
// at At.
type Crowd struct {
	Key   string
	At    time.Duration
	Holds []Hold
}

// String describes the crowd.
func (c Crowd) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: %d holders of %d permits at %v:", c.Key, len(c.Holds), c.Holds[0].Permits, c.At)
	for _, h := range c.Holds {
		fmt.Fprintf(&b, " %s [%v, %v]", h.Worker, h.Start, h.End)
	}
	return b.String()
}

// Crowds returns, for the keys of more than one permit, every hold that
// began while as many holds as the key has permits were still open (their
// windows [Start, End] intersect at its Start), by key and start.
func (c *Checker) Crowds() []Crowd {
	keys, holds := c.sorted()
	var out []Crowd
	for _, k := range keys {
		hs := holds[k]
		permits := hs[0].Permits
		if permits <= 1 {
			continue
		}
		var open []Hold
		for _, b := range hs {
			if b.End <= b.Start {
				continue
			}
			open = slices.DeleteFunc(open, func(a Hold) bool { return a.End <= b.Start })
			open = append(open, b)
			if len(open) > permits {
				out = append(out, Crowd{Key: k, At: b.Start, Holds: slices.Clone(open)})
			}
		}
	}
	return out
}

// Peak returns the most holds of key open at once (windows [Start, End]
// intersecting at a hold's Start): for a semaphore, how close its holders
// came to its permits.
func (c *Checker) Peak(key string) int {
	_, holds := c.sorted()
	var open []Hold
	peak := 0
	for _, b := range holds[key] {
		if b.End <= b.Start {
			continue
		}
		open = slices.DeleteFunc(open, func(a Hold) bool { return a.End <= b.Start })
		open = append(open, b)
		peak = max(peak, len(open))
	}
	return peak
}

// TermsHeldTwice returns the pairs of fenced holds of one key with the
// same fence: for an election, two leaders of one term.
func (c *Checker) TermsHeldTwice() []Overlap {
	keys, holds := c.sorted()
	var out []Overlap
	for _, k := range keys {
		seen := map[uint64]Hold{}
		for _, h := range holds[k] {
			if h.Fence == 0 {
				continue
			}
			if a, ok := seen[h.Fence]; ok {
				out = append(out, Overlap{A: a, B: h})
				continue
			}
			seen[h.Fence] = h
		}
	}
	return out
}
