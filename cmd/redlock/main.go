// Command redlock is an operator's tool for the locks of the redlock
// library: it shows what every node holds for a lock key, and can force a
// stuck lock free.
//
// Usage ('redlock help' and 'redlock help COMMAND' print each command's
// flags, with their defaults, and an example):
//
//	redlock inspect -addrs host:port,host:port,... KEY
//	redlock inspect -addrs ... -kind semaphore [-permits K] NAME
//	redlock inspect -addrs ... -kind rwlock NAME
//	redlock inspect -addrs ... -kind election NAME
//	redlock force-release -addrs host:port,... -yes KEY
//	redlock nodes -addrs host:port,... [-max-ttl d]
//
// inspect prints, node by node, whether the key is held and by which
// Client (its ID, as Client.ID reports it), the key's remaining TTL, how
// many Lock calls are queued for it, and its fence counter. It writes
// nothing. With -kind it inspects the other kinds of lock by their name:
// a semaphore's permits in use (slot, holder, TTL), its size on each node
// and its queued Acquire calls (-permits says how many slots to read; by
// default every slot a semaphore may have, MaxPermits); a read-write
// lock's mode (free, read or write), its writer, live readers and a
// waiting writer's intent; an election's leader (value, term, Client,
// TTL), each node's record and fence counter, and the queued campaigns.
// A first line says what a quorum of nodes agrees on.
//
// nodes prints, node by node, whether restart safety counts the node
// toward quorums: its run id, uptime, whether it is marked, and, while it
// is kept out after a restart or a failover, for how much longer, for
// Clients whose maximum TTL (WithRestartSafety) is -max-ttl (default 1m).
// A replica is never counted. It writes nothing. During a rolling restart, restart the next node once this
// counts the previous one again.
//
// force-release gives the key up on every node whatever it holds, as its
// holder's Unlock would (the longest waiting Lock call gets it). It is
// dangerous: the holder is not told and may go on working beside the next
// holder until its next extension fails. It asks for -yes.
//
// Credentials come from the environment, never from flags (which other
// users of the machine can read): REDLOCK_PASSWORD, and REDLOCK_USER for
// an ACL user. -tls connects with TLS, verifying the nodes against the
// system's roots. See docs/operations.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// usageError is a command line that cannot be run; it exits with 2.
// usage is the usage line printed with it.
type usageError struct{ msg, usage string }

func (e usageError) Error() string { return e.msg }

// helpRequest is a command line that asks for help: text goes to the
// standard output, and the command exits with 0.
type helpRequest struct{ text string }

func (h helpRequest) Error() string { return "help requested" }

// run runs the command line args and returns the exit code: 0 when done
// (or help was asked for), 1 when a node or the lock call failed, 2 on a
// bad command line.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	err := dispatch(args, stdout, getenv)
	var ue usageError
	var help helpRequest
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "redlock:", err)
		usage := ue.usage
		if usage == "" {
			usage = "redlock inspect|force-release|nodes [flags] [KEY]"
		}
		fmt.Fprintf(stderr, "usage: %s\nrun 'redlock help' for the commands, 'redlock help COMMAND' for one's flags\n", usage)
		return 2
	}
	fmt.Fprintln(stderr, "redlock:", err)
	return 1
}

// command is a parsed command line.
type command struct {
	cmd, key, kind string
	addrs          []string
	permits        int
	useTLS, yes    bool
	timeout        time.Duration
	maxTTL         time.Duration
}

// spec describes one command: what it does, its usage line, its own flags
// (besides -addrs, -tls and -timeout, which every command takes) and an
// example.
type spec struct {
	name, brief, usage, summary, example string
	flags                                func(fs *flag.FlagSet, c *command)
}

