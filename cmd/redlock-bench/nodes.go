package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/redlock"

	"github.com/quorumlock/redlock/internal/redistest"
)

// adminTimeout bounds connecting to a node and each INFO the tool sends.
const adminTimeout = time.Second

// nodes are the Redis nodes of one run.
type nodes struct {
	addrs   []string
	backend string       // for the report, e.g. "redis-server 7.0.15, 5 nodes started by the tool"
	close   func() error // stops the nodes the tool started; nil when it started none
	local   []localNode  // the nodes the tool started, by index; nil with -addrs
	// clientOpts are the Client options these nodes need: in-process
	// servers cannot answer the restart check (INFO inside a script), and
	// cannot restart either, so restart safety is off for them.
	clientOpts []redlock.Option
	inProcess  bool // miniredis: the servers run in this process, and count in its CPU time
}

// localNode is a node the tool started, which it may break on purpose.
// *redistest.Server is one.
type localNode interface {
	Pause() error   // SIGSTOP: the node keeps its port but answers nothing
	Resume() error  // SIGCONT
	Kill() error    // SIGKILL
	Restart() error // start a killed node again, empty, on the same port
}

// startNodes returns the nodes the run uses: cfg.addrs when given,
// otherwise cfg.nodes nodes it starts itself. The caller must call stop on
// the result, which stops the nodes the tool started.
func startNodes(cfg config, stderr io.Writer) (*nodes, error) {
	if len(cfg.addrs) > 0 {
		version, noInfo, err := redisVersion(cfg.addrs)
		if err != nil {
			// Not fatal: redlock is made to work with a minority of nodes down.
			fmt.Fprintf(stderr, "redlock-bench: warning: %v\n", err)
		}
		ns := &nodes{addrs: cfg.addrs, backend: version + ", existing nodes"}
		if len(noInfo) > 0 {
			// Such nodes cannot answer the restart check either.
			fmt.Fprintf(stderr, "redlock-bench: warning: %s answer no INFO server: restart safety is off for this run\n",
				strings.Join(noInfo, ", "))
			ns.clientOpts = []redlock.Option{redlock.WithRestartSafety(0)}
		}
		return ns, nil
	}

	backend := cfg.backend
	if backend == backendAuto {
		backend = backendRedis
		if _, err := redistest.Path(); err != nil {
			fmt.Fprintf(stderr, "redlock-bench: %v\n", err)
			backend = backendMiniredis
		}
	}
	if backend == backendMiniredis {
		fmt.Fprintf(stderr, "redlock-bench: WARNING: using %d in-process miniredis servers instead of redis-server.\n"+
			"  Their figures are NOT representative of real Redis: no real network stack, scripts run\n"+
			"  in a Go Lua interpreter, and the servers share the benchmark's CPU and garbage collector.\n"+
			"  Install redis-server (e.g. apt-get install redis-server) or point -addrs at real nodes.\n",
			cfg.nodes)
		return startMiniredis(cfg.nodes)
	}

	c, err := redistest.Start(cfg.nodes, redistest.Options{})
	if err != nil {
		return nil, err
	}
	version, _, err := redisVersion(c.Addrs())
	if err != nil {
		fmt.Fprintf(stderr, "redlock-bench: warning: %v\n", err)
	}
	ns := &nodes{
		addrs:   c.Addrs(),
		backend: fmt.Sprintf("%s, %d local nodes started by the tool", version, cfg.nodes),
		close:   c.Close,
	}
	for _, s := range c.Nodes() {
		ns.local = append(ns.local, s)
	}
	return ns, nil
}

// stop stops the nodes the tool started.
func (n *nodes) stop() error {
	if n.close == nil {
		return nil
	}
	return n.close()
}

// startMiniredis starts n in-process servers on 127.0.0.1. Their keys
// expire with the wall clock, as on Redis (miniredis's own default is to
// expire keys only when told to): takeover mode waits for that.
func startMiniredis(n int) (*nodes, error) {
	servers := make([]*miniredis.Miniredis, 0, n)
	closeAll := func() error {
		for _, m := range servers {
			m.Close()
		}
		return nil
	}
	ns := &nodes{
		backend:    fmt.Sprintf("miniredis (in-process, not representative), %d nodes", n),
		close:      closeAll,
		clientOpts: []redlock.Option{redlock.WithRestartSafety(0)},
		inProcess:  true,
	}
	for range n {
		m, err := miniredis.Run()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("starting miniredis: %w", err)
		}
		m.ClockTTL(true)
		servers = append(servers, m)
		ns.addrs = append(ns.addrs, m.Addr())
		ns.local = append(ns.local, miniNode{m})
	}
	return ns, nil
}

// errNoPause is the error for pausing an in-process node.
var errNoPause = errors.New("an in-process miniredis node cannot be paused (it shares this process); use redis-server nodes")

