// Command redlock-bench measures how long the redlock client takes to
// acquire and release locks on a set of Redis nodes.
//
// Usage:
//
//	redlock-bench [flags]
//
// With no flags it starts 5 local redis-server processes on free ports of
// 127.0.0.1 (the binary is looked up on $PATH, or named by $REDIS_SERVER),
// runs one worker for 3 seconds and prints a report; the servers are
// stopped before it exits. When redis-server is not installed it falls back
// to 5 in-process servers (miniredis) and warns on stderr that their figures
// are not representative; install redis-server (apt-get install
// redis-server) for real figures.
//
// With -addrs it uses nodes that are already running and starts nothing:
//
//	redlock-bench -addrs 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
//
// Each worker first takes and releases its lock once, unmeasured, so that
// connections are dialled before measuring starts (bounded by one second
// and by -duration). Then, until -duration has passed, it loops: Lock (which
// retries until it acquires or the run ends), then Unlock. It records the
// latency of each acquisition and each release. With -keys=one all workers
// share one key, so acquisition latency includes waiting for the others.
//
// Flags:
//
//	-addrs host:port,...  use these nodes instead of starting local ones
//	-duration d           how long to measure (default 3s)
//	-workers n            concurrent workers, each with its own lock calls (default 1)
//	-ttl d                lock TTL (default 10s)
//	-node-timeout d       redlock node timeout (default redlock.DefaultNodeTimeout, 50ms)
//	-keys distinct|one    a key per worker (default), or one key shared by all
//
// The report gives the backend (the Redis version from INFO server), the
// number of nodes, workers and the measured duration; acquire and release
// latency percentiles (p50, p90, p99, max, nearest rank over all samples);
// completed lock+unlock rounds per second; the connections the nodes
// accepted while measuring; errors counted by kind with the first message
// of each kind; Lock calls cut short by the end of the run; and, on nodes
// the tool started, lock keys still present after every Unlock returned.
//
// The run always ends by itself. Interrupt (Ctrl-C) or SIGTERM ends it
// early: the report for the time measured so far is still printed and
// servers the tool started are stopped. The exit status is 0 after a
// report, 1 when the run could not be made, 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
		os.Exit(1)
	}
}

// Values of -keys.
const (
	keysDistinct = "distinct"
	keysOne      = "one"
)

// Values of the hidden -backend flag, which picks what serves the nodes
// when -addrs is not given. It exists so that tests can force the fallback.
const (
	backendAuto      = "auto"         // redis-server if installed, else miniredis
	backendRedis     = "redis-server" // redis-server, or fail
	backendMiniredis = "miniredis"    // in-process servers
)

// defaultNodes is how many nodes the tool starts itself.
const defaultNodes = 5

// config is what the flags ask for.
type config struct {
	addrs       []string      // existing nodes; empty: start defaultNodes
	duration    time.Duration // how long to measure
	workers     int           // concurrent workers
	ttl         time.Duration // lock TTL
	nodeTimeout time.Duration // redlock node timeout
	keys        string        // keysDistinct or keysOne
	backend     string        // backendAuto, backendRedis or backendMiniredis
}

func defaultConfig() config {
	return config{
		duration:    3 * time.Second,
		workers:     1,
		ttl:         10 * time.Second,
		nodeTimeout: redlock.DefaultNodeTimeout,
		keys:        keysDistinct,
		backend:     backendAuto,
	}
}

// parseFlags reads the command line. Usage and errors go to stderr; -h
// returns flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("redlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var addrs string
	fs.StringVar(&addrs, "addrs", "", "comma-separated `host:port` list of running Redis nodes to use instead of starting local ones")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long to measure")
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "number of concurrent workers")
	fs.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "lock TTL")
	fs.DurationVar(&cfg.nodeTimeout, "node-timeout", cfg.nodeTimeout, "redlock node timeout")
	fs.StringVar(&cfg.keys, "keys", cfg.keys, "\"distinct\": one key per worker; \"one\": one key shared by all workers")
	fs.StringVar(&cfg.backend, "backend", cfg.backend, "") // hidden: see backendAuto
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: redlock-bench [flags]\n\n"+
			"Starts %d local redis-server nodes (or uses -addrs), takes and releases\n"+
			"locks for -duration and prints latency percentiles and rounds/s.\n\nFlags:\n", defaultNodes)
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == "backend" {
				return
			}
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(fs.Output(), "  -%s %s\n    \t%s", f.Name, name, usage)
			if f.DefValue != "" {
				fmt.Fprintf(fs.Output(), " (default %s)", f.DefValue)
			}
			fmt.Fprintln(fs.Output())
		})
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if addrs != "" {
		for _, a := range strings.Split(addrs, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cfg.addrs = append(cfg.addrs, a)
			}
		}
	}
	return cfg, cfg.validate(addrs != "")
}

func (c config) validate(addrsGiven bool) error {
	switch {
	case addrsGiven && len(c.addrs) == 0:
		return errors.New("-addrs lists no address")
	case c.duration <= 0:
		return fmt.Errorf("-duration %v must be positive", c.duration)
	case c.workers < 1:
		return fmt.Errorf("-workers %d must be at least 1", c.workers)
	case c.ttl <= 0:
		return fmt.Errorf("-ttl %v must be positive", c.ttl)
	case c.nodeTimeout <= 0:
		return fmt.Errorf("-node-timeout %v must be positive", c.nodeTimeout)
	case c.keys != keysDistinct && c.keys != keysOne:
		return fmt.Errorf("-keys %q: want %q or %q", c.keys, keysDistinct, keysOne)
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
