package redistest

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// Options configures the nodes started by Start.
type Options struct {
	// Password, when non-empty, is set as requirepass for the default user.
	Password string
	// Args are extra config directives as "--name value" pairs, for example
	// []string{"--maxmemory", "1mb"}. They come last and so override the
	// package defaults.
	Args []string
	// Dir is the parent of the per-node temporary directories; "" means the
	// default of os.MkdirTemp.
	Dir string
	// Durable makes every node persist each write before it answers
	// (appendonly yes, appendfsync always), so that Restart brings a
	// killed node back with its data. RestartEmpty still starts it empty.
	Durable bool
	// TLSPort makes every node also listen on a TLS port of its own
	// (--tls-port), chosen and retried as its plain port is; Args gives
	// the certificate directives. Server.TLSAddr tells the address.
	TLSPort bool
}

// Cluster is a set of independent redis-server nodes. Its methods are safe
// for concurrent use.
type Cluster struct {
	nodes []*Server
	close func() error // runs the shutdown once and returns its result
}

// Start starts n >= 1 redis-server processes in parallel, each on a free
// 127.0.0.1 port and in its own temporary directory, with persistence off
// (unless opts.Durable),
// and waits until every one answers. A node that does not answer within
// about 5s fails Start with the tail of its log. On any failure Start stops
// every node it started and removes their directories.
func Start(n int, opts Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("redistest: Start(%d): need at least one node", n)
	}
	bin, err := Path()
	if err != nil {
		return nil, err
	}

	nodes := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := newServer(bin, opts)
			if err == nil {
				err = s.startFresh()
			}
			if err != nil {
				errs[i] = fmt.Errorf("node %d: %w", i, err)
				return
			}
			nodes[i] = s
		}()
	}
	wg.Wait()

	c := newCluster(nodes)
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// newCluster wraps nodes, skipping nil entries (nodes that failed to start).
func newCluster(nodes []*Server) *Cluster {
	c := &Cluster{}
	for _, s := range nodes {
		if s != nil {
			c.nodes = append(c.nodes, s)
		}
	}
	c.close = sync.OnceValue(c.shutdown)
	return c
}

// Nodes returns the nodes in a new slice.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Node returns node i; it panics if i is out of range.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Addrs returns the nodes' addresses, in node order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Close stops every node (resuming paused ones first, then SIGTERM, then
// SIGKILL after 2s) and removes their temporary directories. Later calls do
// nothing and return the result of the first.
func (c *Cluster) Close() error { return c.close() }

// shutdown stops all nodes in parallel and removes their directories.
func (c *Cluster) shutdown() error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, s := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = errors.Join(s.stop(), os.RemoveAll(s.dir))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
