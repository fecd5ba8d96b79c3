package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	redis9 "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/goredis"
	"github.com/quorumlock/redlock/pool/rueidispool"
	"github.com/quorumlock/redlock/redlock"
)

// plainIdleExtra is how many idle connections a plain pool keeps per node
// beyond two per worker. A worker can use two connections to a node at
// once: its current call, and a call from its previous round that is still
// running in the background after the round was decided (a straggler, or
// the release of a failed acquisition). With fewer idle connections the
// plain pool closes and redials connections all the time, which measures
// dialling rather than one connection per call.
const plainIdleExtra = 8

// poolTimeout is pool.New's default dial and I/O timeout, which the
// redigo connections of the plain pool and of the floor get too.
const poolTimeout = time.Second

// newPools returns one pool per node of the given kind, for a Client
// that serves the given number of workers. On error it closes those it
// made.
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
		case poolGoredis:
			c := redis9.NewClient(&redis9.Options{Addr: addr, PoolSize: 2*workers + plainIdleExtra,
				DialTimeout: poolTimeout, ReadTimeout: poolTimeout, WriteTimeout: poolTimeout,
				ContextTimeoutEnabled: true})
			gp := goredis.New(c)
			p = ownedReconnector{ownedNode{Pool: gp, Subscriber: gp.(pool.Subscriber), client: c}, gp.(pool.Reconnector)}
		case poolRueidis:
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
				Dialer: net.Dialer{Timeout: poolTimeout}, ConnWriteTimeout: poolTimeout})
			if err != nil {
				closePools(pools)
				return nil, fmt.Errorf("rueidis client for %s: %w", addr, err)
			}
			rp := rueidispool.New(c)
			p = ownedNode{Pool: rp, Subscriber: rp.(pool.Subscriber), client: closer(c.Close)}
		default:
			closePools(pools)
			return nil, fmt.Errorf("unknown pool kind %q", kind)
		}
		pools = append(pools, p)
	}
	return pools, nil
}

// ownedNode is an adapter's node whose client the tool made: closing the
// node closes the client too (an adapter leaves it open). It keeps the
// adapter's optional interfaces: ownedReconnector for one that has
// pool.Reconnector (go-redis; not rueidis).
type ownedNode struct {
	pool.Pool
	pool.Subscriber
	client interface{ Close() error }
}

type ownedReconnector struct {
	ownedNode
	pool.Reconnector
}

func (o ownedNode) Close() error {
	return errors.Join(closePool(o.Pool), o.client.Close())
}

// closer turns a Close without a result into one with.
type closer func()

func (c closer) Close() error {
	c()
	return nil
}

// plainPool is a redigo pool with pool.New's default timeouts: one
// connection per call, kept idle for the next.
func plainPool(addr string, workers int) *redis.Pool {
	return &redis.Pool{
		MaxIdle:     2*workers + plainIdleExtra,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialConnectTimeout(poolTimeout),
				redis.DialReadTimeout(poolTimeout),
				redis.DialWriteTimeout(poolTimeout),
			)
		},
	}
}

// closePools closes every pool.
func closePools(pools []pool.Pool) {
	for _, p := range pools {
		closePool(p)
	}
}

// closePool closes p. Every pool the tool makes has a Close method, which
// pool.Pool leaves out (a redlock Client never closes its pools).
func closePool(p pool.Pool) error {
	if c, ok := p.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// locker is what a worker locks with: a redlock Client, or the polling
// client.
type locker interface {
	// Lock takes key for ttl, retrying until it holds it or ctx ends.
	Lock(ctx context.Context, key string, ttl time.Duration) (heldLock, error)
	// Close ends the client's use of its pools; it may be called more
	// than once.
	Close() error
}

// heldLock is a lock a locker holds.
type heldLock interface {
	Unlock(ctx context.Context) error
	Token() string // the value of the lock's key on the nodes
}

// redlockClient is a redlock Client as a locker.
type redlockClient struct{ c *redlock.Client }

func (r *redlockClient) Lock(ctx context.Context, key string, ttl time.Duration) (heldLock, error) {
	l, err := r.c.Lock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (r *redlockClient) Close() error { return r.c.Close() }

// clientSet is the Clients of one run, each on pools of its own: its own
// connections to every node, as a separate process would have.
type clientSet struct {
	clients []locker
	pools   [][]pool.Pool // pools[i] are clients[i]'s; nil for polling clients, which own theirs
	polling []*pollClient // the polling clients, also in clients
}

// newClients makes cfg.clients Clients on pools of the given kind, sized
// for the workers each one serves. On error it closes those it made.
func newClients(cfg config, kind string, ns *nodes) (*clientSet, error) {
	s := &clientSet{}
	opts := clientOptions(cfg, ns)
	for range cfg.clients {
		if kind == poolPolling {
			c := newPollClient(ns.addrs, cfg.workersPerClient())
			s.clients, s.pools = append(s.clients, c), append(s.pools, nil)
			s.polling = append(s.polling, c)
			continue
		}
		pools, err := newPools(kind, ns.addrs, cfg.workersPerClient())
		if err != nil {
			s.close()
			return nil, err
		}
		c, err := redlock.New(pools, opts...)
		if err != nil {
			closePools(pools)
			s.close()
			return nil, err
		}
		s.clients = append(s.clients, &redlockClient{c})
		s.pools = append(s.pools, pools)
	}
	return s, nil
}

// clientOptions are the options of the run's redlock Clients.
func clientOptions(cfg config, ns *nodes) []redlock.Option {
	return append([]redlock.Option{redlock.WithNodeTimeout(cfg.nodeTimeout)}, ns.clientOpts...)
}

// forWorker returns worker i's Client: the workers are dealt round-robin.
func (s *clientSet) forWorker(i int) locker {
	return s.clients[i%len(s.clients)]
}

// pollStats sums the polling clients' counters.
func (s *clientSet) pollStats() pollStats {
	var sum pollStats
	for _, c := range s.polling {
		p := c.snapshot()
		sum.attempts += p.attempts
		sum.acquisitions += p.acquisitions
		sum.overTries += p.overTries
		sum.maxAttempts = max(sum.maxAttempts, p.maxAttempts)
	}
	return sum
}

// closeClients closes every Client, which waits for the commands they
// still run in the background; the Clients close at once, so that the
// wait is the longest one's rather than their sum. It may be called more
// than once.
func (s *clientSet) closeClients() {
	var wg sync.WaitGroup
	for _, c := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
}

// close closes every Client, then every pool. Clients go first: Close
// waits for background commands, which need their pools.
func (s *clientSet) close() {
	s.closeClients()
	for _, pools := range s.pools {
		closePools(pools)
	}
}
