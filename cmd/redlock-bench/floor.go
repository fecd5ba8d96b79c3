package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// floorPhaseMax bounds the floor phase that follows the measurement in
// modes other than latency (-floor).
const floorPhaseMax = time.Second

// floor measures the least a quorum round can cost: over one raw
// connection per node, write the SET to every node before reading any
// reply. It is used by one goroutine.
type floor struct {
	key   string
	ttlMs int64
	conns []redis.Conn
	sent  []map[string]int64 // by node: the commands written, by lower-case name as INFO commandstats names them
	hist  *hist
	err   error // the error that stopped it, if any
}

// dialFloor connects once to every node, with pool.New's default dial
// and write timeouts. Reads are bounded by the node timeout, as the lock
// client's are: a node that does not answer in time (paused, say) ends the
// floor instead of holding up the lock rounds it alternates with.
func dialFloor(addrs []string, key string, ttl, nodeTimeout time.Duration) (*floor, error) {
	f := &floor{key: key, ttlMs: ttl.Milliseconds(), hist: newHist()}
	for _, addr := range addrs {
		c, err := redis.Dial("tcp", addr,
			redis.DialConnectTimeout(poolTimeout),
			redis.DialReadTimeout(nodeTimeout),
			redis.DialWriteTimeout(poolTimeout),
		)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("floor: node %s: %w", addr, err)
		}
		f.conns = append(f.conns, c)
		f.sent = append(f.sent, map[string]int64{})
	}
	return f, nil
}

// close closes the connections.
func (f *floor) close() {
	for _, c := range f.conns {
		c.Close()
	}
}

// round makes one floor round and records the time from sending the first
// SET to reading the last reply. Then it deletes the key the same way,
// unmeasured. After an error the connections are not usable any more.
func (f *floor) round() error {
	token, err := randomHex(16)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := f.all("SET", f.key, token, "NX", "PX", f.ttlMs); err != nil {
		return err
	}
	f.hist.record(time.Since(start))
	return f.all("DEL", f.key)
}

// all sends cmd to every node, then reads every reply.
func (f *floor) all(cmd string, args ...any) error {
	for i, c := range f.conns {
		if err := c.Send(cmd, args...); err != nil {
			return fmt.Errorf("floor: %s: %w", cmd, err)
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("floor: %s: %w", cmd, err)
		}
		f.sent[i][strings.ToLower(cmd)]++
	}
	var errs []error
	for _, c := range f.conns {
		reply, err := c.Receive()
		switch {
		case err != nil:
			errs = append(errs, err)
		case cmd == "SET" && reply != "OK":
			errs = append(errs, fmt.Errorf("key already held (reply %v)", reply))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("floor: %s: %w", cmd, err)
	}
	return nil
}

// sentCounts returns a copy of the commands written so far, by node.
func (f *floor) sentCounts() []map[string]int64 {
	out := make([]map[string]int64, len(f.sent))
	for i, m := range f.sent {
		out[i] = make(map[string]int64, len(m))
		for k, v := range m {
			out[i][k] = v
		}
	}
	return out
}

// phase makes floor rounds back to back for d or until ctx ends.
func (f *floor) phase(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for ctx.Err() == nil {
		if f.err = f.round(); f.err != nil {
			return
		}
	}
}

// randomHex returns n random bytes in hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
