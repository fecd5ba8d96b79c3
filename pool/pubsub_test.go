package pool_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// Publish/subscribe connections (Subscriber): events arrive in order from
// one goroutine, and PubSubClosed ends every connection.

// events records what a pub/sub connection delivers.
type events struct{ ch chan pool.PubSubEvent }

func newEvents() *events { return &events{ch: make(chan pool.PubSubEvent, 64)} }

func (e *events) on(ev pool.PubSubEvent) { e.ch <- ev }

func (e *events) next(t *testing.T) pool.PubSubEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(waitLimit):
		t.Fatal("no pub/sub event")
		return pool.PubSubEvent{}
	}
}

// subscribers are the two Subscribers of the package on one node.
func subscribers(t *testing.T, addr string) map[string]pool.Subscriber {
	return map[string]pool.Subscriber{
		"New":        newNode(t, addr),
		"FromRedigo": fromRedigo(t, addr, addr).(pool.Subscriber),
	}
}

func TestDialPubSub_deliversConfirmationsMessagesAndPongsInOrder(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	for name, sub := range subscribers(t, s.Addr()) {
		t.Run(name, func(t *testing.T) {
			evs := newEvents()
			c, err := sub.DialPubSub(ctxTimeout(t, waitLimit), evs.on)
			require.NoError(t, err)
			require.NoError(t, c.Ping())
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubPong}, evs.next(t), "PONG before anything is subscribed")
			require.NoError(t, c.Subscribe("a", "b"))
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubSubscribed, Channel: "a"}, evs.next(t))
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubSubscribed, Channel: "b"}, evs.next(t))

			_, err = s.Do("PUBLISH", "b", "hello")
			require.NoError(t, err)
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: "b", Data: "hello"}, evs.next(t))
			require.NoError(t, c.Ping())
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubPong}, evs.next(t), "the array PONG of a subscribed connection")

			require.NoError(t, c.Unsubscribe("a"))
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubUnsubscribed, Channel: "a"}, evs.next(t))
			require.NoError(t, c.Close())
			require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubClosed}, evs.next(t), "Close ends it without an error")
			require.NoError(t, c.Close(), "a second Close is harmless")
			select {
			case ev := <-evs.ch:
				t.Fatalf("an event after PubSubClosed: %+v", ev)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

func TestDialPubSub_aKilledNodeEndsTheConnectionWithANodeError(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	sub := newNode(t, s.Addr())
	evs := newEvents()
	c, err := sub.DialPubSub(ctxTimeout(t, waitLimit), evs.on)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Subscribe("a"))
	require.Equal(t, pool.PubSubSubscribed, evs.next(t).Kind)

	require.NoError(t, s.Kill())
	ev := evs.next(t)
	require.Equal(t, pool.PubSubClosed, ev.Kind)
	requireNodeError(t, ev.Err, s.Addr())
}

func TestDialPubSub_aRefusedSubscribeEndsTheConnectionWithTheReply(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	_, err := s.Do("ACL", "SETUSER", "nosub", "on", ">nosub-pw", "~*", "&allowed", "+@all")
	require.NoError(t, err)
	sub := newNode(t, s.Addr(), pool.WithUser("nosub", "nosub-pw"))
	evs := newEvents()
	c, err := sub.DialPubSub(ctxTimeout(t, waitLimit), evs.on)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Subscribe("forbidden"))
	ev := evs.next(t)
	require.Equal(t, pool.PubSubClosed, ev.Kind)
	ne := requireNodeError(t, ev.Err, s.Addr())
	require.True(t, ne.Replied(), "the node refused: %v", ev.Err)
	var re pool.ReplyError
	require.ErrorAs(t, ev.Err, &re)
	require.Contains(t, string(re), "NOPERM")
	require.NotContains(t, ev.Err.Error(), "nosub-pw")
}

// Close may be called from the goroutine that delivers the events.
func TestDialPubSub_closeFromTheCallbackDoesNotBlock(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	sub := newNode(t, s.Addr())
	evs := newEvents()
	var c pool.PubSubConn
	ready := make(chan struct{})
	c, err := sub.DialPubSub(ctxTimeout(t, waitLimit), func(ev pool.PubSubEvent) {
		<-ready
		if ev.Kind == pool.PubSubPong {
			_ = c.Close()
		}
		evs.on(ev)
	})
	require.NoError(t, err)
	close(ready)
	require.NoError(t, c.Ping())
	require.Equal(t, pool.PubSubPong, evs.next(t).Kind)
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubClosed}, evs.next(t))
}
