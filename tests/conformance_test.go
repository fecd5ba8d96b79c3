package tests

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/pooltest"
	"github.com/quorumlock/redlock/pool"
)

// The conformance suite of node adapters (internal/pooltest), on the two
// pools of package pool: it must pass for them as for any adapter. Their
// own timeouts are longer than the suite's deadlines (3s and more), so that the
// checks of paused nodes see calls end by their deadlines.
func TestConformance_New(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	pooltest.Run(t, pooltest.Factory{Subscriber: true, Reconnector: true, New: func(t testing.TB, addr, password string) pool.Pool {
		opts := []pool.Option{pool.WithIOTimeout(3 * time.Second), pool.WithDialTimeout(3 * time.Second)}
		if password != "" {
			opts = append(opts, pool.WithPassword(password))
		}
		p, err := pool.New(addr, opts...)
		require.NoError(t, err)
		return p
	}})
}

func TestConformance_FromRedigo(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	pooltest.Run(t, pooltest.Factory{Subscriber: true, Reconnector: true, New: func(t testing.TB, addr, password string) pool.Pool {
		return pool.FromRedigo(&redis.Pool{
			MaxIdle: 16,
			DialContext: func(ctx context.Context) (redis.Conn, error) {
				return redis.DialContext(ctx, "tcp", addr, redis.DialPassword(password),
					redis.DialConnectTimeout(5*time.Second), redis.DialReadTimeout(5*time.Second), redis.DialWriteTimeout(5*time.Second))
			},
		}, addr)
	}})
}
