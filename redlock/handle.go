package redlock

import (
	"errors"
	"slices"
)

// Handle is what another Client needs to take over a lock of any kind
// (Lock.Handle, Client.RestoreHandle): which call took it, on what, and
// its token. It is plain data, with JSON field names, so that a process
// can pass it to another. It holds the token: treat it as a secret. Its
// fields are Lock's, as Lock.Handle fills them; docs/kinds.md tells what
// each kind keeps.
type Handle struct {
	Kind LockKind `json:"kind"`
	// Name is the name the lock was taken on: a semaphore's, read-write
	// lock's or election's; "" for a mutex and a multi-key lock.
	Name string `json:"name,omitempty"`
	// Keys are the lock's keys (Lock.Keys).
	Keys  []string `json:"keys"`
	Token string   `json:"token"`
	// Fences are the lock's fences (Lock.Fences); nil when unfenced.
	Fences []uint64 `json:"fences,omitempty"`
	// Permits is a semaphore's number of permits; 0 for other kinds.
	Permits int `json:"permits,omitempty"`
	// Value is an election leader's value, which its extensions write
	// back where the leader record is missing; "" for other kinds.
	Value string `json:"value,omitempty"`
}

// Handle returns what another Client needs to take the lock over
// (RestoreHandle). It reads nothing from the nodes.
func (l *Lock) Handle() Handle {
	h := Handle{Kind: l.kind.is(), Keys: l.Keys(), Token: l.token, Fences: l.Fences()}
	l.kind.handle(l, &h)
	return h
}

// RestoreHandle returns a handle on the lock h describes, of any kind,
// taken by another Client or process. As with Restore, its validity is
// unknown (zero) until Extend succeeds, and Extend and Unlock work as on
// the original: a restored permit's Unlock gives its slot to the longest
// waiter, a read or write hold's wakes the lock's waiters, a multi-key
// lock's frees every key, and a restored leadership's extensions write
// the leader record back where it is missing. Its fences are h's. Hand
// a lock over between calls: an Extend of the original that failed
// without every node's answer may still land after the new holder's and
// end the key sooner (docs/kinds.md). It
// fails, asking no node, when h is not a lock's: an unknown kind, no
// token, or fields the kind needs missing or out of range.
func (c *Client) RestoreHandle(h Handle) (*Lock, error) {
	if h.Kind == 0 || int(h.Kind) >= len(kinds) {
		return nil, &kindError{h.Kind.String()}
	}
	if h.Token == "" {
		return nil, errors.New("redlock: handle without a token")
	}
	k, key, err := kinds[h.Kind].restore(c, &h)
	if err != nil {
		return nil, err
	}
	l := &Lock{c: c, key: key, token: h.Token, kind: k}
	restoreWaited(l)
	if len(h.Fences) > 0 {
		l.fence = h.Fences[0]
		if len(h.Fences) > 1 {
			l.fences = slices.Clone(h.Fences)
		}
	}
	return l, nil
}
