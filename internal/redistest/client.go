package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// adminTimeout bounds connect, read and write of a Server.Do call.
const adminTimeout = 2 * time.Second

// do runs one command on a fresh connection to addr whose connect, read and
// write are each bounded by timeout.
func do(addr, password string, timeout time.Duration, cmd string, args ...any) (any, error) {
	conn, err := redis.Dial("tcp", addr,
		redis.DialConnectTimeout(timeout),
		redis.DialReadTimeout(timeout),
		redis.DialWriteTimeout(timeout),
		redis.DialPassword(password),
	)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.Do(cmd, args...)
}

// probe checks that the redis-server answering on addr is the process pid,
// not some other server that grabbed the port first, and that it has
// finished loading its data (a durable node replays its append-only file
// first, and answers most commands with LOADING until it is done).
func probe(addr, password string, pid int, timeout time.Duration) error {
	info, err := redis.String(do(addr, password, timeout, "INFO", "server", "persistence"))
	if err != nil {
		return err
	}
	seenPid := false
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if got, _ := strconv.Atoi(v); got != pid {
				return fmt.Errorf("redistest: %s is served by pid %s, want %d", addr, v, pid)
			}
			seenPid = true
		}
		if v, ok := strings.CutPrefix(line, "loading:"); ok && v != "0" {
			return fmt.Errorf("redistest: %s is still loading its data", addr)
		}
	}
	if !seenPid {
		return fmt.Errorf("redistest: no process_id in INFO from %s", addr)
	}
	return nil
}
