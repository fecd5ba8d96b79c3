package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// What the servers and the client spend during the measured window: the
// servers' CPU and commands from INFO, taken before and after the window
// on a connection per node that the tool keeps open meanwhile, and the
// client's CPU from getrusage(RUSAGE_SELF).

// topCommands is how many of a node's commands the report names.
const topCommands = 5

// scriptCommands are the commands that run a script: the report's
// "script calls". The commands a script runs (redis.call) are counted
// under their own names.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// serverProbe asks the nodes what they have spent, on one connection per
// node dialled before the window and kept open across it, so that the
// tool sends the nodes nothing but its own INFO calls meanwhile. It counts
// those calls per node, so that they are left out of the figures.
type serverProbe struct {
	addrs []string
	conns []redis.Conn // nil where the dial failed
	errs  []error      // why a node has no connection, or why its last INFO failed
	own   []int64      // INFO calls the tool sent on each node
}

// dialProbe connects to every node. A node it cannot reach is left out of
// the figures (its error says why).
func dialProbe(addrs []string) *serverProbe {
	p := &serverProbe{
		addrs: addrs,
		conns: make([]redis.Conn, len(addrs)),
		errs:  make([]error, len(addrs)),
		own:   make([]int64, len(addrs)),
	}
	for i, addr := range addrs {
		p.conns[i], p.errs[i] = adminDial(addr)
	}
	return p
}

// open returns how many connections the probe holds open.
func (p *serverProbe) open() int64 {
	n := int64(0)
	for _, c := range p.conns {
		if c != nil {
			n++
		}
	}
	return n
}

// close closes the connections.
func (p *serverProbe) close() {
	for i, c := range p.conns {
		if c != nil {
			c.Close()
			p.conns[i] = nil
		}
	}
}

// nodeSnapshot is what one node's INFO said at one moment.
type nodeSnapshot struct {
	runID    string
	cpu      cpuSplit         // used_cpu_user and used_cpu_sys: the whole server process
	cmds     map[string]int64 // command → calls + rejected_calls
	own      int64            // the tool's INFO calls sent to the node before this one
	pid      int              // process_id, 0 when INFO does not say
	switches int64            // the process's context switches (voluntary + involuntary); -1 unknown
}

// cpuSplit is a server process's CPU time, split as INFO cpu splits it.
type cpuSplit struct {
	user, sys time.Duration
}

// total returns user + system time.
func (c cpuSplit) total() time.Duration { return c.user + c.sys }

// sub returns c - o.
func (c cpuSplit) sub(o cpuSplit) cpuSplit { return cpuSplit{c.user - o.user, c.sys - o.sys} }

// snapshot asks every node for its figures; when says when, for errors.
// A node that does not answer, or answers without the fields (miniredis),
// gets nil and an error.
func (p *serverProbe) snapshot(when string) []*nodeSnapshot {
	out := make([]*nodeSnapshot, len(p.addrs))
	for i, c := range p.conns {
		if c == nil {
			continue
		}
		own := p.own[i]
		p.own[i]++
		s, err := readSnapshot(c)
		if err != nil {
			p.errs[i] = fmt.Errorf("node %s, %s: %w", p.addrs[i], when, err)
			c.Close() // perhaps out of step with its replies: not used again
			p.conns[i] = nil
			continue
		}
		s.own = own
		s.switches = contextSwitches(s.pid)
		out[i] = s
	}
	return out
}

// readSnapshot sends INFO all on conn and reads the fields it needs. "all"
// has the server, cpu and commandstats sections on every Redis version
// that has them, in one call.
func readSnapshot(conn redis.Conn) (*nodeSnapshot, error) {
	text, err := redis.String(conn.Do("INFO", "all"))
	if err != nil {
		return nil, fmt.Errorf("INFO all: %w", err)
	}
	return parseSnapshot(text)
}

