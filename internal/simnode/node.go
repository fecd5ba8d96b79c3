// Package simnode is an in-process Redis node with no sockets, for the
// simulator (internal/sim) and for package redlocktest.
//
// A Node runs the commands the library and a test's inspection use on a
// store of its own (store.go), and the library's real Lua scripts on a Lua
// state it keeps (scripts.go); it is reached through pool.New with
// pool.WithDialer, so the lock client talks to it through the real
// pipelined node code of package pool, over in-memory connections of its
// own (links, link.go). The links are where faults live: a paused node
// stops reading its connections, a partition holds one client's bytes in
// either or both directions, a slow node delays its replies, a killed node
// closes them all and refuses new ones. Promote fails a node over to a
// replica promoted behind its address: a new process, long up, whose data
// is a copy taken earlier (Replica).
//
// Time is the process's time: inside a testing/synctest bubble it is the
// bubble's virtual time, so TTLs, node timeouts and back-offs all run on
// it. Each node has a clock of its own over it (NodeClock), which can run
// fast or slow or jump; TTLs and TIME follow the node's clock, as in Redis,
// whose expiry reads the wall clock. A key whose time has come is gone the
// moment a command looks at it, so passing time costs nothing.
//
// The node runs one command at a time, as Redis's single thread does;
// INFO server answers with the node's run id and uptime, INFO replication
// with its role (always master) and replication ids (the restart check of
// the lock client asks for them); each command answers as Redis 7's
// does (store_test.go holds them against miniredis's). What is not
// simulated: real Redis's Lua interpreter (this is gopher-lua), commands
// beyond those in store.go and scripts.go, pattern subscriptions, WATCH,
// more than one database, memory limits, persistence timing, replication
// itself (a replica is a copy of the data at one moment), the kernel
// and TCP (a connection is lossless until it is closed, as TCP is), and
// goroutine scheduling, which the Go runtime decides.
//
// Nothing in a Node blocks on a mutex while another goroutine waits for
// virtual time: links wait on channels, which a bubble counts as durably
// blocked. Lock order: the engine's mutex before a Node's (the engine asks
// the Node for its time and INFO); a Node's mutex is never held while
// calling into the engine.
package simnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// ErrDown is the dial error of a node that is not running.
var ErrDown = errors.New("connect: connection refused (the node is down)")

// Data says what a node that starts again holds.
type Data int

const (
	// Empty: nothing (no persistence, or lost files).
	Empty Data = iota
	// Kept: what it held when it stopped (an append-only file written on
	// every command).
	Kept
	// Saved: the snapshot of the last Save (an RDB file older than the
	// last writes); nothing when it never saved.
	Saved
)

// String names the data of a restart.
func (d Data) String() string {
	switch d {
	case Kept:
		return "kept"
	case Saved:
		return "saved"
	}
	return "empty"
}

// Node is one simulated Redis node. Its methods are safe for concurrent use.
type Node struct {
	addr string

	mu      sync.Mutex
	inc     *incarnation // nil while down
	starts  int          // incarnations so far, for run ids
	replid  string       // the replication id of the last incarnation
	kept    snapshot     // what a killed node held
	saved   snapshot     // the last Save
	clk     NodeClock
	paused  bool
	delay   time.Duration            // added to every reply
	stalls  map[string]time.Duration // client → added to its replies
	cuts    map[string]bool          // client → replies only (false: both ways)
	denies  map[string]bool          // client + " " + command: refused (Deny)
	serves  func(slot uint16) bool   // in cluster mode, the slots it serves (SetCluster); nil: not a cluster
	links   []*link                  // open connections, oldest first
	changed chan struct{}            // closed and replaced when a fault changes
	stats   Stats
}

// Stats counts what happened to a node.
type Stats struct {
	Dials    int // connections opened
	Refused  int // dials refused while down
	Commands int // command chunks delivered to the engine
}

// incarnation is one run of the node's process.
type incarnation struct {
	e       *engine
	runID   string
	replid  string    // master_replid: this process's
	replid2 string    // master_replid2: the saved dataset's, or zeros
	started time.Time // on the node's clock
}

// New returns a running, empty node named addr ("host:port": the address
// its pools carry in errors).
func New(addr string) *Node {
	n := &Node{addr: addr, cuts: map[string]bool{}, denies: map[string]bool{}, changed: make(chan struct{}), clk: NodeClock{rate: 1}}
	n.start(Empty)
	return n
}

