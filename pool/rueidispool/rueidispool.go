// Package rueidispool makes a rueidis client a Redlock node: a pool.Pool
// for redlock.New, over a rueidis.Client of one Redis node that the
// program already has. (A node that is a Redis Cluster is tested through
// pool/goredis: with rueidis cluster clients on freshly formed clusters,
// commands to one cluster timed out for seconds in about one run in ten,
// so they are not offered as tested.)
//
//	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"10.0.0.1:6379"}})
//	pools := []pool.Pool{rueidispool.New(rc), ...} // one client per node
//	client, err := redlock.New(pools)
//
// Commands go through the client's auto-pipelining: the concurrent rounds
// of many locks share its connections. Each call is bounded by the
// caller's context. Release announcements use a dedicated connection of
// the client (Client.Dedicate). The pool implements pool.Subscriber; it
// does not implement pool.Reconnector (rueidis tells no one when it dials),
// so restart safety checks a node's process at first use and after
// failures rather than on each new connection. After a node restarts,
// the first command on each of the client's pipelined connections to it
// may fail once (EOF): a round counts that node as failed, and its next
// command dials again. Its Close (not part of
// pool.Pool: reach it through io.Closer) does not close the client: it
// stays the caller's.
package rueidispool

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock/pool"
)

// Option configures New.
type Option func(*config)

type config struct {
	name    string
	timeout time.Duration
}

// WithName names the node in errors and to the lock client; nodes of one
// redlock Client need different names. Default: the addresses the client
// knows when New is called, sorted and joined by commas.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithTimeout bounds each call whose context has no deadline, or a later
// one. Default: 1s.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// New returns a Redlock node over c. A nil c gives a nil Pool, which
// redlock.New reports.
func New(c rueidis.Client, opts ...Option) pool.Pool {
	if c == nil {
		return nil
	}
	cfg := config{timeout: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.name == "" {
		cfg.name = strings.Join(addrs(c), ",")
	}
	if cfg.timeout <= 0 {
		cfg.timeout = time.Second
	}
	return &rueidisPool{c: c, cfg: cfg}
}

// addrs returns the addresses c knows, sorted.
func addrs(c rueidis.Client) []string {
	var as []string
	for a := range c.Nodes() {
		as = append(as, a)
	}
	sort.Strings(as)
	return as
}

type rueidisPool struct {
	c      rueidis.Client
	cfg    config
	closed atomic.Bool
}

var _ pool.Subscriber = (*rueidisPool)(nil)

func (p *rueidisPool) Addr() string { return p.cfg.name }

// Close makes later calls fail with pool.ErrClosed; the client stays open.
func (p *rueidisPool) Close() error {
	p.closed.Store(true)
	return nil
}

// keyless are the commands whose first argument is not a key: a cluster
// client sends them to any node.
var keyless = map[string]bool{"PING": true, "INFO": true, "TIME": true, "SCRIPT": true, "PUBLISH": true,
	"CLUSTER": true, "CONFIG": true, "CLIENT": true, "ACL": true, "DBSIZE": true, "FLUSHALL": true, "FLUSHDB": true}

func (p *rueidisPool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	op := strings.ToUpper(cmd)
	strs, err := texts(args)
	if err != nil {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: op, Err: err}
	}
	b := p.c.B().Arbitrary(cmd)
	var built rueidis.Completed
	if len(strs) > 0 && !keyless[op] {
		built = b.Keys(strs[0]).Args(strs[1:]...).Build()
	} else {
		built = b.Args(strs...).Build()
	}
	return p.call(ctx, op, built)
}

func (p *rueidisPool) Eval(ctx context.Context, s *pool.Script, keysAndArgs ...any) (any, error) {
	keys, args, err := s.Split(keysAndArgs)
	if err == nil && p.c.Mode() == rueidis.ClientModeCluster && !oneSlot(keys) {
		// rueidis' builder panics on such a command for a cluster: answer
		// as the cluster would.
		err = pool.ReplyError("CROSSSLOT Keys in request don't hash to the same slot")
	}
	if err == nil {
		var strs []string
		if strs, err = texts(args); err == nil {
			n := strconv.Itoa(len(keys))
			reply, err := p.call(ctx, "EVALSHA", p.c.B().Arbitrary("EVALSHA", s.Hash(), n).Keys(keys...).Args(strs...).Build())
			var ne *pool.NodeError
			if errors.As(err, &ne) && strings.HasPrefix(ne.Err.Error(), "NOSCRIPT ") {
				return p.call(ctx, "EVAL", p.c.B().Arbitrary("EVAL", s.Source(), n).Keys(keys...).Args(strs...).Build())
			}
			return reply, err
		}
	}
	return nil, &pool.NodeError{Addr: p.cfg.name, Op: "EVALSHA", Err: err}
}

