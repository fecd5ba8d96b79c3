package pool_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// New's validation of its address and options, and NodeError.

func TestNew_rejectsAnAddressThatIsNotHostPort(t *testing.T) {
	for _, addr := range []string{"nohost", "", "host:", ":", "a:b:c"} {
		n, err := pool.New(addr)
		require.Error(t, err, "New(%q)", addr)
		require.Nil(t, n)
		require.Contains(t, err.Error(), strconv.Quote(addr), "the error must quote the address")
	}
}

func TestNew_rejectsOutOfRangeOptionsNamingTheValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  pool.Option
		want string // the value as the message must show it
	}{
		{"zero dial timeout", pool.WithDialTimeout(0), "0s"},
		{"negative dial timeout", pool.WithDialTimeout(-time.Second), "-1s"},
		{"zero I/O timeout", pool.WithIOTimeout(0), "0s"},
		{"negative I/O timeout", pool.WithIOTimeout(-3 * time.Millisecond), "-3ms"},
		{"zero connections", pool.WithConns(0), "0"},
		{"negative connections", pool.WithConns(-7), "-7"},
		{"too many connections", pool.WithConns(65), "65"},
		{"negative db", pool.WithDB(-4), "-4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := pool.New("127.0.0.1:6379", tc.opt)
			require.Error(t, err)
			require.Nil(t, n)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNew_rejectsAUsernameWithoutAPassword(t *testing.T) {
	_, err := pool.New("127.0.0.1:6379", pool.WithUser("bob", ""))
	require.Error(t, err)
	require.Contains(t, err.Error(), `"bob"`)
}

func TestNew_acceptsTheEdgesOfEachRange(t *testing.T) {
	for _, opts := range [][]pool.Option{
		{pool.WithDB(0), pool.WithConns(1)},
		{pool.WithConns(64), pool.WithDialTimeout(time.Nanosecond), pool.WithIOTimeout(time.Nanosecond)},
	} {
		n, err := pool.New("127.0.0.1:6379", opts...)
		require.NoError(t, err)
		require.NoError(t, n.Close())
	}

	// WithPassword after WithUser drops the user, so this is valid.
	n, err := pool.New("127.0.0.1:6379", pool.WithUser("bob", ""), pool.WithPassword("pw"))
	require.NoError(t, err)
	require.NoError(t, n.Close())
}

func TestNew_doesNotConnectUntilTheFirstCall(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t)) // nothing listens there
	n := newNode(t, addr)
	require.Equal(t, addr, n.Addr())

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	ne := requireNodeError(t, err, addr)
	require.Equal(t, "dial", ne.Op, "NodeError.Op is documented as \"dial\" while connecting: %v", err)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.False(t, ne.Replied())
}

func TestNodeError_Error_namesTheNodeTheCommandAndTheCause(t *testing.T) {
	cause := errors.New("boom")
	ne := &pool.NodeError{Addr: "node-a:6379", Op: "SET", Err: cause}
	require.Contains(t, ne.Error(), "node-a:6379")
	require.Contains(t, ne.Error(), "SET")
	require.Contains(t, ne.Error(), "boom")
	require.Same(t, cause, errors.Unwrap(ne))
	require.ErrorIs(t, ne, cause)
}

func TestNodeError_Replied_recognisesRedisErrorReplies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{pool.ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{fmt.Errorf("wrapped: %w", pool.ReplyError("READONLY")), true},
		{context.DeadlineExceeded, false},
		{errors.New("ERR looks like a reply but is not"), false},
	} {
		ne := &pool.NodeError{Addr: "a:1", Op: "GET", Err: tc.err}
		require.Equal(t, tc.want, ne.Replied(), "Replied() for %v", tc.err)
	}
}
