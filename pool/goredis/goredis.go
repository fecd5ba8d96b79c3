// Package goredis makes a go-redis v9 client a Redlock node: a pool.Pool
// for redlock.New, over a *redis.Client, a *redis.ClusterClient (a node
// that is a Redis Cluster: see docs/operations.md) or any
// redis.UniversalClient the program already has.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379"})
//	pools := []pool.Pool{goredis.New(rdb), ...} // one client per node
//	client, err := redlock.New(pools)
//
// Commands go through the client, with its own connection pool, retries
// and timeouts; each call is also bounded by the caller's context. Release
// announcements use the client's publish/subscribe. The pool implements
// pool.Subscriber and pool.Reconnector (New adds a hook to the client that
// counts new connections); it does not implement pool.Starter, so a round
// runs each node's command in a goroutine. Close does not close the
// client: it stays the caller's.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/pool"
)

// Option configures New.
type Option func(*config)

type config struct {
	name    string
	timeout time.Duration
}

// WithName names the node in errors and to the lock client; nodes of one
// redlock Client need different names. Default: the client's address (a
// cluster's or ring's addresses, joined by commas).
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithTimeout bounds each call whose context has no deadline, or a later
// one. Default: 1s. The client's own timeouts apply too.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// New returns a Redlock node over c. A nil c gives a nil Pool, which
// redlock.New reports. New adds a hook to c that counts the connections it
// opens (pool.Reconnector); it changes nothing else. The pool's calls are
// bounded by their context's deadline whether or not c has
// ContextTimeoutEnabled: without it, a call whose context ends returns at
// once and its command finishes within c's own read and write timeouts.
func New(c redis.UniversalClient, opts ...Option) pool.Pool {
	if c == nil {
		return nil
	}
	cfg := config{name: addrOf(c), timeout: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = time.Second
	}
	p := &goredisPool{c: c, cfg: cfg, ctxTimeouts: contextTimeouts(c)}
	c.AddHook(dialCounter{gen: &p.gen})
	return p
}

// addrOf names a client after the address it connects to.
func addrOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("%T", c)
}

// contextTimeouts reports whether c applies contexts' deadlines to its
// sockets (Options.ContextTimeoutEnabled).
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

type goredisPool struct {
	c           redis.UniversalClient
	cfg         config
	ctxTimeouts bool
	gen         atomic.Uint64
	closed      atomic.Bool
}

var (
	_ pool.Subscriber  = (*goredisPool)(nil)
	_ pool.Reconnector = (*goredisPool)(nil)
)

func (p *goredisPool) Addr() string { return p.cfg.name }

// Generation returns how many connections the client has opened since New,
// publish/subscribe connections included.
func (p *goredisPool) Generation() uint64 { return p.gen.Load() }

// Close makes later calls fail with pool.ErrClosed; the client stays open.
func (p *goredisPool) Close() error {
	p.closed.Store(true)
	return nil
}

func (p *goredisPool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	all := make([]any, 0, len(args)+1)
	all = append(append(all, cmd), args...)
	return p.call(ctx, strings.ToUpper(cmd), func(ctx context.Context) (any, error) {
		return p.c.Do(ctx, all...).Result()
	})
}

func (p *goredisPool) Eval(ctx context.Context, s *pool.Script, keysAndArgs ...any) (any, error) {
	keys, args, err := s.Split(keysAndArgs)
	if err != nil {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "EVALSHA", Err: err}
	}
	return p.call(ctx, "EVALSHA", func(ctx context.Context) (any, error) {
		reply, err := p.c.EvalSha(ctx, s.Hash(), keys, args...).Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT ") {
			reply, err = p.c.Eval(ctx, s.Source(), keys, args...).Result()
		}
		return reply, err
	})
}

// call runs f within the caller's deadline, and within the pool's own
// when the context has none or a later one, and turns its reply and
// error into the pool contract's.
func (p *goredisPool) call(ctx context.Context, op string, f func(ctx context.Context) (any, error)) (any, error) {
	if p.closed.Load() {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: op, Err: pool.ErrClosed}
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > p.cfg.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.timeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: op, Err: err}
	}
	var reply any
	var err error
	if p.ctxTimeouts {
		reply, err = f(ctx)
	} else {
		reply, err = p.bounded(ctx, f)
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: op, Err: replyError(err)}
	}
	return neutral(reply), nil
}

