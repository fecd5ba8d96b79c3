package pool

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// Requests are recycled: what they keep from one use to the next.

func TestRequest_recycledKeepsNoneOfTheCallersArguments(t *testing.T) {
	script := NewScript(1, "return 1")
	arg := &struct{ big [1 << 10]byte }{}
	req := (&Node{}).newScriptRequest(script, []any{"k", arg}, false)
	require.Equal(t, []any{script.Hash(), 1, "k", arg}, req.args)
	req.toEval()
	require.Equal(t, "EVAL", req.cmd)
	require.Equal(t, []any{"return 1", 1, "k", arg}, req.args)

	buf := req.buf
	req.reset()
	require.Equal(t, []any{nil, nil, nil, nil}, buf[:4], "the buffer still refers to the caller's arguments")
	require.Nil(t, req.args)
	require.Nil(t, req.script)
	require.Empty(t, req.buf)
}

func TestRequest_aLargeArgumentBufferIsNotKept(t *testing.T) {
	req := (&Node{}).newScriptRequest(NewScript(0, "return 1"), make([]any, 2*maxKeptArgs), false)
	req.reset()
	require.Nil(t, req.buf)
}

// A timer that fired during an earlier use of the request may leave a
// tick in its channel (timers before Go 1.23, which this module's go
// version selects): it must not end the next wait early.
func TestRequest_aStaleTickOfTheTimerDoesNotEndTheWait(t *testing.T) {
	n := &Node{}
	req := n.getRequest()
	req.bound(time.Millisecond)
	time.Sleep(20 * time.Millisecond) // fired; nobody received
	req.reset()                       // as putRequest does

	req.bound(time.Hour)
	defer n.putRequest(req)
	deadline := time.After(50 * time.Millisecond)
	for {
		select {
		case <-req.expiry():
			require.False(t, req.expired(), "a stale tick ended a one-hour wait")
		case <-deadline:
			return
		}
	}
}

func TestRequest_anUnarmedRequestNeverExpires(t *testing.T) {
	n := &Node{}
	req := n.getRequest()
	defer n.putRequest(req)
	require.Nil(t, req.expiry())
}

func TestNewScript_boxesAScriptsArgumentsOnce(t *testing.T) {
	s := NewScript(2, "return 2")
	require.Equal(t, []any{s.Hash(), 2}, s.evalsha)
	require.Equal(t, []any{"return 2", 2}, s.eval)
	require.Equal(t, "return 2", s.Source())
	require.Equal(t, redis.NewScript(2, "return 2").Hash(), s.Hash(), "the SHA1 EVALSHA names")

	counted := NewScript(-1, "return 3")
	require.Len(t, counted.evalsha, 1, "the caller gives the key count")
	require.Len(t, counted.eval, 1)
}
