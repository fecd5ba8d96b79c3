package pool_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/pool"
)

// async.Starter: Start and StartEval call their Receiver exactly once, and never
// block. A Node's starter is not among its methods: package redlock finds
// it with async.StarterOf (the tests call it through export_test.go's
// methods).

func TestStarterOf_findsTheStarterOfANodeOnly(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	st := async.StarterOf[*pool.Script](newNode(t, s.Addr()))
	require.NotNil(t, st)
	_, tx := st.(async.TxStarter)
	require.True(t, tx, "a Node's starter sends transactions too")

	require.Nil(t, async.StarterOf[*pool.Script](fromRedigo(t, s.Addr(), s.Addr())))
	require.Nil(t, async.StarterOf[*pool.Script]((*pool.Node)(nil)))
	require.Nil(t, async.StarterOf[*pool.Script](nil))
}

func TestNode_Start_deliversEachReplyToItsReceiverOnce(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	st := async.StarterOf[*pool.Script](n)

	set := newRecorder(2)
	st.Start(set, "SET", "k", "v")
	rep := set.next(t)
	require.NoError(t, rep.err)
	require.Equal(t, "OK", rep.v)

	get := newRecorder(2)
	st.Start(get, "GET", "k")
	rep = get.next(t)
	require.NoError(t, rep.err)
	v, err := redis.String(rep.v, rep.err)
	require.NoError(t, err)
	require.Equal(t, "v", v)

	bad := newRecorder(2)
	st.Start(bad, "HGET", "k", "f")
	rep = bad.next(t)
	ne := requireNodeError(t, rep.err, s.Addr())
	require.True(t, ne.Replied())
	require.Equal(t, "HGET", ne.Op)

	// A PING afterwards has gone through the same connection: every
	// earlier reply has been delivered, and none twice.
	_, err = n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.Equal(t, int32(1), set.calls.Load())
	require.Equal(t, int32(1), get.calls.Load())
	require.Equal(t, int32(1), bad.calls.Load())
}

func TestNode_StartEval_fallsBackToEvalAfterScriptFlush(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())

	for i, flush := range []bool{false, true, false} {
		if flush {
			_, err := s.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
		r := newRecorder(2)
		arg := fmt.Sprintf("v%d", i)
		n.StartEval(r, concatScript, "sk", arg, "t")
		rep := r.next(t)
		require.NoError(t, rep.err, "round %d", i)
		got, err := redis.String(rep.v, rep.err)
		require.NoError(t, err)
		require.Equal(t, arg+":t", got)
		_, err = n.Do(ctxTimeout(t, waitLimit), "PING", "sk") // same connection: drains
		require.NoError(t, err)
		require.Equal(t, int32(1), r.calls.Load(), "round %d: NOSCRIPT must not reach the receiver", i)
	}
}

func TestNode_Start_onAClosedNodeReceivesErrClosedBeforeReturning(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	n := newNode(t, addr)
	require.NoError(t, n.Close())

	r := newRecorder(4)
	n.Start(r, "GET", "k")
	n.StartEval(r, concatScript, "k", "a", "b")
	require.Equal(t, int32(2), r.calls.Load(), "Receive runs before Start returns")
	for range 2 {
		rep := r.next(t)
		requireNodeError(t, rep.err, addr)
		require.ErrorIs(t, rep.err, pool.ErrClosed)
	}
}

func TestNode_Start_onAPausedNodeReceivesATimeoutWithinTheIOTimeout(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	const ioTimeout = 300 * time.Millisecond
	n := newNode(t, s.Addr(), pool.WithIOTimeout(ioTimeout))
	require.NoError(t, s.Pause())

	start := time.Now()
	r := newRecorder(2)
	n.Start(r, "GET", "k")
	rep := r.next(t)
	elapsed := time.Since(start)
	requireTimeout(t, rep.err, s.Addr())
	require.Less(t, elapsed, boundedBy)
}

func TestNode_Start_withAFullQueueReceivesAQueueErrorAtOnce(t *testing.T) {
	t.Parallel()
	const queueSize, calls = 4, 20
	s, n := stalledDial(t, queueSize)

	r := newRecorder(calls)
	start := time.Now()
	for range calls {
		n.Start(r, "PING")
	}
	require.Less(t, time.Since(start), boundedBy, "Start blocked while the node was being dialled")
	require.GreaterOrEqual(t, int(r.calls.Load()), calls-queueSize,
		"calls that found the queue full are answered before Start returns")
	for range r.calls.Load() {
		rep := r.next(t)
		ne := requireNodeError(t, rep.err, s.Addr())
		require.Equal(t, "queue", ne.Op, "%v", rep.err)
		require.ErrorContains(t, rep.err, "queue full")
	}

	// The queued ones are answered once the node is back.
	require.NoError(t, s.Resume())
	waitFor(t, "every call is answered", func() bool { return r.calls.Load() >= calls })
	for range len(r.replies) {
		require.NoError(t, r.next(t).err)
	}
	require.Equal(t, int32(calls), r.calls.Load(), "one Receive per call")
}

// Start is documented to return at once, and Receive to be called exactly
// once per call, even when the node stops answering.
func TestNode_Start_manyCallsOnAStalledNodeNeverBlock(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithIOTimeout(10*time.Second))
	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	require.NoError(t, err)
	require.NoError(t, s.Pause())

	const calls = 2000
	r := newRecorder(calls)
	start := time.Now()
	for range calls {
		n.Start(r, "PING")
	}
	require.Less(t, time.Since(start), boundedBy, "Start blocked on a stalled node")

	require.NoError(t, s.Resume())
	waitFor(t, "every call is answered", func() bool { return r.calls.Load() >= calls })
	for range calls {
		if rep := r.next(t); rep.err != nil {
			requireNodeError(t, rep.err, s.Addr())
		}
	}
	require.Equal(t, int32(calls), r.calls.Load(), "one Receive per call")
}

// Receive is documented to be called exactly once per call, whatever
// happens: here Close races with callers that are starting commands.
func TestNode_Start_racingWithCloseStillReceivesEveryReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	for round := range 40 {
		n, err := pool.New(s.Addr())
		require.NoError(t, err)
		r := newRecorder(0)
		var started atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 400 {
					started.Add(1)
					n.Start(r, "PING")
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond) // Close early, midway or late
		require.NoError(t, n.Close())
		wg.Wait()
		deadline := time.Now().Add(waitLimit)
		for r.calls.Load() < started.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, started.Load(), r.calls.Load(),
			"round %d: a call started while Close ran never got its Receive", round)
	}
}
