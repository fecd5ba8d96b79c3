package tests

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// The benchmarks run lock+unlock rounds on 5 real nodes, once per pool
// kind: "pipelined" is pool.New, "plain" is one redigo connection per call
// through pool.FromRedigo, the way most Redis lock libraries work.
//
//	go test -run '^$' -bench . -benchmem ./tests/

func benchPools(b *testing.B, kind string, addrs []string) []pool.Pool {
	b.Helper()
	pools := make([]pool.Pool, len(addrs))
	for i, addr := range addrs {
		switch kind {
		case "pipelined":
			p, err := pool.New(addr)
			if err != nil {
				b.Fatal(err)
			}
			pools[i] = p
		case "plain":
			pools[i] = pool.FromRedigo(&redis.Pool{
				MaxIdle: 256,
				DialContext: func(ctx context.Context) (redis.Conn, error) {
					// pool.New's default timeouts: 1s each.
					return redis.DialContext(ctx, "tcp", addr,
						redis.DialConnectTimeout(time.Second),
						redis.DialReadTimeout(time.Second),
						redis.DialWriteTimeout(time.Second))
				},
			}, addr)
		}
	}
	b.Cleanup(func() {
		for _, p := range pools {
			_ = p.(io.Closer).Close() // both kinds have Close; pool.Pool leaves it out
		}
	})
	return pools
}

func benchClient(b *testing.B, kind string, addrs []string, opts ...redlock.Option) *redlock.Client {
	c, err := redlock.New(benchPools(b, kind, addrs), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func lockUnlock(b *testing.B, c *redlock.Client, key string, opts ...redlock.LockOption) {
	ctx := context.Background()
	l, err := c.Lock(ctx, key, 10*time.Second, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkLockUnlock(b *testing.B) {
	cluster := redistest.StartT(b, 5)
	for _, kind := range []string{"pipelined", "plain"} {
		c := benchClient(b, kind, cluster.Addrs())
		b.Run(kind+"/uncontended", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				lockUnlock(b, c, "bench:uncontended")
			}
		})
		observed := benchClient(b, kind, cluster.Addrs(), redlock.WithObserver(discard{}))
		b.Run(kind+"/uncontended-observed", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				lockUnlock(b, observed, "bench:uncontended-observed")
			}
		})
		b.Run(kind+"/uncontended-fenced", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				lockUnlock(b, c, "bench:uncontended-fenced", redlock.WithFencing())
			}
		})
		b.Run(kind+"/parallel-keys", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16) // 32 workers on 2 cores
			var worker atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:parallel:%d", worker.Add(1))
				for pb.Next() {
					lockUnlock(b, c, key)
				}
			})
		})
		b.Run(kind+"/parallel-keys-fenced", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			var worker atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:parallel-fenced:%d", worker.Add(1))
				for pb.Next() {
					lockUnlock(b, c, key, redlock.WithFencing())
				}
			})
		})
		b.Run(kind+"/hot-key", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4) // 8 workers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lockUnlock(b, c, "bench:hot")
				}
			})
		})
	}
}

// discard is an Observer that does nothing: what observing costs the
// library itself.
type discard struct{}

func (discard) Round(*redlock.RoundInfo) {}
func (discard) Event(redlock.Event)      {}

// BenchmarkSemaphore compares an uncontended permit (TryAcquire+Unlock)
// with an uncontended lock (TryLock+Unlock) on the same nodes, for a few
// sizes: the permit's script looks at the slots on each node.
//
//	go test -run '^$' -bench Semaphore -benchmem ./tests/
func BenchmarkSemaphore(b *testing.B) {
	cluster := redistest.StartT(b, 5)
	c := benchClient(b, "pipelined", cluster.Addrs())
	ctx := context.Background()
	b.Run("mutex", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			l, err := c.TryLock(ctx, "bench:sem-mutex", 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, permits := range []int{1, 8, 64} {
		s := c.Semaphore(fmt.Sprintf("bench:sem-%d", permits), permits)
		b.Run(fmt.Sprintf("permits-%d", permits), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				l, err := s.TryAcquire(ctx, 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
