package faults

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Store is the resource the locks protect, kept on a Redis node of its own
// that no fault touches, so that worker subprocesses share it. Per lock
// key it has a plain counter (read, wait, write it plus one: a lost update
// shows as a counter below the number of increments) and a fenced
// register that refuses a fence below the highest it accepted. Its
// methods are safe for concurrent use.
type Store struct {
	pool *redis.Pool
}

// storeTimeout bounds each Store command.
const storeTimeout = 2 * time.Second

// NewStore returns a Store on the Redis node at addr (on 127.0.0.1).
func NewStore(addr string) *Store {
	return &Store{pool: &redis.Pool{
		MaxIdle:     16,
		IdleTimeout: time.Minute,
		Dial: func() (redis.Conn, error) {
			return redis.Dial("tcp", addr, redis.DialConnectTimeout(storeTimeout),
				redis.DialReadTimeout(storeTimeout), redis.DialWriteTimeout(storeTimeout))
		},
	}}
}

// Close closes the Store's connections.
func (s *Store) Close() error { return s.pool.Close() }

func counterKey(key string) string  { return "faults:counter:" + key }
func registerKey(key string) string { return "faults:fenced:" + key }

func (s *Store) do(cmd string, args ...any) (any, error) {
	conn := s.pool.Get()
	defer conn.Close()
	return conn.Do(cmd, args...)
}

// Read returns the counter of key (0 when unset).
func (s *Store) Read(key string) (int64, error) {
	n, err := redis.Int64(s.do("GET", counterKey(key)))
	if errors.Is(err, redis.ErrNil) {
		return 0, nil
	}
	return n, err
}

// Write sets the counter of key to v.
func (s *Store) Write(key string, v int64) error {
	_, err := s.do("SET", counterKey(key), v)
	return err
}

// fencedWrite is the register's write, atomic on the node. KEYS[1] the
// register (a hash: fence, start, value, writes, stale); ARGV[1] the
// fence, ARGV[2] the writer's acquisition time in microseconds, ARGV[3]
// the value. A fence below the highest accepted is refused (0). An
// accepted write (1) from a holder that acquired before the holder of an
// earlier accepted write is stale (2): it overwrote a newer holder's value.
var fencedWrite = redis.NewScript(1, `
local hi = tonumber(redis.call("HGET", KEYS[1], "fence") or "0")
local newest = tonumber(redis.call("HGET", KEYS[1], "start") or "0")
local f, at = tonumber(ARGV[1]), tonumber(ARGV[2])
if f < hi then
	redis.call("HINCRBY", KEYS[1], "refused", 1)
	return 0
end
redis.call("HSET", KEYS[1], "fence", ARGV[1], "value", ARGV[3])
redis.call("HINCRBY", KEYS[1], "writes", 1)
if at < newest then
	redis.call("HINCRBY", KEYS[1], "stale", 1)
	return 2
end
redis.call("HSET", KEYS[1], "start", ARGV[2])
return 1`)

// WriteResult is what the fenced register did with a write.
type WriteResult int

const (
	// Refused: the fence was below the highest accepted.
	Refused WriteResult = iota
	// Accepted: the write was taken.
	Accepted
	// AcceptedStale: the write was taken although a holder that acquired
	// later had already written: the register's fences did not follow the
	// order of the acquisitions.
	AcceptedStale
)

// FencedWrite writes v to key's register with the lock's fence and the
// Mono time its acquisition returned.
func (s *Store) FencedWrite(key string, fence uint64, start time.Duration, v int64) (WriteResult, error) {
	conn := s.pool.Get()
	defer conn.Close()
	n, err := redis.Int(fencedWrite.Do(conn, registerKey(key), fence, start.Microseconds(), v))
	if err != nil {
		return Refused, err
	}
	if n < 0 || n > 2 {
		return Refused, fmt.Errorf("faults: fenced write: unexpected reply %d", n)
	}
	return WriteResult(n), nil
}

// Register is the state of a key's fenced register.
type Register struct {
	Fence   uint64 // highest fence accepted
	Writes  int64  // writes accepted
	Refused int64  // writes refused
	Stale   int64  // accepted writes that were stale
}

// Register returns the state of key's fenced register.
func (s *Store) Register(key string) (Register, error) {
	vs, err := redis.Values(s.do("HMGET", registerKey(key), "fence", "writes", "refused", "stale"))
	if err != nil {
		return Register{}, err
	}
	ns := make([]int64, len(vs))
	for i, v := range vs {
		if v == nil {
			continue // the field was never set
		}
		if ns[i], err = redis.Int64(v, nil); err != nil {
			return Register{}, err
		}
	}
	return Register{Fence: uint64(ns[0]), Writes: ns[1], Refused: ns[2], Stale: ns[3]}, nil
}
