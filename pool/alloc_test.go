package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

// The hot path of a pipelined node allocates nothing per command beyond
// what the caller passes in (its arguments, its context): the arguments
// of EVALSHA are built in a buffer that is reused, the script's hash is
// boxed once, and the requests are recycled.

// setScript's reply is an integer that redigo returns without allocating
// (a bulk string reply costs two allocations in redigo, whoever reads it).
var setScript = pool.NewScript(1, `redis.call("SET", KEYS[1], ARGV[1]) return 1`)

// countedScript is setScript with the key count given by the caller, as
// redlock's acquire script does.
var countedScript = pool.NewScript(-1, `redis.call("SET", KEYS[1], ARGV[1]) return 1`)

// waitReceiver is a Receiver that hands each reply to the goroutine that
// started the command, without allocating.
type waitReceiver chan reply

func (w waitReceiver) Receive(v any, err error) { w <- reply{v, err} }

// hotCalls are the calls whose allocations are pinned, on node n: each
// returns the call's error. Do and Eval run with a context whose deadline
// is later than the I/O timeout, and without one: the pool bounds them
// itself.
func hotCalls(tb testing.TB, n *pool.Node) map[string]func() error {
	rcv := make(waitReceiver, 1)
	setArgs := []any{"alloc:k", "v"}
	evalArgs := []any{"alloc:sk", "v"}
	countedArgs := []any{1, "alloc:sk", "v"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	tb.Cleanup(cancel)
	return map[string]func() error{
		"Start": func() error {
			n.Start(rcv, "SET", setArgs...)
			return (<-rcv).err
		},
		"StartEval": func() error {
			n.StartEval(rcv, setScript, evalArgs...)
			return (<-rcv).err
		},
		"StartEval-counted": func() error {
			n.StartEval(rcv, countedScript, countedArgs...)
			return (<-rcv).err
		},
		"Do": func() error {
			_, err := n.Do(ctx, "SET", setArgs...)
			return err
		},
		"Eval": func() error {
			_, err := n.Eval(ctx, setScript, evalArgs...)
			return err
		},
		"Do-no-deadline": func() error {
			_, err := n.Do(context.Background(), "SET", setArgs...)
			return err
		},
	}
}

func TestNode_hotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates: counts differ")
	}
	s := startNode(t)
	n := newNode(t, s.Addr())
	for name, call := range hotCalls(t, n) {
		t.Run(name, func(t *testing.T) {
			// Warm up: the connection, the script cache, the request pool.
			for i := 0; i < 100; i++ {
				require.NoError(t, call())
			}
			var err error
			allocs := testing.AllocsPerRun(1000, func() {
				if e := call(); e != nil {
					err = e
				}
			})
			require.NoError(t, err)
			t.Logf("%s: %v allocations per call", name, allocs)
			require.Zero(t, allocs, "%s allocates per call", name)
		})
	}
}

func BenchmarkNode(b *testing.B) {
	s := redistest.StartT(b, 1).Node(0)
	p, err := pool.New(s.Addr())
	require.NoError(b, err)
	b.Cleanup(func() { p.Close() })
	calls := hotCalls(b, p)
	for _, name := range []string{"Start", "StartEval", "StartEval-counted", "Do", "Eval", "Do-no-deadline"} {
		call := calls[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