// oneSlot reports whether keys share a Redis Cluster hash slot.
func oneSlot(keys []string) bool {
	for _, k := range keys[min(1, len(keys)):] {
		if slot(k) != slot(keys[0]) {
			return false
		}
	}
	return true
}

// texts turns a call's arguments into the strings rueidis sends.
func texts(args []any) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case []byte:
			out[i] = string(v)
		case int:
			out[i] = strconv.Itoa(v)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case uint64:
			out[i] = strconv.FormatUint(v, 10)
		case int32:
			out[i] = strconv.FormatInt(int64(v), 10)
		case float64:
			out[i] = strconv.FormatFloat(v, 'f', -1, 64)
		case fmt.Stringer:
			out[i] = v.String()
		default:
			return nil, fmt.Errorf("argument %d: cannot send a %T", i+1, a)
		}
	}
	return out, nil
}

// call sends cmd within the caller's deadline, and within the pool's own
// when the context has none or a later one, and turns the reply into the
// pool contract's.
func (p *rueidisPool) call(ctx context.Context, op string, cmd rueidis.Completed) (any, error) {
	if p.closed.Load() {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: op, Err: pool.ErrClosed}
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > p.cfg.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.timeout)
		defer cancel()
	}
	reply, err := p.c.Do(ctx, cmd).ToAny()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: op, Err: replyError(err)}
	}
	return neutral(reply), nil
}

// replyError turns a Redis error reply into a pool.ReplyError, keeping any
// other error as it is.
func replyError(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok {
		return pool.ReplyError(re.Error())
	}
	return err
}

// neutral turns a rueidis reply (RESP3 unless the client was made for
// RESP2) into the pool contract's, which is what RESP2 gives: a boolean
// true is 1 and false nil, a map a flat array, a double its text; error
// replies inside arrays are pool.ReplyError.
func neutral(reply any) any {
	switch v := reply.(type) {
	case []any:
		for i := range v {
			v[i] = neutral(v[i])
		}
		return v
	case bool:
		if v {
			return int64(1)
		}
		return nil
	case map[string]any:
		flat := make([]any, 0, 2*len(v))
		for k, e := range v {
			flat = append(flat, k, neutral(e))
		}
		return flat
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case error:
		if rueidis.IsRedisNil(v) {
			return nil
		}
		return pool.ReplyError(v.Error())
	}
	return reply
}

// DialPubSub opens a dedicated connection of the client for SUBSCRIBE (on
// one of a cluster's nodes: a cluster delivers PUBLISH to every node).
// rueidis calls the hooks from a goroutine of its own; the events go to on
// from one goroutine of the pool's, in order.
func (p *rueidisPool) DialPubSub(ctx context.Context, on func(pool.PubSubEvent)) (pool.PubSubConn, error) {
	if p.closed.Load() {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "dial", Err: pool.ErrClosed}
	}
	c := p.c
	if c.Mode() == rueidis.ClientModeCluster {
		nodes := c.Nodes()
		as := addrs(c)
		if len(as) == 0 {
			return nil, &pool.NodeError{Addr: p.cfg.name, Op: "dial", Err: errors.New("the cluster client knows no node")}
		}
		c = nodes[as[0]]
	}
	ps := &pubSub{p: p, events: newMailbox[pool.PubSubEvent](), done: make(chan struct{}), outbox: newMailbox[command]()}
	// rueidis dials a dedicated connection without the caller's context
	// (its own dial timeout bounds it): the dial, and a PING that makes
	// sure the node is there, run in a goroutine of their own, and a ctx
	// that ends first ends the wait (the connection is closed once they
	// are done).
	type dialed struct {
		d       rueidis.DedicatedClient
		release func()
		ended   <-chan error
		err     error
	}
	got := make(chan dialed, 1)
	go func() {
		d, release := c.Dedicate()
		ended := d.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) {
				ps.push(pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: m.Channel, Data: m.Message})
			},
			OnSubscription: func(s rueidis.PubSubSubscription) {
				switch s.Kind {
				case "subscribe":
					ps.push(pool.PubSubEvent{Kind: pool.PubSubSubscribed, Channel: s.Channel})
				case "unsubscribe":
					ps.push(pool.PubSubEvent{Kind: pool.PubSubUnsubscribed, Channel: s.Channel})
				}
			},
		})
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.timeout)
		defer cancel()
		got <- dialed{d: d, release: release, ended: ended, err: d.Do(pctx, d.B().Ping().Build()).Error()}
	}()
	var dl dialed
	select {
	case dl = <-got:
	case <-ctx.Done():
		go func() {
			dl := <-got
			dl.d.Close()
			dl.release()
		}()
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "dial", Err: ctx.Err()}
	}
	if dl.err != nil {
		dl.d.Close()
		dl.release()
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "dial", Err: replyError(dl.err)}
	}
	ps.d, ps.release = dl.d, dl.release
	ended := dl.ended
	go ps.deliver(on)
	go ps.sendAll()
	go func() {
		var err error
		for e := range ended {
			err = e
		}
		ps.end(err)
	}()
	return ps, nil
}