// Addr returns the node's address.
func (n *Node) Addr() string { return n.addr }

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Dial opens a connection to the node for client (a name: partitions are
// between one client and one node). It has the shape of pool.WithDialer's
// function once client is bound (Dialer). A node that is down refuses at
// once; one that client is cut off from lets the dial hang until ctx ends.
func (n *Node) Dial(ctx context.Context, client string) (net.Conn, error) {
	for {
		n.mu.Lock()
		inc, _, cut := n.inc, n.cuts[client], n.isCut(client)
		changed := n.changed
		if inc == nil {
			n.stats.Refused++
			n.mu.Unlock()
			return nil, fmt.Errorf("dial %s: %w", n.addr, ErrDown)
		}
		if !cut {
			c := n.openLocked(inc, client)
			n.mu.Unlock()
			return c, nil
		}
		n.mu.Unlock()
		select { // no answer to the connection attempt
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: i/o timeout (no route): %w", n.addr, ctx.Err())
		case <-changed:
		}
	}
}

// Dialer returns Dial for client, in the shape pool.WithDialer takes.
func (n *Node) Dialer(client string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) { return n.Dial(ctx, client) }
}

func (n *Node) isCut(client string) bool {
	_, ok := n.cuts[client]
	return ok
}

// notifyLocked wakes every link waiting on a fault to change.
func (n *Node) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// start begins a new incarnation holding data. Called without n.mu.
func (n *Node) start(d Data) {
	n.mu.Lock()
	// As Redis 7.0 and Valkey 8 do, a master that loaded a dataset from
	// its files takes a new replication id and no second one (checked on
	// both: master_replid2 is all zeros after a restart from an RDB file
	// or an append-only file). Only a promoted replica's second is set.
	var load snapshot
	switch d {
	case Kept:
		load = n.kept
	case Saved:
		load = n.saved
	}
	n.mu.Unlock()
	n.begin(load, "", 0)
}

// begin starts a new incarnation holding load, whose master_replid2 is
// replid2 ("": none) and which has been up for up. Called without n.mu.
func (n *Node) begin(load snapshot, replid2 string, up time.Duration) {
	n.mu.Lock()
	n.starts++
	now := n.clk.at(time.Now())
	inc := &incarnation{runID: runID(n.addr, n.starts), started: now.Add(-up)}
	// A process takes a new replication id.
	inc.replid, inc.replid2 = inc.runID, replid2
	if replid2 == "" {
		inc.replid2 = strings.Repeat("0", 40)
	}
	n.replid = inc.replid
	n.kept = nil
	n.mu.Unlock()

	inc.e = newEngine(func(section string) string { return n.info(inc, section) }, n.now, load.restore(now))
	inc.e.denied = n.denied
	inc.e.serves, inc.e.clustered = n.servesSlot, n.clusterMode

	n.mu.Lock()
	n.inc = inc
	n.notifyLocked()
	n.mu.Unlock()
}

// info is the node's answer to INFO section ("server" or
// "replication"; "" for any other): the fields the lock client reads.
func (n *Node) info(inc *incarnation, section string) string {
	switch section {
	case "server":
		return n.infoServer(inc)
	case "replication":
		return fmt.Sprintf("# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:%s\r\nmaster_replid2:%s\r\n", inc.replid, inc.replid2)
	}
	return ""
}

// infoServer is the node's answer to INFO server.
func (n *Node) infoServer(inc *incarnation) string {
	n.mu.Lock()
	now := n.clk.at(time.Now())
	n.mu.Unlock()
	mode := "standalone"
	if n.clusterMode() {
		mode = "cluster"
	}
	return fmt.Sprintf("# Server\r\nredis_version:7.0.15\r\nredis_mode:%s\r\nrun_id:%s\r\nuptime_in_seconds:%d\r\n", mode, inc.runID, uptimeSeconds(inc.started, now))
}

// uptimeSeconds is uptime_in_seconds as Redis computes it: the present and
// the start, each cut to a whole second of the clock, subtracted. It runs
// ahead of the true uptime by up to a second (started at 9.9s, asked at
// 10.0s: 1), which restart safety allows for (uptimeFloor).
func uptimeSeconds(started, now time.Time) int64 {
	return max(now.Unix()-started.Unix(), 0)
}

