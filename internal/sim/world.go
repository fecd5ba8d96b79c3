// Package sim is the deterministic simulator: Clients of the real lock
// library, with the real Lua scripts, on in-process nodes (internal/simnode)
// and virtual time (testing/synctest), under a seeded schedule of faults,
// with checkers on every history. docs/safety.md ("The simulator") tells
// what it models, what it does not, and how to run and replay it.
//
// One seed is one run (Run): it draws the deployment (restart safety,
// durable nodes, client and node clock rates), starts workers that use
// every kind of lock, injects faults for most of the run, then lets the
// world heal, and checks what happened. Time is exact in a replay; the
// order in which goroutines that are ready at the same virtual instant
// run is the Go scheduler's, so a replay follows the same schedule of
// operations and faults but may interleave two simultaneous events the
// other way.
package sim

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/simnode"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Options configure a run.
type Options struct {
	Seed int64
	// Virtual is how long the workers run, in virtual time; faults stop
	// at 70% of it and the rest is the quiet window in which liveness is
	// checked. Default 40s.
	Virtual time.Duration
	// OutOfModel adds faults outside the algorithm's model (a quorum of
	// nodes restarted empty at once without restart safety, a node clock
	// jumping forward, a client clock running 10% slow): the checkers must
	// then find violations.
	OutOfModel bool
	// TraceLines is how many of the trace's last lines a failure's report
	// gives, besides those around the first violation. Default 400.
	TraceLines int
	// Clusters lets a third of the seeds make one or two of their nodes
	// Redis Clusters (cluster.go). Off by default: with it on, a rare
	// mutual-exclusion violation is open (docs/safety.md, "Nodes that are
	// Redis Clusters in the simulator").
	Clusters bool
}

// Result is what a run did and found.
type Result struct {
	Seed         int64
	Setup        string // the deployment drawn
	Acquisitions int
	Faults       int
	Virtual      time.Duration
	Violations   []string
	Trace        []string       // the last TraceLines lines
	Around       []string       // the lines from 1s before the earliest violation to 0.5s after it
	At           time.Duration  // when the earliest violation happened, as far as its checker knows; -1: not known
	Kinds        map[string]int // operations by kind
	FaultKinds   map[string]int // faults by kind
	// FalseExclusions counts the exclusions of nodes that lost nothing (or
	// for longer than what they lost requires): each is a violation too.
	FalseExclusions int
}

// setup is what a seed draws for the deployment.
type setup struct {
	nodes, clients, workers int
	maxTTL                  time.Duration // the longest WithRestartSafety of the Clients; 0: off
	durable                 bool          // the nodes keep every write (restart-saved is out of model)
	nodeTimeout             time.Duration
	clientRates             []float64
	longKeys                bool // client 0 uses TTLs past maxTTL on keys of its own
	// The Clients differ, as in a deployment mid-upgrade (docs/operations.md,
	// "What restart safety excludes"): each has its own WithRestartSafety
	// (maxTTL or half of it, never below every TTL the workers use), says
	// WithDurableNodes or not (on durable nodes), and may be refused INFO
	// replication by the nodes' ACL (blind).
	clientMaxTTL  []time.Duration
	clientDurable []bool
	clientBlind   []bool
	// legacy: a Client of the previous version checks and marks the nodes
	// beside them, with the previous marker form (node_previous.lua).
	legacy bool
	// The first clusters nodes are Redis Clusters of shards shards each
	// (cluster.go): faults hit one shard, and slots move between shards.
	clusters, shards int
}

func (s setup) String() string {
	rates := make([]string, len(s.clientRates))
	for i, r := range s.clientRates {
		rates[i] = fmt.Sprintf("%.4f", r)
	}
	clients := make([]string, s.clients)
	for i := range clients {
		clients[i] = fmt.Sprintf("%v", s.clientMaxTTL[i])
		if s.clientDurable[i] {
			clients[i] += "+durable"
		}
		if s.clientBlind[i] {
			clients[i] += "+blind"
		}
	}
	return fmt.Sprintf("nodes=%d clients=%d workers=%d restart-safety=%v durable=%v node-timeout=%v client-rates=[%s] long-keys=%v clients=[%s] legacy=%v clusters=%dx%d",
		s.nodes, s.clients, s.workers, s.maxTTL, s.durable, s.nodeTimeout, strings.Join(rates, " "), s.longKeys, strings.Join(clients, " "), s.legacy, s.clusters, s.shards)
}

