// Command compatdriver takes locks in a loop for the test that runs two
// versions of the library side by side on the same nodes
// (tests/compat_test.go). It uses only calls every version since the
// restart marker keeps, so that the same file builds against an earlier
// commit's tree. Each worker locks one of a few keys with TryLock, and
// while it holds it, claims the key on a referee node that is not a lock
// node (SET NX, for the lock's validity): a claim that fails is two
// holders at once. At the end it prints one JSON line: its acquisitions
// per second of the run, its overlaps, and the errors it met, counted.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// report is what the driver prints.
type report struct {
	PerSecond []int          `json:"per_second"`
	Overlaps  []string       `json:"overlaps"`
	Errors    map[string]int `json:"errors"`
}

func main() {
	addrs := flag.String("addrs", "", "the lock nodes, comma-separated")
	referee := flag.String("referee", "", "the referee node")
	keys := flag.Int("keys", 2, "how many keys the workers share")
	workers := flag.Int("workers", 4, "workers")
	run := flag.Duration("time", 10*time.Second, "how long to run")
	maxTTL := flag.Duration("max-ttl", 3*time.Second, "WithRestartSafety")
	ttl := flag.Duration("ttl", time.Second, "the locks' TTL")
	name := flag.String("name", "driver", "this driver's name, in the claims")
	seed := flag.Int64("seed", time.Now().UnixNano(), "the seed of the key choice")
	renew := flag.Duration("renew", time.Second, "how often the workers move to a new Client")
	flag.Parse()
	fmt.Fprintf(os.Stderr, "compatdriver %s: seed %d\n", *name, *seed)
	var cur atomic.Pointer[session]
	cur.Store(newSession(strings.Split(*addrs, ","), *maxTTL))
	// Every renew, the workers move to a new Client, with new pools, as a
	// process that restarts would: its checks read the nodes' markers as
	// the other version left them.
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		var old []*session
		defer func() {
			for _, s := range append(old, cur.Load()) {
				s.close()
			}
		}()
		for {
			select {
			case <-stop:
				return
			case <-time.After(*renew):
			}
			old = append(old, cur.Swap(newSession(strings.Split(*addrs, ","), *maxTTL)))
		}
	}()
	ref := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", *referee) }, MaxIdle: *workers}
	defer ref.Close()
	r := &report{PerSecond: make([]int, int(run.Seconds())+1), Errors: map[string]int{}}
	var mu sync.Mutex
	start := time.Now()
	deadline := start.Add(*run)
	var wg sync.WaitGroup
	for w := range *workers {
		rnd := rand.New(rand.NewSource(*seed + int64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline) && n < 1_000_000; n++ {
				key := fmt.Sprintf("compat:%d", rnd.Intn(*keys))
				got, overlap, err := hold(cur.Load().c, ref, key, *ttl, fmt.Sprintf("%s.%d.%d", *name, w, n))
				mu.Lock()
				switch {
				case overlap != "":
					r.Overlaps = append(r.Overlaps, overlap)
				case err != nil:
					r.Errors[kind(err)]++
				}
				if got {
					if s := int(time.Since(start).Seconds()); s < len(r.PerSecond) {
						r.PerSecond[s]++
					}
				}
				mu.Unlock()
				if !got {
					time.Sleep(time.Duration(1+rnd.Intn(3)) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-renewed
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

// session is a Client and its pools.
type session struct {
	c     *redlock.Client
	pools []interface{ Close() error }
}

// newSession returns a Client over new pools to addrs; it exits the
// process when one cannot be made (a bad address).
func newSession(addrs []string, maxTTL time.Duration) *session {
	s := &session{}
	var pools []pool.Pool
	for _, a := range addrs {
		p, err := pool.New(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		pools, s.pools = append(pools, p), append(s.pools, p)
	}
	c, err := redlock.New(pools, redlock.WithRestartSafety(maxTTL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s.c = c
	return s
}

// close closes the Client, then its pools.
func (s *session) close() {
	_ = s.c.Close()
	for _, p := range s.pools {
		_ = p.Close()
	}
}

// hold takes key, claims it on the referee, holds it a moment and gives
// both up. got says the lock was taken; overlap describes a claim that
// another holder still had.
func hold(c *redlock.Client, ref *redis.Pool, key string, ttl time.Duration, id string) (got bool, overlap string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.TryLock(ctx, key, ttl)
	if err != nil {
		return false, "", err
	}
	defer func() { _ = l.Unlock(ctx) }()
	valid := time.Until(l.Until())
	if valid <= 0 {
		return true, "", nil
	}
	conn := ref.Get()
	defer conn.Close()
	ok, err := redis.String(conn.Do("SET", "claim:"+key, id, "NX", "PX", valid.Milliseconds()+1))
	if err == redis.ErrNil {
		other, _ := redis.String(conn.Do("GET", "claim:"+key))
		return true, fmt.Sprintf("%s: %s took it while %s held it", key, id, other), nil
	}
	if err != nil || ok != "OK" {
		return true, "", fmt.Errorf("referee: %v", err)
	}
	time.Sleep(time.Millisecond)
	_, err = conn.Do("EVAL", `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`, 1, "claim:"+key, id)
	return true, "", err
}

// kind names err's sort, for the count of errors.
func kind(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "restarted"):
		return "excluded"
	case strings.Contains(s, "not checked"):
		return "unchecked"
	case strings.Contains(s, "not acquired"):
		return "busy"
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}
