package simnode

import (
	"maps"
	"time"
)

// snapshot is what a node holds at one moment, each key with when it
// expires on the node's clock (zero: never). As in Redis's own files,
// expiry is absolute: a key whose time passed while the node was down is
// gone when it loads.
type snapshot map[string]item

// take copies what the engine holds at the node's time now.
func (e *engine) take(now time.Time) snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.now = now
	s := snapshot{}
	for k := range e.st.items {
		if it := e.st.get(k); it != nil {
			s[k] = it.clone()
		}
	}
	return s
}

// restore returns a store holding s at the node's time now.
func (s snapshot) restore(now time.Time) *store {
	st := newStore()
	st.now = now
	for k, it := range s {
		if it.exp.IsZero() || now.Before(it.exp) {
			c := it.clone()
			st.items[k] = &c
		}
	}
	return st
}

// clone is a deep copy of the item.
func (it *item) clone() item {
	c := *it
	c.hash = maps.Clone(it.hash)
	c.zset = maps.Clone(it.zset)
	return c
}

// keys returns the live keys, sorted, at the node's time.
func (e *engine) keys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.now = e.now()
	return e.st.keys()
}

// del deletes key at once, and reports whether it was there.
func (e *engine) del(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.now = e.now()
	if e.st.get(key) == nil {
		return false
	}
	delete(e.st.items, key)
	return true
}
