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
// pools of package pool: it must pass for them as for any adapter.
func TestConformance_New(t *testing.T) {
	pooltest.Run(t, pooltest.Factory{Subscriber: true, New: func(t testing.TB, addr, password string) pool.Pool {
		var opts []pool.Option
		if password != "" {
			opts = append(opts, pool.WithPassword(password))
		}
		p, err := pool.New(addr, opts...)
		require.NoError(t, err)
		return p
	}})
}

func TestConformance_FromRedigo(t *testing.T) {
	pooltest.Run(t, pooltest.Factory{Subscriber: true, New: func(t testing.TB, addr, password string) pool.Pool {
		return pool.FromRedigo(&redis.Pool{
			MaxIdle: 16,
			DialContext: func(ctx context.Context) (redis.Conn, error) {
				return redis.DialContext(ctx, "tcp", addr, redis.DialPassword(password),
					redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
			},
		}, addr)
	}})
}