// bounded runs f in a goroutine and returns when it does or ctx ends: a
// client without ContextTimeoutEnabled only applies its own timeouts to
// the socket. The abandoned call ends within them.
func (p *goredisPool) bounded(ctx context.Context, f func(ctx context.Context) (any, error)) (any, error) {
	type result struct {
		reply any
		err   error
	}
	done := make(chan result, 1)
	go func() {
		reply, err := f(ctx)
		done <- result{reply, err}
	}()
	select {
	case r := <-done:
		return r.reply, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// replyError turns a Redis error reply into a pool.ReplyError, keeping any
// other error as it is.
func replyError(err error) error {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return pool.ReplyError(re.Error())
	}
	return err
}

// neutral turns a go-redis reply into the pool contract's: RESP3 types
// into what RESP2 gives (a boolean true is 1, false nil; a map a flat
// array; a double its text), error replies inside arrays into
// pool.ReplyError.
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
	case map[any]any:
		flat := make([]any, 0, 2*len(v))
		for k, e := range v {
			flat = append(flat, neutral(k), neutral(e))
		}
		return flat
	case float64:
		return fmt.Sprint(v)
	case error:
		return pool.ReplyError(v.Error())
	}
	return reply
}

// dialCounter is the hook New adds: it counts each connection opened.
type dialCounter struct{ gen *atomic.Uint64 }

func (d dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		conn, err = next(ctx, network, addr)
		if err == nil {
			d.gen.Add(1)
		}
		return conn, err
	}
}

func (dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// DialPubSub opens a publish/subscribe connection through the client
// (redis.UniversalClient.Subscribe). go-redis would dial again and
// subscribe again by itself after a failure; here a failure ends the
// connection instead (PubSubClosed), and the caller dials again, so that
// it knows what the node confirmed.
func (p *goredisPool) DialPubSub(ctx context.Context, on func(pool.PubSubEvent)) (pool.PubSubConn, error) {
	if p.closed.Load() {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "dial", Err: pool.ErrClosed}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	ps := p.c.Subscribe(context.Background())
	// Subscribe dials lazily: a PING now makes sure the node is there.
	if err := ps.Ping(ctx); err != nil {
		_ = ps.Close()
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "dial", Err: replyError(err)}
	}
	c := &pubSub{p: p, ps: ps, done: make(chan struct{})}
	go c.read(on)
	return c, nil
}

// pubSub is a pool.PubSubConn over a go-redis PubSub.
type pubSub struct {
	p        *goredisPool
	ps       *redis.PubSub
	byCaller atomic.Bool
	once     sync.Once
	done     chan struct{} // closed when the connection ends
}

func (c *pubSub) Subscribe(channels ...string) error {
	return c.send("SUBSCRIBE", func(ctx context.Context) error { return c.ps.Subscribe(ctx, channels...) })
}

func (c *pubSub) Unsubscribe(channels ...string) error {
	return c.send("UNSUBSCRIBE", func(ctx context.Context) error { return c.ps.Unsubscribe(ctx, channels...) })
}

func (c *pubSub) Ping() error {
	return c.send("PING", func(ctx context.Context) error { return c.ps.Ping(ctx) })
}

// send writes one command. A failed write ends the connection: go-redis
// would otherwise dial again by itself.
func (c *pubSub) send(op string, f func(ctx context.Context) error) error {
	select {
	case <-c.done:
		return &pool.NodeError{Addr: c.p.cfg.name, Op: op, Err: errors.New("the connection has ended")}
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.p.cfg.timeout)
	defer cancel()
	if err := f(ctx); err != nil {
		c.shut()
		return &pool.NodeError{Addr: c.p.cfg.name, Op: op, Err: replyError(err)}
	}
	return nil
}

func (c *pubSub) Close() error {
	c.byCaller.Store(true)
	c.shut()
	return nil
}

// shut closes the go-redis PubSub once: a Receive in progress fails.
func (c *pubSub) shut() { c.once.Do(func() { _ = c.ps.Close() }) }

// read hands what arrives to on until the connection fails or is closed.
func (c *pubSub) read(on func(pool.PubSubEvent)) {
	defer close(c.done)
	for {
		msg, err := c.ps.Receive(context.Background())
		var ev pool.PubSubEvent
		if err == nil {
			switch m := msg.(type) {
			case *redis.Message:
				ev = pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: m.Channel, Data: m.Payload}
			case *redis.Subscription:
				switch m.Kind {
				case "subscribe":
					ev = pool.PubSubEvent{Kind: pool.PubSubSubscribed, Channel: m.Channel}
				case "unsubscribe":
					ev = pool.PubSubEvent{Kind: pool.PubSubUnsubscribed, Channel: m.Channel}
				default:
					continue
				}
			case *redis.Pong:
				ev = pool.PubSubEvent{Kind: pool.PubSubPong}
			default:
				err = fmt.Errorf("unexpected publish/subscribe message %T", msg)
			}
		}
		if err != nil {
			c.shut()
			if c.byCaller.Load() {
				err = nil
			} else {
				err = &pool.NodeError{Addr: c.p.cfg.name, Op: "SUBSCRIBE", Err: replyError(err)}
			}
			on(pool.PubSubEvent{Kind: pool.PubSubClosed, Err: err})
			return
		}
		on(ev)
	}
}
