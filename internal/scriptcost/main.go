// Command scriptcost replays, against one node, what a hot key costs the
// node per acquisition, so that the node's own work can be counted by a
// tool that counts instructions (valgrind's callgrind; make script-cost):
//
//   - queue: the library's fair hand-off. Per cycle, the holder's release
//     (release.lua) hands the key to the longest of -waiters waiting
//     calls, and the releaser's next Lock call queues with its first
//     round, a transaction (wire.QueueTx).
//   - polling: a polling lock's cycle: SET NX PX, then its release script
//     (GET, DEL).
//
// Each cycle ends with a GET of the key, which checks the queue's
// hand-off and costs both kinds alike. The difference between two runs
// of different -cycles, divided by the difference in cycles, is the cost
// of one cycle without the start-up.
package main

import (
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/wire"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "the node")
	kind := flag.String("kind", "queue", `"queue" or "polling"`)
	cycles := flag.Int("cycles", 1000, "how many acquisitions")
	waiters := flag.Int("waiters", 8, "queue: how many calls take turns")
	flag.Parse()
	c, err := redis.Dial("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	switch *kind {
	case "queue":
		err = queue(c, *cycles, *waiters)
	case "polling":
		err = polling(c, *cycles)
	default:
		err = fmt.Errorf("-kind %q: want queue or polling", *kind)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// queue runs the hand-off cycle: each waiting call is new (its id
// "c<i>.<n>"), queued by the first round of a waiting Lock, the
// transaction (wire.QueueTx); its hand-off token is "h-<id>".
func queue(c redis.Conn, cycles, waiters int) error {
	release := redis.NewScript(2, wire.Release.Source())
	q := wire.NewQueue(50, 150, 1000) // window, slack, refresh (ms)
	const key = "hot"
	ids := make([]string, waiters)
	calls := make([]int, waiters)
	handoff := func(i int) string { return "h-" + ids[i] }
	wait := func(i int) error {
		calls[i]++
		ids[i] = fmt.Sprintf("c%d.%d", i, calls[i])
		w := wire.Waiter{ID: ids[i], Since: time.Now().UnixMicro(), Round: 1, Handoff: handoff(i)}
		if err := c.Send("MULTI"); err != nil {
			return err
		}
		for _, cmd := range q.QueueTx(key, 10000, w) {
			if err := c.Send(cmd[0].(string), cmd[1:]...); err != nil {
				return err
			}
		}
		reply, err := c.Do("EXEC")
		if err == nil {
			_, err = wire.ParseQueueTx(reply)
		}
		return err
	}
	for i := 0; i < waiters; i++ {
		if err := wait(i); err != nil {
			return err
		}
	}
	if _, err := c.Do("SET", key, handoff(0)+"/h1", "PX", 10000); err != nil {
		return err
	}
	if _, err := c.Do("ZREM", wire.WaitersKey(key), ids[0]); err != nil {
		return err
	}
	for k := range cycles {
		h := k % waiters
		if r, err := release.Do(c, q.ReleaseArgs(key, handoff(h)+"/h1", ids[h], handoff(h))...); err != nil || r != int64(1) {
			return fmt.Errorf("cycle %d: release: %v %v", k, r, err)
		}
		if err := wait(h); err != nil {
			return err
		}
		next := handoff((h+1)%waiters) + "/h1" // what a hand-off after round 1 sets
		if v, err := redis.String(c.Do("GET", key)); err != nil || v != next {
			return fmt.Errorf("cycle %d: the key holds %q (%v), want %q", k, v, err, next)
		}
	}
	return nil
}

// pollRelease is a polling lock's release.
var pollRelease = redis.NewScript(1, `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// polling runs the polling lock's cycle.
func polling(c redis.Conn, cycles int) error {
	for k := range cycles {
		if _, err := c.Do("SET", "hot", "token", "NX", "PX", 10000); err != nil {
			return err
		}
		if _, err := pollRelease.Do(c, "hot", "token"); err != nil {
			return err
		}
		if _, err := c.Do("GET", "hot"); err != nil {
			return fmt.Errorf("cycle %d: %w", k, err)
		}
	}
	return nil
}