// world is one run's state.
type world struct {
	opt      Options
	set      setup
	rng      *rand.Rand // the scheduler's
	start    time.Time
	end      time.Time       // workers stop
	quiet    time.Time       // faults stop
	settled  time.Time       // liveness is checked for calls begun after it
	nodes    []*simnode.Node // a cluster node's first shard
	clusters []*simCluster   // per node: its cluster, nil for a standalone node
	clients  []*simClient
	chk      *faults.Checker
	trace    *trace
	store    *store

	mu              sync.Mutex
	acquired        int
	kinds           map[string]int
	faults          int
	faultKinds      map[string]int // faults by kind
	violations      []string
	leaders         []leaderAnswer
	leaderHolds     map[string]*leaderHold // by token
	fenceRefusals   []string
	observeBack     []string // Observe delivering a term not above the last
	fencedOps       []fencedOp
	exclusions      []exclusion                       // restart safety's, as the Clients reported them
	started         [][]time.Duration                 // per node: when each process after the first started
	procStarts      map[*simnode.Node][]time.Duration // the same, per node or shard
	losses          [][]time.Duration                 // per node: when it lost data
	longestTTL      time.Duration                     // the longest TTL any call used
	dataLost        map[int]bool                      // nodes that lost data at some point
	faultyUntil     []time.Time                       // per node: counts as faulty until then
	healthyFrom     []time.Time                       // per node: healthy from then on (faulty, then reconnecting)
	unstalledFrom   map[int]time.Time                 // per client: its replies on time from then on
	violationAt     time.Duration                     // the earliest violation's time, -1 when none is known
	falseExclusions int                               // checkAvailability's count
}

type simClient struct {
	name  string
	c     *redlock.Client
	clk   *faults.Clock
	pools []*pool.Node
}

// now returns the virtual time since the run began.
func (w *world) now() time.Duration { return time.Since(w.start) }

// violate records a violation.
func (w *world) violate(format string, args ...any) {
	w.violateAt(-1, format, args...)
}

// violateAt records a violation that happened at virtual time at (-1: not
// known): a report gives the trace around the earliest.
func (w *world) violateAt(at time.Duration, format string, args ...any) {
	if at >= 0 {
		w.mu.Lock()
		if w.violationAt < 0 || at < w.violationAt {
			w.violationAt = at
		}
		w.mu.Unlock()
	}
	msg := fmt.Sprintf(format, args...)
	w.trace.add(w.now(), "VIOLATION "+msg)
	w.mu.Lock()
	w.violations = append(w.violations, msg)
	w.mu.Unlock()
}

func (w *world) noteTTL(ttl time.Duration) {
	w.mu.Lock()
	w.longestTTL = max(w.longestTTL, ttl)
	w.mu.Unlock()
}

// draw picks the deployment of a seed.
func draw(rng *rand.Rand, opt Options) setup {
	s := setup{nodes: []int{3, 5}[rng.Intn(2)], clients: 3, workers: 3}
	if rng.Intn(3) > 0 {
		s.maxTTL = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}[rng.Intn(3)]
	}
	s.durable = rng.Intn(3) == 0
	s.nodeTimeout = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}[rng.Intn(3)]
	for range s.clients {
		// In model: two clocks' rates differ by less than the drift
		// allowance (1% of the TTL): each within 0.45% of real time.
		s.clientRates = append(s.clientRates, 1+(rng.Float64()-0.5)*0.009)
	}
	if opt.OutOfModel {
		s.clientRates[0] = 0.9
		s.maxTTL = 0
	}
	s.longKeys = s.maxTTL > 0 && rng.Intn(2) == 0
	for range s.clients {
		ttl := s.maxTTL
		if ttl >= 2*time.Second && rng.Intn(2) == 0 {
			ttl /= 2 // still above every TTL the workers use (1s)
		}
		s.clientMaxTTL = append(s.clientMaxTTL, ttl)
		s.clientDurable = append(s.clientDurable, s.durable && rng.Intn(2) == 0)
		s.clientBlind = append(s.clientBlind, s.maxTTL > 0 && rng.Intn(3) == 0)
	}
	s.legacy = s.maxTTL > 0 && rng.Intn(2) == 0
	if opt.Clusters && !opt.OutOfModel && rng.Intn(3) == 0 {
		s.clusters, s.shards = 1+rng.Intn(2), 2+rng.Intn(2)
	}
	return s
}