// pubSub is a pool.PubSubConn over a rueidis dedicated client.
type pubSub struct {
	p       *rueidisPool
	d       rueidis.DedicatedClient
	release func()

	events *mailbox[pool.PubSubEvent] // events not handed to on yet
	outbox *mailbox[command]          // commands not sent yet

	mu       sync.Mutex
	ended    bool // PubSubClosed is queued: nothing follows it
	byCaller bool
	once     sync.Once
	done     chan struct{} // closed when the connection is shut
}

// mailbox is a queue that one goroutine empties: put never blocks, and
// ready holds a token when items grew.
type mailbox[T any] struct {
	mu    sync.Mutex
	items []T
	ready chan struct{}
}

func newMailbox[T any]() *mailbox[T] { return &mailbox[T]{ready: make(chan struct{}, 1)} }

// put queues v.
func (m *mailbox[T]) put(v T) {
	m.mu.Lock()
	m.items = append(m.items, v)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns what was queued, in order, and empties the queue.
func (m *mailbox[T]) take() []T {
	m.mu.Lock()
	defer m.mu.Unlock()
	items := m.items
	m.items = nil
	return items
}

// command is one command of Subscribe, Unsubscribe or Ping, waiting to be
// sent (pubSub.sendAll).
type command struct {
	op   string
	cmd  rueidis.Completed
	pong bool // a PubSubPong follows its success
}

// push queues ev for on, unless the connection has ended. It never
// blocks: rueidis calls the hooks from its reader.
func (c *pubSub) push(ev pool.PubSubEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.events.put(ev)
	}
}

// end queues the PubSubClosed event, once: err is why (nil after Close).
func (c *pubSub) end(err error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	switch {
	case c.byCaller:
		err = nil
	case err != nil:
		err = &pool.NodeError{Addr: c.p.cfg.name, Op: "SUBSCRIBE", Err: replyError(err)}
	default:
		err = &pool.NodeError{Addr: c.p.cfg.name, Op: "SUBSCRIBE", Err: errors.New("the connection ended")}
	}
	c.events.put(pool.PubSubEvent{Kind: pool.PubSubClosed, Err: err})
	c.ended = true
	c.mu.Unlock()
	go c.shut()
}

// deliver hands the queued events to on, in order, up to PubSubClosed.
func (c *pubSub) deliver(on func(pool.PubSubEvent)) {
	for {
		evs := c.events.take()
		for _, ev := range evs {
			on(ev)
			if ev.Kind == pool.PubSubClosed {
				return
			}
		}
		if len(evs) == 0 {
			<-c.events.ready
		}
	}
}

// shut closes the dedicated connection once and gives it back.
func (c *pubSub) shut() {
	c.once.Do(func() {
		c.d.Close()
		c.release()
		close(c.done)
	})
}

func (c *pubSub) Subscribe(channels ...string) error {
	return c.send("SUBSCRIBE", c.d.B().Subscribe().Channel(channels...).Build(), false)
}

func (c *pubSub) Unsubscribe(channels ...string) error {
	return c.send("UNSUBSCRIBE", c.d.B().Unsubscribe().Channel(channels...).Build(), false)
}

func (c *pubSub) Ping() error { return c.send("PING", c.d.B().Ping().Build(), true) }

// send queues cmd for sendAll and returns without waiting, as
// pool.PubSubConn says: rueidis's Do waits for the node's answer, and a
// caller that subscribes must not wait for a node that stalls.
func (c *pubSub) send(op string, cmd rueidis.Completed, pong bool) error {
	select {
	case <-c.done:
		return &pool.NodeError{Addr: c.p.cfg.name, Op: op, Err: errors.New("the connection has ended")}
	default:
	}
	c.outbox.put(command{op: op, cmd: cmd, pong: pong})
	return nil
}

// sendAll runs the queued commands on the dedicated connection, in order,
// until the connection is shut; pong queues a PubSubPong on success. A
// failed command ends the connection.
func (c *pubSub) sendAll() {
	for {
		for _, cmd := range c.outbox.take() {
			ctx, cancel := context.WithTimeout(context.Background(), c.p.cfg.timeout)
			err := c.d.Do(ctx, cmd.cmd).Error()
			cancel()
			if err != nil {
				c.end(err)
				return
			}
			if cmd.pong {
				c.push(pool.PubSubEvent{Kind: pool.PubSubPong})
			}
		}
		select {
		case <-c.outbox.ready:
		case <-c.done:
			return
		}
	}
}

func (c *pubSub) Close() error {
	c.mu.Lock()
	c.byCaller = true
	c.mu.Unlock()
	c.end(nil)
	return nil
}
