package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// Values of -mode.
const (
	modeLatency    = "latency"    // 1 worker, its own key, with the floor
	modeThroughput = "throughput" // many workers, a key each
	modeContended  = "contended"  // many workers, one key, held for -hold
	modeTakeover   = "takeover"   // many workers, one key, holders die instead of Unlock
	modeSemaphore  = "semaphore"  // one worker uncontended, then more workers than permits
	modeRWLock     = "rwlock"     // readers and writers on one read-write lock
	modeElection   = "election"   // candidates; each leader dies or resigns in turn
	modeFresh      = "fresh"      // bursts of new Clients, each taking a key of its own (fresh.go)
)

// modes lists the values of -mode that measure the mutex.
var modes = []string{modeLatency, modeThroughput, modeContended, modeTakeover}

// kindModes lists the values of -mode that measure the other kinds of
// lock (kinds.go).
var kindModes = []string{modeSemaphore, modeRWLock, modeElection}

// Values of -client (also -pool, its older name).
const (
	poolPipelined = "pipelined" // pool.New
	poolPlain     = "redigo"    // pool.FromRedigo on a redigo *redis.Pool; "plain" is its older name
	poolGoredis   = "goredis"   // pool/goredis on a go-redis *redis.Client
	poolRueidis   = "rueidis"   // pool/rueidispool on a rueidis client
	poolPolling   = "polling"   // pollClient: redsync-style, on a redigo *redis.Pool per node
	poolBoth      = "both"      // pipelined, then redigo
	poolAll       = "all"       // pipelined, redigo, goredis, rueidis, then polling
	poolPlainOld  = "plain"     // = redigo
)

// poolValues lists the values of -client, for messages.
var poolValues = []string{poolPipelined, poolPlain, poolGoredis, poolRueidis, poolPolling, poolBoth, poolAll}

// Values of the hidden -backend flag, which picks what serves the nodes
// when -addrs is not given. It exists so that tests can force the fallback.
const (
	backendAuto      = "auto"         // redis-server if installed, else miniredis
	backendRedis     = "redis-server" // redis-server, or fail
	backendMiniredis = "miniredis"    // in-process servers
)

const (
	// defaultNodes is how many nodes the tool starts itself.
	defaultNodes = 5
	// defaultContendedHold is -hold in contended and takeover modes when
	// not given.
	defaultContendedHold = 10 * time.Millisecond
	// defaultTTL is -ttl when not given, except in takeover mode.
	defaultTTL = 10 * time.Second
	// defaultTakeoverTTL is -ttl in takeover mode when not given: every
	// takeover waits for it, so it sets how many a run measures (about
	// 25 in the default 3 seconds).
	defaultTakeoverTTL = 100 * time.Millisecond
	// defaultPermits is -permits in semaphore mode when not given.
	defaultPermits = 4
	// defaultReaders and defaultWriters are -readers and -writers in
	// rwlock mode when not given.
	defaultReaders, defaultWriters = 4, 1
	// defaultCandidates is -workers in election mode when not given.
	defaultCandidates = 3
	// defaultElectionTTL is -ttl in election mode when not given: every
	// death waits for it.
	defaultElectionTTL = 500 * time.Millisecond
	// defaultTerms is -terms in election mode when not given: half the
	// leaders die, half resign.
	defaultTerms = 20
	// defaultElectionDuration bounds an election run when -duration is
	// not given: the run ends after -terms terms, or then.
	defaultElectionDuration = time.Minute
	// defaultFreshClients is -clients in fresh mode when not given.
	defaultFreshClients = 200
	// defaultTries, defaultPause and defaultBursts are -tries, -pause and
	// -bursts in fresh mode when not given.
	defaultTries, defaultPause, defaultBursts = 3, 250 * time.Millisecond, 3
	// byMode marks a setting whose default depends on the mode; see
	// config.withDefaults.
	byMode = -1
	// noNode marks -pause-node and -kill-node as not given.
	noNode = -1
)