var specs = []spec{
	{
		name:    "inspect",
		brief:   "show what every node holds for a lock (writes nothing)",
		usage:   "redlock inspect -addrs host:port,... [-kind mutex|semaphore|rwlock|election] [-permits K] KEY",
		summary: "Prints, node by node, what each node holds for a lock: for a mutex its holder (the Client's ID), TTL, queued Lock calls and fence counter; with -kind, a semaphore's permits, a read-write lock's writer and readers, or an election's leader and records. A first line says what a quorum agrees on. It writes nothing.",
		example: "redlock inspect -addrs 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379 -kind semaphore -permits 4 pool",
		flags: func(fs *flag.FlagSet, c *command) {
			fs.StringVar(&c.kind, "kind", "mutex", "the kind of lock KEY names: mutex, semaphore, rwlock or election")
			fs.IntVar(&c.permits, "permits", redlock.MaxPermits, "-kind semaphore: how many permit slots to read")
		},
	},
	{
		name:    "force-release",
		brief:   "free a stuck mutex on every node (asks for -yes)",
		usage:   "redlock force-release -addrs host:port,... -yes KEY",
		summary: "Gives a mutex's key up on every node, whatever it holds, as its holder's Unlock would (the longest waiting Lock call gets it). Dangerous: the holder is not told, and may go on working beside the next holder until its next extension fails.",
		example: "redlock force-release -addrs 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379 -yes orders:42",
		flags: func(fs *flag.FlagSet, c *command) {
			fs.BoolVar(&c.yes, "yes", false, "confirm that the holder may still be running")
		},
	},
	{
		name:    "nodes",
		brief:   "show whether restart safety counts each node (writes nothing)",
		usage:   "redlock nodes -addrs host:port,... [-max-ttl d]",
		summary: "Prints, node by node, whether restart safety counts the node toward quorums: its run id, uptime, whether it is marked, and, while it is kept out after a restart or a failover, for how much longer; a replica is never counted. During a rolling restart, restart the next node once this counts the previous one again. It writes nothing.",
		example: "redlock nodes -addrs 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379 -max-ttl 30s",
		flags: func(fs *flag.FlagSet, c *command) {
			fs.DurationVar(&c.maxTTL, "max-ttl", time.Minute, "the Clients' maximum TTL (WithRestartSafety)")
		},
	},
}

// flagSet returns the flags of command sp, writing into c; addrs gets
// -addrs.
func flagSet(sp spec, c *command, addrs *string) *flag.FlagSet {
	fs := flag.NewFlagSet(sp.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(addrs, "addrs", "", "comma-separated host:port of every Redlock node, in any order (required)")
	fs.BoolVar(&c.useTLS, "tls", false, "connect with TLS, verifying the nodes against the system's roots")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "how long to wait for the nodes")
	sp.flags(fs, c)
	return fs
}

// help is the help of every command (sp nil) or of one.
func help(sp *spec) string {
	var b strings.Builder
	if sp == nil {
		b.WriteString("redlock is an operator's tool for the locks of the redlock library.\n\nUsage:\n\n\tredlock COMMAND [flags] [KEY]\n\nCommands:\n\n")
		for _, s := range specs {
			fmt.Fprintf(&b, "\t%-14s %s\n", s.name, s.brief)
		}
		b.WriteString("\nRun 'redlock help COMMAND' (or 'redlock COMMAND -h') for a command's flags and an example.\n" +
			"Credentials come from the environment, never from flags: REDLOCK_PASSWORD, and REDLOCK_USER for an ACL user.\n")
		return b.String()
	}
	var c command
	var addrs string
	fs := flagSet(*sp, &c, &addrs)
	fs.SetOutput(&b)
	fmt.Fprintf(&b, "usage: %s\n\n%s\n\nFlags:\n", sp.usage, wrap(sp.summary, 72))
	fs.PrintDefaults()
	fmt.Fprintf(&b, "\nExample:\n\n\t%s\n", sp.example)
	return b.String()
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		switch {
		case i == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// find returns the command named name.
func find(name string) *spec {
	for i := range specs {
		if specs[i].name == name {
			return &specs[i]
		}
	}
	return nil
}

// parse reads a command line, or says why it cannot be run (usageError)
// or that it asks for help (helpRequest).
func parse(args []string) (*command, error) {
	if len(args) == 0 {
		return nil, usageError{msg: "no command"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return nil, helpRequest{help(nil)}
	case "help":
		if len(args) == 1 {
			return nil, helpRequest{help(nil)}
		}
		sp := find(args[1])
		if sp == nil || len(args) > 2 {
			return nil, usageError{msg: fmt.Sprintf("help: unknown command %q", strings.Join(args[1:], " ")), usage: "redlock help [COMMAND]"}
		}
		return nil, helpRequest{help(sp)}
	}
	sp := find(args[0])
	if sp == nil {
		return nil, usageError{msg: fmt.Sprintf("unknown command %q", args[0])}
	}
	c := &command{cmd: sp.name, kind: "mutex"}
	var addrs string
	fs := flagSet(*sp, c, &addrs)
	bad := func(msg string) error { return usageError{msg: msg, usage: sp.usage} }
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, helpRequest{help(sp)}
		}
		return nil, bad(err.Error())
	}
	switch {
	case c.cmd == "nodes" && fs.NArg() != 0:
		return nil, bad("nodes takes no KEY")
	case c.cmd != "nodes" && (fs.NArg() != 1 || fs.Arg(0) == ""):
		return nil, bad("want exactly one KEY")
	case addrs == "":
		return nil, bad("-addrs is required")
	case c.kind != "mutex" && c.kind != "semaphore" && c.kind != "rwlock" && c.kind != "election":
		return nil, bad(fmt.Sprintf("unknown -kind %q: want mutex, semaphore, rwlock or election", c.kind))
	case c.kind == "semaphore" && (c.permits < 1 || c.permits > redlock.MaxPermits):
		return nil, bad(fmt.Sprintf("-permits %d: a semaphore has from 1 to %d", c.permits, redlock.MaxPermits))
	case c.cmd == "force-release" && !c.yes:
		return nil, bad("force-release needs -yes: the holder is not told, and may run beside the next holder")
	}
	c.key, c.addrs = fs.Arg(0), strings.Split(addrs, ",")
	return c, nil
}

func dispatch(args []string, stdout io.Writer, getenv func(string) string) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	client, pools, closeAll, err := connect(c.addrs, c.useTLS, c.timeout, getenv)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	switch c.cmd {
	case "nodes":
		return nodes(ctx, stdout, pools, c.maxTTL)
	case "force-release":
		if err := client.ForceRelease(ctx, c.key); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "released %q on every node\n", c.key)
		return nil
	}
	return inspect(ctx, stdout, client, c)
}