// Run runs one seed. It must be called inside a testing/synctest bubble
// (on real time it would take as long as the virtual time it covers).
func Run(opt Options) Result {
	if opt.Virtual <= 0 {
		opt.Virtual = 40 * time.Second
	}
	if opt.TraceLines <= 0 {
		opt.TraceLines = 400
	}
	rng := rand.New(rand.NewSource(opt.Seed))
	w := &world{opt: opt, set: draw(rng, opt), rng: rng, start: time.Now(), chk: faults.NewChecker(),
		trace: &trace{}, store: newStore(), kinds: map[string]int{}, faultKinds: map[string]int{}, dataLost: map[int]bool{}, violationAt: -1}
	running.Store(w.trace)
	w.end = w.start.Add(opt.Virtual)
	w.quiet = w.start.Add(opt.Virtual * 7 / 10)
	w.trace.add(0, fmt.Sprintf("seed %d: %s", opt.Seed, w.set))
	w.build()
	w.run()
	w.teardown()
	w.check()
	w.mu.Lock()
	defer w.mu.Unlock()
	res := Result{Seed: opt.Seed, Setup: w.set.String(), Acquisitions: w.acquired, Faults: w.faults,
		Virtual: w.now(), Violations: w.violations, Trace: w.trace.last(opt.TraceLines), Kinds: w.kinds, FaultKinds: w.faultKinds, At: -1,
		FalseExclusions: w.falseExclusions}
	if len(w.violations) > 0 && w.violationAt >= 0 {
		res.At = w.violationAt
		res.Around = w.trace.between(w.violationAt-time.Second, w.violationAt+time.Second/2)
	}
	return res
}

func (w *world) build() {
	w.started, w.losses = make([][]time.Duration, w.set.nodes), make([][]time.Duration, w.set.nodes)
	w.faultyUntil = make([]time.Time, w.set.nodes)
	w.healthyFrom = make([]time.Time, w.set.nodes)
	w.unstalledFrom = map[int]time.Time{}
	w.clusters = make([]*simCluster, w.set.nodes)
	for i := range w.set.nodes {
		if i < w.set.clusters {
			w.clusters[i] = newCluster(i, w.set.shards)
			w.nodes = append(w.nodes, w.clusters[i].shards[0])
			continue
		}
		w.nodes = append(w.nodes, simnode.New(fmt.Sprintf("sim%d:6379", i+1)))
	}
	for ci := range w.set.clients {
		name := fmt.Sprintf("c%d", ci+1)
		sc := &simClient{name: name, clk: faults.NewClock(w.set.clientRates[ci])}
		ps := make([]pool.Pool, len(w.nodes))
		for i, n := range w.nodes {
			if cl := w.clusters[i]; cl != nil {
				cp := &clusterPool{addr: n.Addr(), cl: cl}
				for _, sh := range cl.shards {
					cp.shards = append(cp.shards, w.newPool(sh, name))
				}
				sc.pools = append(sc.pools, cp.shards...)
				ps[i] = cp
				continue
			}
			p := w.newPool(n, name)
			sc.pools = append(sc.pools, p)
			ps[i] = p
		}
		opts := []redlock.Option{redlock.WithNodeTimeout(w.set.nodeTimeout), redlock.WithClock(sc.clk),
			redlock.WithRestartSafety(w.set.clientMaxTTL[ci]), redlock.WithObserver(&exclusionLog{w: w, ci: ci})}
		if w.set.clientDurable[ci] {
			opts = append(opts, redlock.WithDurableNodes())
		}
		if w.set.clientBlind[ci] {
			for _, n := range w.allNodes() {
				n.Deny(name, "info|replication")
			}
		}
		c, err := redlock.New(ps, opts...)
		if err != nil {
			panic(err)
		}
		sc.c = c
		w.clients = append(w.clients, sc)
	}
}

