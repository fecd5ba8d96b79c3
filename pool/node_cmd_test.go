package pool_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// Commands and scripts on a healthy node, contexts that are over before
// the call, and concurrent callers.

func TestNode_Do_withACancelledContextFailsWithoutConnecting(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	n := newNode(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Do(ctx, "get", "k")
	ne := requireNodeError(t, err, addr)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "GET", ne.Op, "it failed before dialling")
	require.False(t, isTimeout(err))

	_, err = n.Eval(ctx, pool.NewScript(0, "return 1"))
	ne = requireNodeError(t, err, addr)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "EVALSHA", ne.Op)
}

func TestNode_Do_withAnExpiredDeadlineTimesOutWithoutConnecting(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	n := newNode(t, addr)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := n.Do(ctx, "PING")
	ne := requireTimeout(t, err, addr)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, "PING", ne.Op)
}

func TestNode_Do_setsAndGets(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	ok, err := redis.String(n.Do(ctx, "SET", "k", "v", "PX", 60000))
	require.NoError(t, err)
	require.Equal(t, "OK", ok)
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)

	_, err = redis.String(n.Do(ctx, "GET", "missing"))
	require.ErrorIs(t, err, redis.ErrNil, "a missing key is a nil reply, not an error")

	// Written where the admin connection sees it.
	v, err = redis.String(s.Do("GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

func TestNode_Eval_runsAScriptWithKeysAndArgs(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	got, err := redis.String(n.Eval(ctx, concatScript, "sk", "value", "tail"))
	require.NoError(t, err)
	require.Equal(t, "value:tail", got)
	v, err := redis.String(s.Do("GET", "sk"))
	require.NoError(t, err)
	require.Equal(t, "value", v)
}

func TestNode_Eval_fallsBackToEvalAfterScriptFlush(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	got, err := redis.String(n.Eval(ctx, concatScript, "sk", "one", "1"))
	require.NoError(t, err)
	require.Equal(t, "one:1", got)
	exists, err := redis.Ints(s.Do("SCRIPT", "EXISTS", concatScript.Hash()))
	require.NoError(t, err)
	require.Equal(t, []int{1}, exists, "the script is cached after the first Eval")

	_, err = s.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	exists, err = redis.Ints(s.Do("SCRIPT", "EXISTS", concatScript.Hash()))
	require.NoError(t, err)
	require.Equal(t, []int{0}, exists)

	got, err = redis.String(n.Eval(ctx, concatScript, "sk", "two", "2"))
	require.NoError(t, err, "NOSCRIPT must not reach the caller")
	require.Equal(t, "two:2", got)
	v, err := redis.String(s.Do("GET", "sk"))
	require.NoError(t, err)
	require.Equal(t, "two", v, "the script ran exactly with the new arguments")
	exists, err = redis.Ints(s.Do("SCRIPT", "EXISTS", concatScript.Hash()))
	require.NoError(t, err)
	require.Equal(t, []int{1}, exists, "EVAL loaded the script again")
}

func TestNode_Eval_reportsAScriptErrorAsAReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	script := pool.NewScript(0, `return redis.error_reply("MYERR boom")`)

	_, err := n.Eval(ctxTimeout(t, waitLimit), script)
	ne := requireNodeError(t, err, s.Addr())
	require.Contains(t, []string{"EVALSHA", "EVAL"}, ne.Op)
	require.True(t, ne.Replied())
	require.False(t, isTimeout(err))
	var re pool.ReplyError
	require.ErrorAs(t, err, &re)
	require.Contains(t, string(re), "MYERR boom")
}

// An error inside an array reply is a ReplyError too, whichever pool
// read it, so that callers need not know redigo.
func TestEval_anErrorInsideAnArrayIsAReplyError(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	script := pool.NewScript(0, `return {1, {redis.error_reply("INNER deep")}, redis.error_reply("OUTER x")}`)
	for name, p := range map[string]pool.Pool{"New": newNode(t, s.Addr()), "FromRedigo": fromRedigo(t, s.Addr(), s.Addr())} {
		reply, err := p.Eval(ctxTimeout(t, waitLimit), script)
		require.NoError(t, err, name)
		require.Equal(t, []any{int64(1), []any{pool.ReplyError("INNER deep")}, pool.ReplyError("OUTER x")}, reply, name)
	}
}

func TestNode_Do_reportsRedisErrorRepliesAsReplied(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr())
	ctx := ctxTimeout(t, waitLimit)

	_, err := n.Do(ctx, "SET", "str", "not-a-number")
	require.NoError(t, err)

	_, err = n.Do(ctx, "HGET", "str", "field")
	ne := requireNodeError(t, err, s.Addr())
	require.Equal(t, "HGET", ne.Op)
	require.True(t, ne.Replied())
	require.False(t, isTimeout(err))
	var re pool.ReplyError
	require.ErrorAs(t, err, &re)
	require.True(t, strings.HasPrefix(string(re), "WRONGTYPE"), "got %q", re)

	_, err = n.Do(ctx, "incr", "str")
	ne = requireNodeError(t, err, s.Addr())
	require.Equal(t, "INCR", ne.Op, "the command is named in upper case")
	require.True(t, ne.Replied())
	require.ErrorAs(t, err, &re)
	require.Contains(t, string(re), "not an integer")

	// An error reply does not spoil the connection.
	v, err := redis.String(n.Do(ctx, "GET", "str"))
	require.NoError(t, err)
	require.Equal(t, "not-a-number", v)
}

func TestNode_Do_isSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithConns(4))
	ctx := ctxTimeout(t, 30*time.Second)

	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				want := fmt.Sprintf("w%d-%d", w, i)
				got, err := redis.String(n.Do(ctx, "ECHO", want))
				if err == nil && got != want {
					err = fmt.Errorf("ECHO %s returned %s", want, got)
				}
				if err == nil {
					_, err = n.Eval(ctx, concatScript, "k"+want, want, "x")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
