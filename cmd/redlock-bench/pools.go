package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/pool"
)

// plainIdleExtra is how many idle connections a plain pool keeps per node
// beyond two per worker. A worker can use two connections to a node at
// once: its current call, and a call from its previous round that is still
// running in the background after the round was decided (a straggler, or
// the release of a failed acquisition). With fewer idle connections the
// plain pool closes and redials connections all the time, which measures
// dialling rather than one connection per call.
const plainIdleExtra = 8

// newPools returns one pool per node of the given kind. On error it
// closes those it made.
func newPools(kind string, addrs []string, workers int) ([]pool.Pool, error) {
	pools := make([]pool.Pool, 0, len(addrs))
	for _, addr := range addrs {
		var p pool.Pool
		switch kind {
		case poolPipelined:
			n, err := pool.New(addr)
			if err != nil {
				closePools(pools)
				return nil, err
			}
			p = n
		case poolPlain:
			p = pool.FromRedigo(plainPool(addr, workers), addr)
		default:
			closePools(pools)
			return nil, fmt.Errorf("unknown pool kind %q", kind)
		}
		pools = append(pools, p)
	}
	return pools, nil
}

// plainPool is a redigo pool with pool.New's default timeouts: one
// connection per call, kept idle for the next.
func plainPool(addr string, workers int) *redis.Pool {
	return &redis.Pool{
		MaxIdle:     2*workers + plainIdleExtra,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialConnectTimeout(pool.DefaultDialTimeout),
				redis.DialReadTimeout(pool.DefaultReadTimeout),
				redis.DialWriteTimeout(pool.DefaultWriteTimeout),
			)
		},
	}
}

// closePools closes every pool.
func closePools(pools []pool.Pool) {
	for _, p := range pools {
		p.Close()
	}
}
