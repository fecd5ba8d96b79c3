package pool_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// Scripts: the arguments of EVALSHA and EVAL are built by the pool, as
// redigo's Script builds them, from a slice that the caller may share.

// keysFirstScript takes its key count from the caller, as redlock's
// acquire script does: SET KEYS[1] to ARGV[1] and return how many keys
// and arguments the script got.
var keysFirstScript = pool.NewScript(-1, `
redis.call("SET", KEYS[1], ARGV[1])
return {#KEYS, #ARGV}`)

func TestNode_scriptsWithTheKeyCountInTheArgumentsRunBeforeAndAfterScriptFlush(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithConns(3))
	ctx := ctxTimeout(t, waitLimit)

	for i, flush := range []bool{false, true, false, true} {
		if flush {
			_, err := s.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
		v := fmt.Sprint("eval", i)
		got, err := redis.Ints(n.Eval(ctx, keysFirstScript, 2, "ks1", "ks2", v))
		require.NoError(t, err, "round %d", i)
		require.Equal(t, []int{2, 1}, got)
		stored, err := redis.String(s.Do("GET", "ks1"))
		require.NoError(t, err)
		require.Equal(t, v, stored)

		if flush {
			_, err := s.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
		v = fmt.Sprint("start", i)
		r := newRecorder(2)
		n.StartEval(r, keysFirstScript, 1, "ks1", v, "extra")
		rep := r.next(t)
		got, err = redis.Ints(rep.v, rep.err)
		require.NoError(t, err, "round %d", i)
		require.Equal(t, []int{1, 2}, got)
		stored, err = redis.String(s.Do("GET", "ks1"))
		require.NoError(t, err)
		require.Equal(t, v, stored)
	}
}

// redlock passes one slice of arguments to every node at once: the pool
// must read it and never write it (the race detector checks the former).
func TestNode_StartEval_neverWritesTheCallersArguments(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const nodes = 5
	ns := make([]*pool.Node, nodes)
	for i := range ns {
		ns[i] = newNode(t, s.Addr())
	}
	_, err := s.Do("SCRIPT", "FLUSH") // the first round falls back to EVAL
	require.NoError(t, err)

	args := []any{"shared", "v", "t"}
	want := append([]any(nil), args...)
	for round := 0; round < 20; round++ {
		r := newRecorder(nodes)
		var wg sync.WaitGroup
		for _, n := range ns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.StartEval(r, concatScript, args...)
				_, _ = n.Eval(ctxTimeout(t, waitLimit), concatScript, args...)
			}()
		}
		wg.Wait()
		for range nodes {
			rep := r.next(t)
			got, err := redis.String(rep.v, rep.err)
			require.NoError(t, err)
			require.Equal(t, "v:t", got)
		}
		require.Equal(t, want, args, "round %d: the caller's slice was written", round)
	}
}