// config is what the flags ask for.
type config struct {
	mode        string        // one of modes or kindModes
	pool        string        // one of poolValues
	addrs       []string      // existing nodes; empty: start nodes
	nodes       int           // how many nodes to start without addrs
	duration    time.Duration // how long to measure, per pool kind (and phase); byMode: by mode
	workers     int           // concurrent workers; 0: by mode
	clients     int           // redlock Clients the workers are spread over; 0: by mode
	ttl         time.Duration // lock TTL; byMode: by mode
	hold        time.Duration // how long a worker holds each lock; byMode: by mode
	nodeTimeout time.Duration // redlock node timeout
	floor       bool          // measure the floor in every mode, not only latency
	pauseNode   int           // node to SIGSTOP, or noNode
	killNode    int           // node to SIGKILL, or noNode
	faultAfter  time.Duration // when to break it; 0: duration/3
	json        bool          // JSON on stdout instead of the table
	plot        string        // file for the latency picture; "" for none
	backend     string        // backendAuto, backendRedis or backendMiniredis
	permits     int           // semaphore mode: the semaphore's permits; 0: by mode
	readers     int           // rwlock mode: reader workers; byMode: by mode
	writers     int           // rwlock mode: writer workers; byMode: by mode
	terms       int           // election mode: successions to measure; 0: by mode
	tries       int           // fresh mode: TryLocks per Client at most; 0: by mode
	pause       time.Duration // fresh mode: between two TryLocks of a Client; byMode: by mode
	bursts      int           // fresh mode: bursts of new Clients; 0: by mode
	busy        int           // CPU-bound helper processes beside the run (fresh mode)
}

func defaultConfig() config {
	return config{
		mode:        modeLatency,
		pool:        poolPipelined,
		nodes:       defaultNodes,
		duration:    byMode,
		ttl:         byMode,
		hold:        byMode,
		nodeTimeout: 50 * time.Millisecond, // the library's default
		pauseNode:   noNode,
		killNode:    noNode,
		backend:     backendAuto,
		readers:     byMode,
		writers:     byMode,
		pause:       byMode,
	}
}

// withDefaults fills in the settings whose default depends on others.
func (c config) withDefaults() config {
	c = c.kindDefaults().freshDefaults()
	if c.duration == byMode {
		c.duration = 3 * time.Second
	}
	if c.workers == 0 {
		switch c.mode {
		case modeThroughput:
			c.workers = 32
		case modeContended, modeTakeover:
			c.workers = 8
		default:
			c.workers = 1
		}
	}
	if c.clients == 0 {
		c.clients = 1
		if c.sharedKey() {
			c.clients = c.workers // as many processes as workers
		}
	}
	if c.ttl == byMode {
		c.ttl = defaultTTL
		switch c.mode {
		case modeTakeover:
			c.ttl = defaultTakeoverTTL
		case modeElection:
			c.ttl = defaultElectionTTL
		}
	}
	if c.hold == byMode {
		c.hold = 0
		if c.sharedKey() {
			c.hold = defaultContendedHold
		}
	}
	if c.faultAfter == 0 {
		c.faultAfter = c.duration / 3
	}
	return c
}

// sharedKey reports whether the workers all lock one key (contended and
// takeover modes) or one semaphore, read-write lock or election, rather
// than a key each.
func (c config) sharedKey() bool {
	return c.mode == modeContended || c.mode == modeTakeover || c.kindMode()
}

// measureTime is the longest one pool kind's run measures: -duration,
// twice in semaphore mode (two phases).
func (c config) measureTime() time.Duration {
	if c.mode == modeSemaphore {
		return 2 * c.duration
	}
	return c.duration
}

// kindMode reports whether the mode measures a semaphore, a read-write
// lock or an election rather than the mutex.
func (c config) kindMode() bool { return slices.Contains(kindModes, c.mode) }

// workersPerClient is the most workers that share one Client.
func (c config) workersPerClient() int {
	return (c.workers + c.clients - 1) / c.clients
}

// poolKinds lists the pool kinds to run, in order.
func (c config) poolKinds() []string {
	switch c.pool {
	case poolBoth:
		return []string{poolPipelined, poolPlain}
	case poolAll:
		return []string{poolPipelined, poolPlain, poolGoredis, poolRueidis, poolPolling}
	case poolPlainOld:
		return []string{poolPlain}
	}
	return []string{c.pool}
}

// nodeCount is how many nodes the run uses.
func (c config) nodeCount() int {
	if len(c.addrs) > 0 {
		return len(c.addrs)
	}
	return c.nodes
}