// runID makes the run id of a node's incarnation, the same in every
// replay.
func runID(addr string, start int) string {
	h := fnv.New128a()
	fmt.Fprintf(h, "%s#%d", addr, start)
	return fmt.Sprintf("%x%08x", h.Sum(nil), start)
}

// Kill stops the node: its connections close, and it refuses new ones
// until Start. It keeps what it held for a Start with Kept. Killing a node
// that is down does nothing.
func (n *Node) Kill() {
	n.mu.Lock()
	inc := n.inc
	if inc == nil {
		n.mu.Unlock()
		return
	}
	n.inc = nil
	links := n.links
	n.links = nil
	n.paused = false
	n.notifyLocked()
	now := n.clk.at(time.Now())
	n.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	kept := inc.e.take(now)
	n.mu.Lock()
	n.kept = kept
	n.mu.Unlock()
}

// Start starts a node that is down, with a new run id and an uptime of
// zero, holding what d says. Starting a running node does nothing.
func (n *Node) Start(d Data) {
	n.mu.Lock()
	up := n.inc != nil
	n.mu.Unlock()
	if !up {
		n.start(d)
	}
}

// PromotedUptime is the uptime of a promoted replica when it is promoted
// (Promote): it ran as a replica far longer than any TTL.
const PromotedUptime = time.Hour

// Replica is a copy of a node's data as a replica of the node holds it,
// for Promote.
type Replica struct {
	data   snapshot
	replid string // the replication id of the master it follows
}

// Replica returns a copy of what the node holds now, as a replica that
// follows it holds it: promoted later, it lacks every write made since,
// as a replica that lagged by that long does. It returns nil while the
// node is down.
func (n *Node) Replica() *Replica {
	inc, now := n.current()
	if inc == nil {
		return nil
	}
	return &Replica{data: inc.e.take(now), replid: inc.replid}
}

// Promote fails the node over to r, behind the same address: the running
// process stops, its connections close, and a replica promoted to master
// serves r's data. It has a new run id and a new replication id, its
// master_replid2 is the replication id of the master r followed, and it
// has been up for PromotedUptime. Keys whose time passed since r was
// taken are gone, as they are when a replica is promoted.
func (n *Node) Promote(r *Replica) {
	n.Kill()
	n.begin(r.data, r.replid, PromotedUptime)
}

// Restart kills the node and starts it again at once with d.
func (n *Node) Restart(d Data) {
	n.Kill()
	n.Start(d)
}

// Up reports whether the node is running.
func (n *Node) Up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inc != nil
}

// Save takes a snapshot of what the node holds, for a later Start with
// Saved. It does nothing while the node is down.
func (n *Node) Save() {
	inc, now := n.current()
	if inc == nil {
		return
	}
	s := inc.e.take(now)
	n.mu.Lock()
	n.saved = s
	n.mu.Unlock()
}

// current returns the running incarnation (nil when down) and the
// node's time, with the engine's clock set to it.
func (n *Node) current() (*incarnation, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inc, n.clk.at(time.Now())
}

// now is the node's time.
func (n *Node) now() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.clk.at(time.Now())
}

// Pause stops the node from reading its connections (SIGSTOP): commands
// wait, dials still connect. Time goes on, and so do its TTLs.
func (n *Node) Pause() { n.set(func() { n.paused = true }) }

// Resume undoes Pause.
func (n *Node) Resume() { n.set(func() { n.paused = false }) }

// SetDelay delays every reply of the node by d (0: none).
func (n *Node) SetDelay(d time.Duration) { n.set(func() { n.delay = max(d, 0) }) }

// SetClientDelay delays the node's replies to client by d more (0: none):
// set on every node, it stands for a client that stalls (a long garbage
// collection, a starved process), whose replies wait in its sockets.
func (n *Node) SetClientDelay(client string, d time.Duration) {
	n.set(func() {
		if d <= 0 {
			delete(n.stalls, client)
			return
		}
		if n.stalls == nil {
			n.stalls = map[string]time.Duration{}
		}
		n.stalls[client] = d
	})
}

// Cut partitions client from the node: nothing client sends reaches the
// node and nothing comes back, or, with repliesOnly, its commands run but
// their replies are held. Held bytes are delivered when the cut heals
// while the connection is still open (TCP retransmits; it does not lose
// bytes). New dials from client hang.
func (n *Node) Cut(client string, repliesOnly bool) {
	n.set(func() { n.cuts[client] = repliesOnly })
}

