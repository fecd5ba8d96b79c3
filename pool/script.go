package pool

import (
	"sync"

	"github.com/gomodule/redigo/redis"
)

// scriptArgs are the arguments of EVALSHA and of EVAL that come before the
// caller's keys and arguments, as redigo's Script sends them: the script's
// hash (or its source), then its key count, unless the script was made
// with a negative count and the caller gives it. They are boxed once per
// script: converting a string to an interface value allocates, and a lock
// runs its scripts on every node of every round.
type scriptArgs struct {
	evalsha []any
	eval    []any // as long as evalsha
}

// scripts caches the scriptArgs of the scripts run so far, keyed by
// pointer: scripts are long-lived values (package variables, in redlock).
// A program that makes a Script per call fills it: it is then emptied, so
// that the long-lived scripts find room again.
var scripts struct {
	m  sync.Map   // *redis.Script → *scriptArgs
	mu sync.Mutex // held to add to m
	n  int        // entries in m
}

const maxCachedScripts = 256

// argsOf returns the scriptArgs of s.
func argsOf(s *redis.Script) *scriptArgs {
	if a, ok := scripts.m.Load(s); ok {
		return a.(*scriptArgs)
	}
	// redigo does not export the key count or the source: capture what
	// its Script sends for no keys and no arguments.
	var sha, eval capture
	_ = s.SendHash(&sha)
	_ = s.Send(&eval)
	a := &scriptArgs{evalsha: sha.args, eval: eval.args}

	scripts.mu.Lock()
	defer scripts.mu.Unlock()
	if v, ok := scripts.m.Load(s); ok {
		return v.(*scriptArgs)
	}
	if scripts.n == maxCachedScripts {
		scripts.m.Range(func(k, _ any) bool {
			scripts.m.Delete(k)
			return true
		})
		scripts.n = 0
	}
	scripts.m.Store(s, a)
	scripts.n++
	return a
}

// capture is a redis.Conn that only records what would be sent: it turns
// redigo's Script into the EVALSHA or EVAL arguments.
type capture struct {
	redis.Conn
	args []any
}

func (c *capture) Send(_ string, args ...any) error {
	c.args = args
	return nil
}