// parseFlags reads the command line. Usage and errors go to stderr; -h
// returns flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("redlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var addrs string
	fs.StringVar(&cfg.mode, "mode", cfg.mode, "what to measure: \"latency\", \"throughput\", \"contended\" or \"takeover\" (the mutex), \"semaphore\", \"rwlock\" or \"election\", or \"fresh\" (what bursts of new Clients pay for their first locks)")
	fs.StringVar(&cfg.pool, "client", cfg.pool, "what carries the lock client's commands: \"pipelined\" (pool.New), \"redigo\" (a redigo pool per node, pool.FromRedigo), \"goredis\" (a go-redis client per node, pool/goredis), \"rueidis\" (a rueidis client per node, pool/rueidispool), \"polling\" (a redsync-style polling client instead of the library), \"both\" (pipelined, redigo) or \"all\" (all five)")
	fs.StringVar(&cfg.pool, "pool", cfg.pool, "the older name of -client (\"plain\" is \"redigo\")")
	fs.StringVar(&addrs, "addrs", "", "comma-separated `host:port` list of running Redis nodes to use instead of starting local ones")
	fs.IntVar(&cfg.nodes, "nodes", cfg.nodes, "how many local nodes to start (not with -addrs)")
	fs.Func("duration", "measure for `duration`, per pool kind and phase (default 3s; in election mode 1m, a bound: the run ends after -terms successions)", durationSetter(&cfg.duration))
	fs.IntVar(&cfg.workers, "workers", 0, "concurrent workers (default 1 for latency, 32 for throughput, 8 for contended and takeover, twice -permits for semaphore, 3 candidates for election; rwlock: -readers and -writers)")
	fs.Func("clients", "spread the workers round-robin over `N` redlock Clients, each with its own connections to every node (default one per worker for contended and takeover, 1 otherwise); fresh mode: the new Clients of each burst (default 200)", positiveSetter(&cfg.clients))
	fs.Func("ttl", "lock TTL `duration` (default 10s; 100ms for takeover, 500ms for election)", durationSetter(&cfg.ttl))
	fs.Func("hold", "hold each lock for `duration` before Unlock (default 10ms for contended, takeover, semaphore, rwlock and election (a leader's term), 0 otherwise)", durationSetter(&cfg.hold))
	kindFlags(fs, &cfg)
	freshFlags(fs, &cfg)
	fs.DurationVar(&cfg.nodeTimeout, "node-timeout", cfg.nodeTimeout, "redlock node timeout")
	fs.BoolVar(&cfg.floor, "floor", false, "also measure the floor in throughput and contended modes (always in latency mode)")
	fs.IntVar(&cfg.pauseNode, "pause-node", noNode, "pause (SIGSTOP) node `i` (from 0) after -fault-after; only nodes the tool started")
	fs.IntVar(&cfg.killNode, "kill-node", noNode, "kill (SIGKILL) node `i` (from 0) after -fault-after; only nodes the tool started")
	fs.Func("fault-after", "break the node this `duration` after measuring starts (default -duration/3)", durationSetter(&cfg.faultAfter))
	fs.BoolVar(&cfg.json, "json", false, "print the report as JSON on stdout instead of the table")
	fs.StringVar(&cfg.plot, "plot", "", "write the acquire latency distribution to `file` (.svg or .png)")
	fs.StringVar(&cfg.backend, "backend", cfg.backend, "") // hidden: see backendAuto
	fs.Usage = func() { usage(fs, defaultNodes) }
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["addrs"] && set["nodes"] {
		return cfg, errors.New("-nodes cannot be combined with -addrs: the nodes given are used")
	}
	if set["addrs"] {
		for _, a := range strings.Split(addrs, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cfg.addrs = append(cfg.addrs, a)
			}
		}
		if len(cfg.addrs) == 0 {
			return cfg, errors.New("-addrs lists no address")
		}
	}
	return cfg, cfg.validate()
}

// kindFlags defines the flags of the semaphore, rwlock and election
// modes.
func kindFlags(fs *flag.FlagSet, cfg *config) {
	fs.Func("permits", "semaphore mode: the semaphore's `K` permits (default 4)", positiveSetter(&cfg.permits))
	fs.Func("readers", "rwlock mode: `R` reader workers (default 4)", nonNegativeSetter(&cfg.readers))
	fs.Func("writers", "rwlock mode: `W` writer workers (default 1)", nonNegativeSetter(&cfg.writers))
	fs.Func("terms", "election mode: measure `N` successions, from a leader's end (by resigning and by dying, in turn) to the next leader (default 20)", positiveSetter(&cfg.terms))
}

