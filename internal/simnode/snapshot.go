package simnode

import (
	"time"

	"github.com/alicebob/miniredis/v2"
)

// snapshot is what a node holds at one moment: the strings, hashes and
// sorted sets the lock scripts use, with when each expires on the node's
// clock (zero: never). As in Redis's own files, expiry is absolute: a
// key whose time passed while the node was down is gone when it loads.
type snapshot map[string]entry

type entry struct {
	kind   string // "string", "hash" or "zset"
	str    string
	hash   map[string]string
	zset   map[string]float64
	expiry time.Time
}

// take reads everything m holds at the node's time now.
func take(m *miniredis.Miniredis, now time.Time) snapshot {
	m.SetTime(now)
	s := snapshot{}
	for _, k := range m.Keys() {
		e := entry{kind: m.Type(k)}
		switch e.kind {
		case "string":
			e.str, _ = m.Get(k)
		case "hash":
			e.hash = map[string]string{}
			fields, _ := m.HKeys(k)
			for _, f := range fields {
				e.hash[f] = m.HGet(k, f)
			}
		case "zset":
			e.zset, _ = m.SortedSet(k)
		default:
			continue // not a kind the scripts write
		}
		if ttl := m.TTL(k); ttl > 0 {
			e.expiry = now.Add(ttl)
		}
		s[k] = e
	}
	return s
}

// restore loads s into m at the node's time now.
func (s snapshot) restore(m *miniredis.Miniredis, now time.Time) {
	for k, e := range s {
		if !e.expiry.IsZero() && !e.expiry.After(now) {
			continue
		}
		switch e.kind {
		case "string":
			_ = m.Set(k, e.str)
		case "hash":
			for f, v := range e.hash {
				m.HSet(k, f, v)
			}
		case "zset":
			for member, score := range e.zset {
				_, _ = m.ZAdd(k, score, member)
			}
		}
		if !e.expiry.IsZero() {
			m.SetTTL(k, e.expiry.Sub(now))
		}
	}
}