// parseSnapshot reads run_id, used_cpu_sys, used_cpu_user and the
// cmdstat_ lines of an INFO reply.
func parseSnapshot(text string) (*nodeSnapshot, error) {
	s := &nodeSnapshot{cmds: map[string]int64{}}
	var sys, user float64
	var haveSys, haveUser bool
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var err error
		switch {
		case k == "run_id":
			s.runID = v
		case k == "process_id":
			s.pid, err = strconv.Atoi(v)
		case k == "used_cpu_sys":
			sys, err = strconv.ParseFloat(v, 64)
			haveSys = err == nil
		case k == "used_cpu_user":
			user, err = strconv.ParseFloat(v, 64)
			haveUser = err == nil
		case strings.HasPrefix(k, "cmdstat_"):
			var n int64
			n, err = commandCalls(v)
			s.cmds[strings.TrimPrefix(k, "cmdstat_")] = n
		}
		if err != nil {
			return nil, fmt.Errorf("INFO field %s: %w", k, err)
		}
	}
	if !haveSys || !haveUser {
		return nil, errors.New("INFO has no used_cpu_sys and used_cpu_user")
	}
	s.cpu = cpuSplit{user: seconds(user), sys: seconds(sys)}
	return s, nil
}

// seconds converts INFO's seconds, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// commandCalls reads calls + rejected_calls from a cmdstat_ value such as
// "calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0".
// Failed calls are among the calls; rejected ones are not.
func commandCalls(v string) (int64, error) {
	var n int64
	found := false
	for _, f := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(f, "=")
		if k != "calls" && k != "rejected_calls" {
			continue
		}
		c, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return 0, err
		}
		n += c
		found = found || k == "calls"
	}
	if !found {
		return 0, fmt.Errorf("no calls in %q", v)
	}
	return n, nil
}

// nodeCost is what one node spent in the window.
type nodeCost struct {
	addr  string
	known bool
	err   error // why it is not known
	cpu   cpuSplit
	cmds  map[string]int64 // by command, the tool's own calls left out
	// switches are the server process's context switches in the window,
	// -1 when unknown (not a process of this machine, or not Linux).
	switches int64
}

// total returns the node's commands.
func (n nodeCost) total() int64 {
	t := int64(0)
	for _, c := range n.cmds {
		t += c
	}
	return t
}

// scripts returns the node's script calls (EVALSHA, EVAL and the like).
func (n nodeCost) scripts() int64 {
	t := int64(0)
	for _, c := range scriptCommands {
		t += n.cmds[c]
	}
	return t
}

// top returns the node's k most called commands, most first (ties by
// name).
func (n nodeCost) top(k int) []string {
	names := make([]string, 0, len(n.cmds))
	for name := range n.cmds {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if n.cmds[a] != n.cmds[b] {
			if n.cmds[a] > n.cmds[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return names[:min(k, len(names))]
}

// costs returns what each node spent between the snapshots before
// and after, less the tool's own INFO calls and the extra commands given
// (the floor's, by node and command). A node is unknown when a snapshot
// is missing, its run id changed (it restarted) or a count went down.
func (p *serverProbe) costs(before, after []*nodeSnapshot, extra []map[string]int64) []nodeCost {
	out := make([]nodeCost, len(p.addrs))
	for i, addr := range p.addrs {
		n := nodeCost{addr: addr}
		b, a := before[i], after[i]
		switch {
		case b == nil || a == nil:
			n.err = p.errs[i]
			if n.err == nil {
				n.err = fmt.Errorf("node %s: no INFO", addr)
			}
		case b.runID != a.runID:
			n.err = fmt.Errorf("node %s restarted during the measurement", addr)
		default:
			n.known, n.cpu, n.cmds = true, a.cpu.sub(b.cpu), map[string]int64{}
			n.switches = -1
			if a.pid == b.pid && a.switches >= 0 && b.switches >= 0 {
				n.switches = a.switches - b.switches
			}
			for cmd, calls := range a.cmds {
				if d := calls - b.cmds[cmd]; d != 0 {
					n.cmds[cmd] = d
				}
			}
			n.cmds["info"] -= a.own - b.own
			if i < len(extra) {
				for cmd, c := range extra[i] {
					n.cmds[cmd] -= c
				}
			}
			for _, cmd := range n.top(len(n.cmds)) { // by name among equals: the same error every time
				c := n.cmds[cmd]
				if c < 0 {
					n.known = false
					n.err = fmt.Errorf("node %s: %s count went down by %d (statistics reset?)", addr, cmd, -c)
				}
				if c <= 0 {
					delete(n.cmds, cmd)
				}
			}
			if n.cpu.user < 0 || n.cpu.sys < 0 {
				n.known = false
				n.err = fmt.Errorf("node %s: CPU time went down", addr)
			}
		}
		out[i] = n
	}
	return out
}

// spinNanos adds up the wall time that holdFor spends in its yield loop,
// which burns this process's CPU on behalf of the tool, not of the lock
// client. measure takes its difference over the window.
var spinNanos atomic.Int64