// miniNode is a miniredis server as a localNode: it can be killed (closed)
// and restarted, but not paused.
type miniNode struct{ m *miniredis.Miniredis }

func (n miniNode) Pause() error   { return errNoPause }
func (n miniNode) Resume() error  { return nil }
func (n miniNode) Kill() error    { n.m.Close(); return nil }
func (n miniNode) Restart() error { return n.m.Restart() }

// redisVersion returns "redis-server VERSION" from INFO server on the
// nodes ("valkey-server VERSION" for Valkey, which also reports the Redis
// version it is compatible with; "redis-server V1/V2" when they differ,
// "version unknown" when no node tells), the nodes that answered without
// INFO server (miniredis), and an error naming every node that could not
// be reached.
func redisVersion(addrs []string) (string, []string, error) {
	var versions, noInfo []string
	var errs []error
	for _, addr := range addrs {
		fields, err := info(addr, "server")
		var re redis.Error
		if errors.As(err, &re) {
			noInfo = append(noInfo, addr) // it answered, but has no INFO server (miniredis)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v, ok := serverVersion(fields); ok && !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		versions = []string{"redis-server version unknown"}
	}
	version := strings.Join(versions, "/")
	if err := errors.Join(errs...); err != nil {
		return version, noInfo, fmt.Errorf("reading the Redis version: %w", err)
	}
	return version, noInfo, nil
}

// connStats is the sum over the nodes of two INFO fields, not counting the
// connection that the query itself opens on each node.
type connStats struct {
	received  int64 // total_connections_received: connections ever accepted
	connected int64 // connected_clients: connections open now
}

// queryConnStats asks every node for its connection counts. It returns
// false when a node does not answer.
func queryConnStats(addrs []string) (connStats, bool) {
	var sum connStats
	for _, addr := range addrs {
		// A plain INFO has both the clients and the stats sections, on
		// redis-server and miniredis alike.
		fields, err := info(addr, "")
		if err != nil {
			return sum, false
		}
		received, err1 := strconv.ParseInt(fields["total_connections_received"], 10, 64)
		connected, err2 := strconv.ParseInt(fields["connected_clients"], 10, 64)
		if err1 != nil || err2 != nil {
			return sum, false
		}
		sum.received += received - 1
		sum.connected += connected - 1
	}
	return sum, true
}

// info returns the fields of INFO section ("" for the default sections) of
// the node at addr.
func info(addr, section string) (map[string]string, error) {
	conn, err := adminDial(addr)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", addr, err)
	}
	defer conn.Close()
	args := []any{}
	if section != "" {
		args = append(args, section)
	}
	text, err := redis.String(conn.Do("INFO", args...))
	if err != nil {
		return nil, fmt.Errorf("node %s: INFO: %w", addr, err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	return fields, nil
}

// countKeys returns how many of the lock keys the nodes still hold, over
// all nodes. Keys whose value is one of the tokens in died (the locks of
// holders that died, in takeover mode) are counted apart, in dead. Only
// the lock keys themselves count: the keys the client keeps beside them
// (its waiter queues) do not.
func countKeys(addrs, keys []string, died map[string]bool) (n, dead int, err error) {
	if len(keys) == 0 {
		return 0, 0, nil
	}
	for _, addr := range addrs {
		values, err := getAll(addr, keys)
		if err != nil {
			return n, dead, fmt.Errorf("node %s: %w", addr, err)
		}
		for _, v := range values {
			switch {
			case v == nil: // no such key (or not a lock's)
			case died[string(v)]:
				dead++
			default:
				n++
			}
		}
	}
	return n, dead, nil
}

// getAll returns the values of keys on the node at addr: nil for a key
// that does not exist or holds no string.
func getAll(addr string, keys []string) ([][]byte, error) {
	conn, err := adminDial(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	values, err := redis.ByteSlices(conn.Do("MGET", redis.Args{}.AddFlat(keys)...))
	if err != nil {
		return nil, fmt.Errorf("MGET: %w", err)
	}
	return values, nil
}

// adminDial connects to the node at addr for the tool's own queries.
func adminDial(addr string) (redis.Conn, error) {
	return redis.Dial("tcp", addr,
		redis.DialConnectTimeout(adminTimeout),
		redis.DialReadTimeout(adminTimeout),
		redis.DialWriteTimeout(adminTimeout),
	)
}

// serverVersion names the server and its version from INFO server's
// fields: Valkey says valkey_version (and server_name), Redis only
// redis_version.
func serverVersion(fields map[string]string) (string, bool) {
	if v, ok := fields["valkey_version"]; ok {
		return "valkey-server " + v, true
	}
	v, ok := fields["redis_version"]
	return "redis-server " + v, ok
}
