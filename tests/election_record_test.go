package tests

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// recordToken is the token the leader record of the election name names
// on node s; "" without a record.
func recordToken(t testing.TB, e *env, i int, name string) string {
	t.Helper()
	v, err := redis.String(e.nodes[i].Do("HGET", wire.LeaderKey(name), "token"))
	if err == redis.ErrNil {
		return ""
	}
	require.NoError(t, err)
	return v
}

// The leader record reached only a quorum (here it is deleted on nodes 4
// and 5 after the campaign) and node 1 then pauses: the leader's key is
// still held on four nodes, so Leader names the leader (writing the
// record back where the key holds its token) and a new observer delivers
// it. The ttl is long: no extension runs before Leader is asked.
func TestElection_aRecordMissingOnTwoNodesIsRepaired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	leader := e.client()
	l, err := leader.Election(name).Campaign(ctx, "the leader", longTTL)
	require.NoError(t, err)
	want := redlock.Leader{Value: "the leader", Term: l.Fence(), ClientID: leader.ID()}
	// Campaign returns once a quorum took the key and the record: let
	// the rest land first, so that the key is on every node.
	for i := range e.nodes {
		require.Eventually(t, func() bool {
			v, err := redis.String(e.nodes[i].Do("GET", wire.ElectionKey(name)))
			return err == nil && v == l.Token() && recordToken(t, e, i, name) == l.Token()
		}, 5*time.Second, 5*time.Millisecond, "node %d holds the key and the record", i+1)
	}
	for _, i := range []int{3, 4} {
		_, err := e.nodes[i].Do("DEL", wire.LeaderKey(name))
		require.NoError(t, err)
	}
	require.NoError(t, e.nodes[0].Pause())
	t.Cleanup(func() { _ = e.nodes[0].Resume() })

	watcher := fenceClients(e, 1)[0].Election(name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	observed := observe(octx, watcher)

	got, err := watcher.Leader(ctx)
	require.NoError(t, err, "the leader's key is on four nodes, its record on two of them")
	require.Equal(t, want, got)
	for _, i := range []int{3, 4} {
		require.Equal(t, l.Token(), recordToken(t, e, i, name), "node %d's record is written back", i+1)
	}
	require.Eventually(t, func() bool {
		seen := observed.seen()
		return len(seen) == 1 && seen[0] == want
	}, 3*time.Second, 10*time.Millisecond, "a new observer delivers the leader")

	require.NoError(t, e.nodes[0].Resume())
	stop()
	require.Equal(t, []redlock.Leader{want}, observed.all(t))
	require.NoError(t, l.Unlock(ctx))
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, redlock.ErrNoLeader)
}

// The leader's extensions write its record back on every node where the
// key holds its token and the record is missing or names another token;
// a node whose key holds another token is left alone.
func TestElection_anExtensionRewritesAMissingRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	leader := e.client()
	l, err := leader.Election(name).Campaign(ctx, "the leader", 900*time.Millisecond) // extended every 300ms
	require.NoError(t, err)
	_, err = e.nodes[3].Do("DEL", wire.LeaderKey(name))
	require.NoError(t, err)
	_, err = e.nodes[4].Do("HSET", wire.LeaderKey(name), "token", "another token")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return recordToken(t, e, 3, name) == l.Token() && recordToken(t, e, 4, name) == l.Token()
	}, quickly, 10*time.Millisecond, "an extension writes the record back on nodes 4 and 5")

	// Only where the key holds the leader's token: node 5's key is taken
	// from it (the leader still holds four nodes), and its record deleted.
	_, err = e.nodes[4].Do("SET", wire.ElectionKey(name), foreignToken, "PX", foreignTTL.Milliseconds())
	require.NoError(t, err)
	_, err = e.nodes[4].Do("DEL", wire.LeaderKey(name))
	require.NoError(t, err)
	time.Sleep(time.Second) // three extensions
	require.True(t, l.Validity() > 0, "the leader leads on four nodes")
	require.Empty(t, recordToken(t, e, 4, name), "no record where the key holds another token")

	require.NoError(t, e.nodes[0].Pause())
	t.Cleanup(func() { _ = e.nodes[0].Resume() })
	got, err := fenceClients(e, 1)[0].Election(name).Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, redlock.Leader{Value: "the leader", Term: l.Fence(), ClientID: leader.ID()}, got)
	require.NoError(t, e.nodes[0].Resume())
	require.NoError(t, l.Unlock(ctx))
}

// The election key's fence counters and floors are lost on every node
// (here deleted; a restart without persistence does it): the next leader's
// term is lower than the last one observed. The observer delivers that
// leader with its term, and reports the regression once, as an event and
// at Warn.
func TestElection_observeDeliversALeaderWhoseTermWentBack(t *testing.T) {
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 30*time.Second)
	rec := &recorder{}
	var logs syncBuffer
	watcher := e.client(redlock.WithObserver(rec), redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	octx, stop := context.WithCancel(ctx)
	defer stop()
	observed := observe(octx, watcher.Election(name))

	leader := e.client()
	el := leader.Election(name)
	campaign := func(value string) *redlock.Lock {
		t.Helper()
		l, err := el.Campaign(ctx, value, longTTL)
		require.NoError(t, err)
		want := redlock.Leader{Value: value, Term: l.Fence(), ClientID: leader.ID()}
		require.Eventually(t, func() bool {
			seen := observed.seen()
			return len(seen) > 0 && seen[len(seen)-1] == want
		}, 5*time.Second, 5*time.Millisecond, "%+v is observed", want)
		return l
	}
	l := campaign("first")
	require.NoError(t, l.Unlock(ctx))
	l = campaign("second")
	old := l.Fence()
	require.NoError(t, l.Unlock(ctx))
	_, ok := rec.event(redlock.EventTermRegressed)
	require.False(t, ok, "terms went up")

	for _, n := range e.nodes {
		key := wire.ElectionKey(name)
		_, err := n.Do("DEL", wire.FenceKey(key), wire.FloorKey(keyslot.Slot(key)))
		require.NoError(t, err)
	}
	l = campaign("after the loss")
	require.Less(t, l.Fence(), old, "the term went back")
	ev, ok := rec.event(redlock.EventTermRegressed)
	require.True(t, ok, "the regression is reported")
	require.Equal(t, redlock.KindElection, ev.Lock)
	require.Equal(t, name, ev.Key, "the election's name")
	require.ErrorContains(t, ev.Err, fmt.Sprintf("went back from %d to %d", old, l.Fence()))
	require.Equal(t, 1, strings.Count(logs.String(), "election term went back"), logs.String())
	require.NoError(t, l.Unlock(ctx))
	stop()
	observed.all(t)
}