// Deny makes the node refuse cmd to client from now on, as an ACL that
// lacks it does, with a NOPERM error; only "info|<section>" is checked
// (a user without +info|replication).
func (n *Node) Deny(client, cmd string) {
	n.set(func() { n.denies[client+" "+cmd] = true })
}

// denied reports whether cmd is refused to client (Deny).
func (n *Node) denied(client, cmd string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.denies[client+" "+cmd]
}

// Heal ends the cuts of client ("" heals every client).
func (n *Node) Heal(client string) {
	n.set(func() {
		if client == "" {
			clear(n.cuts)
		} else {
			delete(n.cuts, client)
		}
	})
}

func (n *Node) set(f func()) {
	n.mu.Lock()
	f()
	n.notifyLocked()
	n.mu.Unlock()
}

// Clock returns the node's clock.
func (n *Node) Clock() NodeClock {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.clk
}

// SetRate makes the node's clock run at rate times real time from now
// (1: in step). It panics unless 0 < rate <= 100.
func (n *Node) SetRate(rate float64) {
	if !(rate > 0 && rate <= 100) {
		panic(fmt.Sprintf("simnode: clock rate %v out of (0, 100]", rate))
	}
	n.set(func() { n.clk = n.clk.rebase(time.Now(), rate) })
}

// Jump moves the node's clock by d (forward when positive): keys whose
// expiry it passes expire at the node's next command.
func (n *Node) Jump(d time.Duration) {
	n.set(func() { n.clk.nBase = n.clk.nBase.Add(d) })
}

// DropConn closes the i-th open connection (i modulo their number): the
// node forgets that client, as after CLIENT KILL. It reports whether there
// was one.
func (n *Node) DropConn(i int) bool {
	n.mu.Lock()
	if len(n.links) == 0 {
		n.mu.Unlock()
		return false
	}
	l := n.links[i%len(n.links)]
	n.mu.Unlock()
	l.close()
	return true
}

// Conns returns how many connections are open.
func (n *Node) Conns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.links)
}

// Do runs one command on the node directly, outside any connection and
// unaffected by its faults: for tests and checks. It fails while the node
// is down.
func (n *Node) Do(args ...string) (any, error) {
	inc, _ := n.current()
	if inc == nil {
		return nil, fmt.Errorf("node %s: %w", n.addr, ErrDown)
	}
	if len(args) == 0 {
		return nil, errors.New("simnode: Do with no command")
	}
	e := inc.e
	return plain(e.run(e.newConn(bufio.NewWriter(io.Discard)), args))
}

// plain is a reply as Do returns it: string for simple and bulk strings,
// int for integers, []any for arrays, nil for a null reply, and an error
// reply as the error.
func plain(v any) (any, error) {
	switch v := v.(type) {
	case int64:
		return int(v), nil
	case status:
		return string(v), nil
	case errorReply:
		return nil, errors.New(string(v))
	case many:
		return plain([]any(v))
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			r, err := plain(e)
			if err != nil {
				r = err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// Keys returns the node's keys, sorted; none while it is down.
func (n *Node) Keys() []string {
	inc, _ := n.current()
	if inc == nil {
		return nil
	}
	return inc.e.keys()
}

// Expire deletes key now, as if its TTL had run out. It reports whether
// the key was there.
func (n *Node) Expire(key string) bool {
	inc, _ := n.current()
	return inc != nil && inc.e.del(key)
}

// Close kills the node for good and ends its goroutines.
func (n *Node) Close() { n.Kill() }

// NodeClock is a node's clock: real (or virtual) time at a rate, from a
// base.
type NodeClock struct {
	vBase, nBase time.Time // the node reads nBase when time reads vBase
	rate         float64   // 0 for a zero NodeClock: in step
}

// at returns the node's time when the process's time is v.
func (c NodeClock) at(v time.Time) time.Time {
	if c.rate == 0 || c.vBase.IsZero() {
		return v.Add(c.nBase.Sub(c.vBase)).Round(0)
	}
	return c.nBase.Add(time.Duration(float64(v.Sub(c.vBase)) * c.rate)).Round(0)
}

// rebase returns the clock that reads the same at v and runs at rate.
func (c NodeClock) rebase(v time.Time, rate float64) NodeClock {
	return NodeClock{vBase: v, nBase: c.at(v), rate: rate}
}

// Offset returns how far the node's clock is ahead of time now.
func (c NodeClock) Offset() time.Duration {
	now := time.Now()
	return c.at(now).Sub(now.Round(0))
}
