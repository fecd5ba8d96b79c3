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
		f, err := parseFacts([]any{[]byte("0123abcd"), up, []byte("0123abcd")})
		require.NoError(t, err)
		require.Equal(t, want, f.uptime, "reported %ds", up)
	}
}

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
	return []any{[]byte("0123abcd"), int64(100), []byte("0123abcd")}, nil
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
	f, err := c.checkNode(context.Background(), 0, "")
	require.NoError(t, err)
	require.Equal(t, "0123abcd", f.runID)
	require.Equal(t, int32(2), p.calls.Load())
}
