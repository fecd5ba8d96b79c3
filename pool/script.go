package pool

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
)

// Script is a Lua script that Pool.Eval runs: its source, its SHA1 hash,
// and how many of a call's arguments are keys. Make each Script once
// (package variables) and reuse it: an adapter sends EVALSHA with Hash,
// and EVAL with Source when the node answers NOSCRIPT.
type Script struct {
	keys      int
	src, hash string
	// The arguments of EVALSHA and of EVAL that come before the caller's:
	// the hash (or the source), then the key count unless the caller
	// gives it. They are boxed once: converting a string to an interface
	// value allocates, and a lock runs its scripts on every node of every
	// round.
	evalsha, eval []any
}

// NewScript returns the script src, which takes keyCount keys. With a
// negative keyCount, each call gives the number of keys as its first
// argument (an int), before the keys.
func NewScript(keyCount int, src string) *Script {
	sum := sha1.Sum([]byte(src))
	s := &Script{keys: keyCount, src: src, hash: hex.EncodeToString(sum[:])}
	s.evalsha, s.eval = []any{s.hash}, []any{s.src}
	if keyCount >= 0 {
		s.evalsha, s.eval = append(s.evalsha, keyCount), append(s.eval, keyCount)
	}
	return s
}

// Keys returns how many keys the script takes: the count given to
// NewScript, negative when each call gives it.
func (s *Script) Keys() int { return s.keys }

// Source returns the script's Lua source, for EVAL.
func (s *Script) Source() string { return s.src }

// Hash returns the hex SHA1 of the source, for EVALSHA.
func (s *Script) Hash() string { return s.hash }

// Split parts the keysAndArgs of an Eval call into the script's keys and
// its other arguments, as clients that take them apart need (EVALSHA
// sha numkeys key... arg...). Keys must be strings or byte slices; the
// other arguments are returned as they are. It fails when keysAndArgs
// has fewer keys than the count says, or a key of another type.
func (s *Script) Split(keysAndArgs []any) (keys []string, args []any, err error) {
	n := s.keys
	if n < 0 {
		if len(keysAndArgs) == 0 {
			return nil, nil, fmt.Errorf("redlock/pool: script called without its key count")
		}
		c, ok := keysAndArgs[0].(int)
		if !ok || c < 0 {
			return nil, nil, fmt.Errorf("redlock/pool: script key count %v (%T): want an int ≥ 0", keysAndArgs[0], keysAndArgs[0])
		}
		n, keysAndArgs = c, keysAndArgs[1:]
	}
	if len(keysAndArgs) < n {
		return nil, nil, fmt.Errorf("redlock/pool: script called with %d arguments for %d keys", len(keysAndArgs), n)
	}
	keys = make([]string, n)
	for i, k := range keysAndArgs[:n] {
		switch k := k.(type) {
		case string:
			keys[i] = k
		case []byte:
			keys[i] = string(k)
		default:
			return nil, nil, fmt.Errorf("redlock/pool: script key %d is a %T, want a string", i+1, k)
		}
	}
	return keys, keysAndArgs[n:], nil
}