// durationSetter parses a flag's duration into d.
func durationSetter(d *time.Duration) func(string) error {
	return func(s string) error {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = v
		return nil
	}
}

// positiveSetter parses a flag's integer into n, which must be at least 1.
func positiveSetter(n *int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not an integer")
		}
		if v < 1 {
			return fmt.Errorf("%d must be at least 1", v)
		}
		*n = v
		return nil
	}
}

// nonNegativeSetter parses a flag's integer into n, which must be at
// least 0.
func nonNegativeSetter(n *int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not an integer")
		}
		if v < 0 {
			return fmt.Errorf("%d must not be negative", v)
		}
		*n = v
		return nil
	}
}

// usage prints the help text, without the hidden -backend flag.
func usage(fs *flag.FlagSet, nodes int) {
	fmt.Fprintf(fs.Output(), "Usage: redlock-bench [flags]\n\n"+
		"Starts %d local redis-server nodes (or uses -addrs), takes and releases\n"+
		"locks for -duration and prints latency percentiles and rounds/s.\n\nFlags:\n", nodes)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "backend" {
			return
		}
		name, text := flag.UnquoteUsage(f)
		fmt.Fprintf(fs.Output(), "  -%s %s\n    \t%s", f.Name, name, text)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "-1" {
			fmt.Fprintf(fs.Output(), " (default %s)", f.DefValue)
		}
		fmt.Fprintln(fs.Output())
	})
}

// validate reports settings that cannot work. It takes the config before
// withDefaults.
func (c config) validate() error {
	d := c.withDefaults()
	switch {
	case !slices.Contains(modes, c.mode) && !c.kindMode() && c.mode != modeFresh:
		return fmt.Errorf("-mode %q: want one of %s, %s", c.mode, strings.Join(append(slices.Clone(modes), kindModes...), ", "), modeFresh)
	case !slices.Contains(poolValues, c.pool) && c.pool != poolPlainOld:
		return fmt.Errorf("-client %q: want one of %s", c.pool, strings.Join(poolValues, ", "))
	case c.nodes < 1:
		return fmt.Errorf("-nodes %d must be at least 1", c.nodes)
	case c.duration <= 0 && c.duration != byMode:
		return fmt.Errorf("-duration %v must be positive", c.duration)
	case c.workers < 0:
		return fmt.Errorf("-workers %d must be at least 1", c.workers)
	case c.mode == modeLatency && d.workers != 1:
		return fmt.Errorf("-mode latency uses 1 worker (got -workers %d); use -mode throughput for more", d.workers)
	case c.clients < 0:
		return fmt.Errorf("-clients %d must be at least 1", c.clients)
	case d.clients > d.workers:
		return fmt.Errorf("-clients %d is more than the %s: every client needs a worker (-workers)", d.clients, plural(d.workers, "worker"))
	case c.ttl <= 0 && c.ttl != byMode:
		return fmt.Errorf("-ttl %v must be positive", c.ttl)
	case c.hold < 0 && c.hold != byMode:
		return fmt.Errorf("-hold %v must not be negative", c.hold)
	case d.hold >= d.ttl:
		return fmt.Errorf("-hold %v must be shorter than -ttl %v, or the locks expire while held", d.hold, d.ttl)
	case c.nodeTimeout <= 0:
		return fmt.Errorf("-node-timeout %v must be positive", c.nodeTimeout)
	case c.faultAfter < 0:
		return fmt.Errorf("-fault-after %v must not be negative", c.faultAfter)
	}
	if err := c.validateFault(); err != nil {
		return err
	}
	if err := c.validateKind(); err != nil {
		return err
	}
	if err := c.validateFresh(); err != nil {
		return err
	}
	if ext := strings.ToLower(filepath.Ext(c.plot)); c.plot != "" && ext != ".svg" && ext != ".png" {
		return fmt.Errorf("-plot %q: the file name must end in .svg or .png", c.plot)
	}
	switch c.backend {
	case backendAuto:
	case backendRedis, backendMiniredis:
		if len(c.addrs) > 0 {
			return fmt.Errorf("-backend %s cannot be combined with -addrs", c.backend)
		}
	default:
		return fmt.Errorf("-backend %q: want %q, %q or %q", c.backend, backendAuto, backendRedis, backendMiniredis)
	}
	return nil
}