// newPool is client's pool of node n.
func (w *world) newPool(n *simnode.Node, client string) *pool.Node {
	p, err := pool.New(n.Addr(), pool.WithDialer(n.Dialer(client)), pool.WithIOTimeout(time.Second), pool.WithDialTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	return p
}

// allNodes returns every simulated node: the standalone nodes, and every
// shard of the cluster nodes.
func (w *world) allNodes() []*simnode.Node {
	var out []*simnode.Node
	for i, n := range w.nodes {
		if cl := w.clusters[i]; cl != nil {
			out = append(out, cl.shards...)
		} else {
			out = append(out, n)
		}
	}
	return out
}

// at returns the node (or the shard of cluster node i) that holds key.
func (w *world) at(i int, key string) *simnode.Node {
	if cl := w.clusters[i]; cl != nil {
		return cl.shards[cl.serving(keyslot.Slot(key))]
	}
	return w.nodes[i]
}

// run starts the workers and the fault schedule and waits for them.
func (w *world) run() {
	ctx, cancel := context.WithDeadline(context.Background(), w.end)
	defer cancel()
	var wg sync.WaitGroup
	for ci, sc := range w.clients {
		for k := range w.set.workers {
			wk := &worker{w: w, sc: sc, ci: ci, name: fmt.Sprintf("%s/w%d", sc.name, k+1),
				rng: rand.New(rand.NewSource(w.opt.Seed*1000 + int64(ci*10+k)))}
			wg.Add(1)
			go func() { defer wg.Done(); wk.run(ctx) }()
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); w.schedule(ctx) }()
	if w.set.legacy {
		wg.Add(1)
		go func() { defer wg.Done(); w.legacyChecks(ctx) }()
	}
	// One Client observes the election (each observer asks every node
	// at every new leader: more would cost more than they check).
	wg.Add(1)
	go func() { defer wg.Done(); w.observe(ctx, 0, w.clients[0]) }()
	// And one asks who leads, a few times a second.
	watcher := &worker{w: w, sc: w.clients[1], ci: 1, name: w.clients[1].name + "/watch",
		rng: rand.New(rand.NewSource(w.opt.Seed*1000 + 999))}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			sleep(ctx, time.Duration(50+watcher.rng.Intn(200))*time.Millisecond)
			if ctx.Err() == nil {
				watcher.leader(ctx)
			}
		}
	}()
	wg.Wait()
}

// teardown heals every node, closes the Clients and the nodes.
func (w *world) teardown() {
	cmds := 0
	for _, n := range w.allNodes() {
		cmds += n.Stats().Commands
	}
	w.trace.add(w.now(), fmt.Sprintf("commands delivered: %d", cmds))
	for _, n := range w.allNodes() {
		n.Heal("")
		n.Resume()
	}
	for _, sc := range w.clients {
		_ = sc.c.Close()
		for _, p := range sc.pools {
			_ = p.Close()
		}
	}
	for _, n := range w.allNodes() {
		n.Close()
	}
}

// running is the trace of the seed being run, for a report of a seed
// that hangs (RunningTrace).
var running atomic.Pointer[trace]

// RunningTrace returns the last 400 lines of the trace of the seed being
// run, or of the last one run; nil before any.
func RunningTrace() []string {
	if t := running.Load(); t != nil {
		return t.last(400)
	}
	return nil
}

// trace keeps what happened in a seed, each line with its virtual time,
// for a failure's report.
type trace struct {
	mu    sync.Mutex
	lines []string
	at    []time.Duration
}

func (t *trace) add(at time.Duration, line string) {
	t.mu.Lock()
	t.lines = append(t.lines, fmt.Sprintf("%10.4fs %s", at.Seconds(), line))
	t.at = append(t.at, at)
	t.mu.Unlock()
}

// last returns the last n lines.
func (t *trace) last(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.lines[max(len(t.lines)-n, 0):])
}

// between returns the lines of times from a to b, at most 2,000.
func (t *trace) between(a, b time.Duration) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for i, at := range t.at {
		if a <= at && at <= b && len(out) < 2000 {
			out = append(out, t.lines[i])
		}
	}
	return out
}

// store is the resource the locks protect: a counter per key (lost
// updates) and a fenced register per key (writes in fence order).
type store struct {
	mu       sync.Mutex
	counters map[string]int64
	incs     map[string]int64
	fences   map[string]uint64
}

func newStore() *store {
	return &store{counters: map[string]int64{}, incs: map[string]int64{}, fences: map[string]uint64{}}
}

func (s *store) read(key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[key]
}

func (s *store) write(key string, v int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counters[key] = v
	s.incs[key]++
}

// fencedWrite accepts a write whose fence is above every fence accepted
// for key before it.
func (s *store) fencedWrite(key string, fence uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.fences[key] {
		return false
	}
	s.fences[key] = fence
	return true
}

// lost returns the keys whose counter is below the number of writes.
func (s *store) lost() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, n := range s.incs {
		if s.counters[k] != n {
			out = append(out, fmt.Sprintf("%s: %d increments, counter %d", k, n, s.counters[k]))
		}
	}
	sort.Strings(out)
	return out
}
