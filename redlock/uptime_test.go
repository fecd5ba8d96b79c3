package redlock

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// Redis's uptime_in_seconds is the present second less the start second:
// a node started at 9.9s and asked at 10.0s says 1. Restart safety must
// count from the least uptime the report allows, or it counts a node that
// restarted empty up to a second before the maximum TTL has passed.
func TestParseFacts_uptimeIsTheLeastTheReportAllows(t *testing.T) {
	for up, want := range map[int64]time.Duration{0: 0, 1: 0, 2: time.Second, 60: 59 * time.Second} {
		f, err := parseFacts([]any{[]byte("0123abcd"), up, []byte("0123abcd"), []byte("feed01"), int64(-1), int64(0), []byte(""), int64(1), int64(0)})
		require.NoError(t, err)
		require.Equal(t, want, f.uptime, "reported %ds", up)
	}
}

// markedReply is the restart check's answer of a node marked with its own
// run id and lineage, up for 100s.
var markedReply = []any{[]byte("0123abcd"), int64(100), []byte("0123abcd"), []byte("feed01"), int64(-1), int64(0), []byte(""), int64(1), int64(0)}

// brokenOncePool answers the restart check like a node, except that its
// first call fails as a connection that broke does (no reply from the
// node): the pool's idle connection died with the process it talked to.
type brokenOncePool struct {
	calls atomic.Int32
}

func (p *brokenOncePool) Addr() string                                    { return "broken-once:1" }
func (p *brokenOncePool) Do(context.Context, string, ...any) (any, error) { return nil, nil }
func (p *brokenOncePool) Eval(context.Context, *pool.Script, ...any) (any, error) {
	if p.calls.Add(1) == 1 {
		return nil, &pool.NodeError{Addr: p.Addr(), Op: "EVALSHA", Err: io.EOF}
	}
	return markedReply, nil
}

// A restart check that fails on a broken connection asks once more: the
// check that follows a node's restart goes out first on the connection
// the restart broke, and a check that gave up there would leave the
// node's new process unchecked, its hand-offs uncounted, until something
// else asked.
func TestCheckNode_asksAgainAfterABrokenConnection(t *testing.T) {
	p := &brokenOncePool{}
	c, err := New([]pool.Pool{p})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	f, err := c.checkNode(context.Background(), 0, "", "", "", time.Second)
	require.NoError(t, err)
	require.Equal(t, "0123abcd", f.runID)
	require.Equal(t, int32(2), p.calls.Load())
}

// dialingPool answers the restart check like a node whose pool opens its
// first connection for the call, as a fresh pool.New does: its
// generation goes from 0 to 1 during the check, or, with another,
// from 1 to 2.
type dialingPool struct {
	brokenOncePool
	gen atomic.Uint64
	by  uint64 // how many connections each call opens
}

func (p *dialingPool) Generation() uint64 { return p.gen.Load() }
func (p *dialingPool) Eval(context.Context, *pool.Script, ...any) (any, error) {
	p.calls.Add(1)
	p.gen.Add(p.by)
	return markedReply, nil
}

// A check on a pool that had no connection and opened exactly one ran on
// it: its answer vouches for that connection (one round trip, not two).
// A check under which a pool that had a connection opened another, or
// that opened two, is not asked again (a grant that went out beside it
// may have opened one): its answer names the process, and vouches for no
// connection (gen 0), so that only grants that prove their dataset count.
func TestCheckNode_aFreshPoolsFirstConnectionIsTheChecks(t *testing.T) {
	for _, tc := range []struct {
		from, by uint64
		wantGen  uint64
	}{{0, 1, 1}, {1, 1, 0}, {0, 2, 0}} {
		p := &dialingPool{by: tc.by}
		p.gen.Store(tc.from)
		c, err := New([]pool.Pool{p})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		f, err := c.checkNode(context.Background(), 0, "", "", "", time.Second)
		require.NoError(t, err)
		require.Equal(t, int32(1), p.calls.Load(), "generation %d, %d opened per call", tc.from, tc.by)
		require.Equal(t, tc.wantGen, f.gen, "generation %d, %d opened per call", tc.from, tc.by)
	}
}