// validateFault checks -pause-node, -kill-node and -fault-after.
func (c config) validateFault() error {
	f := c.fault()
	if f == nil {
		if c.faultAfter != 0 {
			return errors.New("-fault-after needs -pause-node or -kill-node")
		}
		return nil
	}
	switch {
	case c.pauseNode != noNode && c.killNode != noNode:
		return errors.New("-pause-node and -kill-node cannot be combined: break one node per run")
	case len(c.addrs) > 0:
		return fmt.Errorf("-%s-node breaks only nodes the tool starts; it never touches nodes given with -addrs", f.kind)
	case f.node < 0 || f.node >= c.nodeCount():
		return fmt.Errorf("-%s-node %d: want a node from 0 to %d", f.kind, f.node, c.nodeCount()-1)
	case c.withDefaults().faultAfter >= c.withDefaults().duration:
		return fmt.Errorf("-fault-after %v must be shorter than -duration %v", c.faultAfter, c.withDefaults().duration)
	}
	return nil
}

// kindDefaults fills in the settings of the semaphore, rwlock and
// election modes: permits, readers and writers, terms, and the workers
// and duration that follow from them.
func (c config) kindDefaults() config {
	switch c.mode {
	case modeSemaphore:
		if c.permits == 0 {
			c.permits = defaultPermits
		}
		if c.workers == 0 {
			c.workers = 2 * c.permits
		}
	case modeRWLock:
		if c.readers == byMode {
			c.readers = defaultReaders
		}
		if c.writers == byMode {
			c.writers = defaultWriters
		}
		c.workers = c.readers + c.writers
	case modeElection:
		if c.terms == 0 {
			c.terms = defaultTerms
		}
		if c.workers == 0 {
			c.workers = defaultCandidates
		}
		if c.duration == byMode {
			c.duration = defaultElectionDuration
		}
	}
	return c
}

// validateKind checks the settings of the semaphore, rwlock and election
// modes, and that the other modes were not given them. It takes the
// config before withDefaults.
func (c config) validateKind() error {
	if err := c.kindFlagsOnly(); err != nil {
		return err
	}
	if !c.kindMode() {
		return nil
	}
	d := c.withDefaults()
	switch {
	case c.pool == poolPolling || c.pool == poolAll:
		return fmt.Errorf("-mode %s measures the library's %s: -client %s runs the polling client, which has none (use pipelined, redigo, goredis, rueidis or both)", c.mode, c.mode, c.pool)
	case c.fault() != nil || c.floor || c.plot != "":
		return fmt.Errorf("-mode %s takes no -pause-node, -kill-node, -floor or -plot", c.mode)
	case c.mode == modeSemaphore && d.permits > redlock.MaxPermits:
		return fmt.Errorf("-permits %d: a semaphore has at most %d", d.permits, redlock.MaxPermits)
	case c.mode == modeSemaphore && d.workers <= d.permits:
		return fmt.Errorf("-workers %d must be more than -permits %d: the contended phase needs workers that wait", d.workers, d.permits)
	case c.mode == modeRWLock && c.workers != 0:
		return errors.New("-mode rwlock takes -readers and -writers, not -workers")
	case c.mode == modeRWLock && d.readers+d.writers == 0:
		return errors.New("-readers 0 -writers 0: rwlock mode needs a reader or a writer")
	case c.mode == modeElection && d.workers < 2:
		return fmt.Errorf("-workers %d: an election needs at least 2 candidates, so that another can take over", d.workers)
	case c.mode == modeElection && d.clients != d.workers:
		return fmt.Errorf("-clients %d: in election mode every candidate has a Client of its own (a death closes it)", d.clients)
	}
	return nil
}

// kindFlagsOnly refuses -permits, -readers, -writers and -terms outside
// the modes they belong to.
func (c config) kindFlagsOnly() error {
	switch {
	case c.permits != 0 && c.mode != modeSemaphore:
		return fmt.Errorf("-permits is for -mode semaphore (not %s)", c.mode)
	case (c.readers != byMode || c.writers != byMode) && c.mode != modeRWLock:
		return fmt.Errorf("-readers and -writers are for -mode rwlock (not %s)", c.mode)
	case c.terms != 0 && c.mode != modeElection:
		return fmt.Errorf("-terms is for -mode election (not %s)", c.mode)
	}
	return nil
}