// inspect inspects c.key as c.kind says and prints what it found.
func inspect(ctx context.Context, w io.Writer, client *redlock.Client, c *command) error {
	switch c.kind {
	case "semaphore":
		in, err := client.Semaphore(c.key, c.permits).Inspect(ctx)
		if err != nil {
			return err
		}
		return printSemaphore(w, in)
	case "rwlock":
		in, err := client.RWLock(c.key).Inspect(ctx)
		if err != nil {
			return err
		}
		return printRWLock(w, in)
	case "election":
		in, err := client.Election(c.key).Inspect(ctx)
		if err != nil {
			return err
		}
		return printElection(w, in)
	}
	in, err := client.Inspect(ctx, c.key)
	if err != nil {
		return err
	}
	return printInspection(w, in)
}

// connect makes a Client over the nodes at addrs, and returns their pools.
func connect(addrs []string, useTLS bool, timeout time.Duration, getenv func(string) string) (*redlock.Client, []pool.Pool, func(), error) {
	var opts []pool.Option
	if pw := getenv("REDLOCK_PASSWORD"); pw != "" {
		if user := getenv("REDLOCK_USER"); user != "" {
			opts = append(opts, pool.WithUser(user, pw))
		} else {
			opts = append(opts, pool.WithPassword(pw))
		}
	}
	if useTLS {
		opts = append(opts, pool.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	var nodes []*pool.Node
	var pools []pool.Pool
	closeAll := func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}
	for _, a := range addrs {
		p, err := pool.New(strings.TrimSpace(a), opts...)
		if err != nil {
			closeAll()
			return nil, nil, nil, usageError{msg: err.Error()}
		}
		nodes, pools = append(nodes, p), append(pools, p)
	}
	// The node timeout bounds each node's answer; restart safety is off:
	// nothing here takes a lock.
	client, err := redlock.New(pools, redlock.WithNodeTimeout(timeout), redlock.WithRestartSafety(0))
	if err != nil {
		closeAll()
		return nil, nil, nil, usageError{msg: err.Error()}
	}
	return client, pools, func() { _ = client.Close(); closeAll() }, nil
}

// nodes reads every node's restart-safety state at once and prints it.
func nodes(ctx context.Context, w io.Writer, pools []pool.Pool, maxTTL time.Duration) error {
	states := make([]nodeState, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i] = readNode(ctx, p)
		}()
	}
	wg.Wait()
	return printNodes(w, states, len(pools)/2+1, maxTTL)
}

// printInspection writes a summary line and a table of the nodes.
func printInspection(w io.Writer, in *redlock.Inspection) error {
	held := 0
	for _, n := range in.Nodes {
		if n.Held {
			held++
		}
	}
	switch who := in.Holders(); {
	case len(who) > 0:
		fmt.Fprintf(w, "key %q: held by client %s on %d of %d nodes (quorum %d)\n", in.Key, who[0].Holder, held, len(in.Nodes), in.Quorum)
	case held > 0:
		fmt.Fprintf(w, "key %q: held on %d of %d nodes, by no single client on a quorum (%d): being taken, released, or split\n", in.Key, held, len(in.Nodes), in.Quorum)
	default:
		fmt.Fprintf(w, "key %q: free on every node that answered\n", in.Key)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tHOLDER\tTTL\tQUEUED\tFENCE\tERROR")
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%v\n", n.Addr, n.Err)
			continue
		}
		state, holder, ttl := "free", "-", "-"
		switch {
		case n.Held:
			state, holder = "held", n.Holder
			if holder == "" {
				holder = "?"
			}
		case n.Reserved:
			state = "reserved"
		}
		if n.Held || n.Reserved {
			ttl = "none"
			if n.TTL >= 0 {
				ttl = n.TTL.Round(time.Millisecond).String()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t\n", n.Addr, state, holder, ttl, n.Queued, n.Fence)
	}
	return tw.Flush()
}
