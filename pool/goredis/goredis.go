// Package goredis makes a go-redis v9 client a Redlock node: a pool.Pool
// for redlock.New, over a *redis.Client, a *redis.ClusterClient (a node
// that is a Redis Cluster: see docs/operations.md) or another
// redis.UniversalClient the program already has. It is a module of its
// own, so that the core module does not depend on go-redis.
//
//	nodes := []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}
//	pools := make([]pool.Pool, len(nodes))
//	for i, addr := range nodes {
//		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//		pools[i] = goredis.New(rdb) // before rdb's first command
//	}
//	client, err := redlock.New(pools)
//
// Commands go through the client, with its connection pool, retries
// (MaxRetries) and timeouts; every call is also bounded by its context's
// deadline, and by WithTimeout's when the context has none, whether or not
// the client has ContextTimeoutEnabled. Replies are what RESP2 gives even
// when the client speaks RESP3 (the default of go-redis v9). Release
// announcements use the client's publish/subscribe, without its silent
// reconnects. See New for what each kind of client supports.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/pool"
)

// DefaultTimeout bounds a call whose context has no deadline, or a later
// one, unless WithTimeout says otherwise.
const DefaultTimeout = time.Second

// Option configures New.
type Option func(*config)

type config struct {
	name    string
	timeout time.Duration
}

// WithName names the node in errors (pool.NodeError.Addr) and to the lock
// client, which refuses two pools with one name. Default: the client's
// address (Options().Addr of a *redis.Client; the seed addresses of a
// *redis.ClusterClient or *redis.Ring, joined by commas; the client's type
// for other clients, which therefore need WithName when a lock client has
// more than one of them). A failover client (redis.NewFailoverClient)
// reports "FailoverClient" as its address: give each one a name.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithTimeout bounds each call whose context has no deadline, or a later
// one; DialPubSub too. Default DefaultTimeout (1s); zero or less keeps
// the default. The client's own timeouts apply as well.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// New returns a Redlock node over c. A nil c (also a nil *redis.Client or
// *redis.ClusterClient) gives a nil Pool, which redlock.New reports. The
// pool's Close (not part of pool.Pool: reach it through io.Closer) does
// not close c, which stays the caller's.
//
// What the pool implements depends on c:
//
//   - *redis.Client (also a Sentinel failover client): pool.Subscriber and
//     pool.Reconnector. New adds a hook to c (AddHook) that counts the
//     connections c opens, so that restart safety checks the node again
//     after a reconnection.
//   - *redis.ClusterClient: pool.Subscriber and pool.Reconnector. New
//     adds the hook to each node's client as the cluster client creates it
//     (OnNewNode): call New before c's first command, or the connections
//     of the node clients c made before are not counted (restart safety
//     then checks those nodes less often). On a cluster, restart safety
//     checks one master only: see docs/operations.md.
//   - *redis.Ring: neither (a ring cannot subscribe without a channel);
//     waiting Lock calls poll, and restart safety checks the node before
//     the first acquisition and after a call to it failed without its
//     answer, not on each new connection.
//   - any other UniversalClient: pool.Subscriber, not pool.Reconnector
//     (restart safety checks the node before the first acquisition and
//     after a call to it failed without its answer).
//
// The hook New adds also keeps go-redis from dialling a DialPubSub
// connection again by itself (see DialPubSub).
//
// Every call returns by its context's deadline (or WithTimeout's). With
// ContextTimeoutEnabled, go-redis applies that deadline to the socket.
// Without it, go-redis only applies its own read and write timeouts there,
// so a call whose deadline passes returns at once and leaves its command
// to a goroutine that ends within those timeouts; go-redis writes nothing
// for it once the deadline has passed (a command still waiting for a new
// connection's handshake is dropped with that connection, and there is no
// EVAL after a late NOSCRIPT), so that what the lock client sends after a
// failed call, such as the release of a failed acquisition, reaches the
// node after anything the failed call sent. c's options are not changed;
// with ContextTimeoutEnabled a call needs no goroutine of its own.
//
// Replies are what RESP2 gives, whatever protocol c speaks: RESP3
// booleans (a Lua script's true and false) become 1 and nil, doubles and
// big numbers their text, maps flat arrays of keys and values (sorted by
// key: go-redis does not keep the node's order), sets arrays. A reply
// whose RESP3 shape differs in more than its types (ZRANGE WITHSCORES
// nests its pairs) keeps the RESP3 shape; the lock client sends none.
func New(c redis.UniversalClient, opts ...Option) pool.Pool {
	var (
		name, secret string
		ctxTimeouts  bool
		counter      *dialCounter
		subscribe    = true
	)
	switch c := c.(type) {
	case nil:
		return nil
	case *redis.Client:
		if c == nil {
			return nil
		}
		o := c.Options()
		name, secret, ctxTimeouts = o.Addr, o.Password, o.ContextTimeoutEnabled
		counter = &dialCounter{}
		c.AddHook(counter)
	case *redis.ClusterClient:
		if c == nil {
			return nil
		}
		o := c.Options()
		name, secret, ctxTimeouts = strings.Join(o.Addrs, ","), o.Password, o.ContextTimeoutEnabled
		counter = &dialCounter{}
		c.OnNewNode(func(node *redis.Client) { node.AddHook(counter) })
	case *redis.Ring:
		if c == nil {
			return nil
		}
		o := c.Options()
		addrs := make([]string, 0, len(o.Addrs))
		for _, a := range o.Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		name, secret, ctxTimeouts = strings.Join(addrs, ","), o.Password, o.ContextTimeoutEnabled
		subscribe = false
	default:
		name = fmt.Sprintf("%T", c)
	}
	cfg := config{name: name, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = DefaultTimeout
	}
	p := &basePool{c: c, cfg: cfg, secret: secret, ctxTimeouts: ctxTimeouts, counter: counter}
	switch {
	case !subscribe:
		return p
	case counter == nil:
		return &subPool{p}
	}
	return &fullPool{subPool{p}}
}

// basePool is the Pool of New; subPool adds pool.Subscriber, fullPool
// pool.Reconnector.
type basePool struct {
	c           redis.UniversalClient
	cfg         config
	secret      string // the client's password, never shown in an error
	ctxTimeouts bool   // c applies contexts' deadlines to its sockets
	counter     *dialCounter
	closed      atomic.Bool
}

type subPool struct{ *basePool }

type fullPool struct{ subPool }

var (
	_ pool.Subscriber  = (*subPool)(nil)
	_ pool.Subscriber  = (*fullPool)(nil)
	_ pool.Reconnector = (*fullPool)(nil)
)

// Addr returns the node's name (WithName).
func (p *basePool) Addr() string { return p.cfg.name }

// Close makes later calls fail with pool.ErrClosed. The client stays open
// (it is the caller's), and so does the hook New added to it.
func (p *basePool) Close() error {
	p.closed.Store(true)
	return nil
}

// Generation returns how many connections the client has opened since New,
// publish/subscribe connections included. It grows when a connection is
// dialled, before anything is sent on it.
func (p *fullPool) Generation() uint64 { return p.counter.n.Load() }

// Do runs cmd with args through the client. A nil reply (redis.Nil) is a
// nil reply, not an error; errors are *pool.NodeError values with the
// command as Op, wrapping a pool.ReplyError when the node answered with an
// error.
func (p *basePool) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	all := make([]any, 0, len(args)+1)
	all = append(append(all, cmd), args...)
	return p.call(ctx, strings.ToUpper(cmd), func(ctx context.Context) (any, error) {
		return p.c.Do(ctx, p.gate(ctx, all)...).Result()
	})
}

// Eval runs s with EVALSHA and, when the node answers NOSCRIPT, with EVAL,
// within the same deadline. The error's Op is "EVALSHA".
func (p *basePool) Eval(ctx context.Context, s *pool.Script, keysAndArgs ...any) (any, error) {
	keys, args, err := s.Split(keysAndArgs)
	if err != nil {
		return nil, &pool.NodeError{Addr: p.cfg.name, Op: "EVALSHA", Err: err}
	}
	call := func(cmd, script string) []any {
		all := make([]any, 0, 3+len(keys)+len(args))
		all = append(all, cmd, script, len(keys))
		for _, k := range keys {
			all = append(all, k)
		}
		return append(all, args...)
	}
	return p.call(ctx, "EVALSHA", func(ctx context.Context) (any, error) {
		reply, err := p.c.Do(ctx, p.gate(ctx, call("evalsha", s.Hash()))...).Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && ctx.Err() == nil {
			reply, err = p.c.Do(ctx, p.gate(ctx, call("eval", s.Source()))...).Result()
		}
		return reply, err
	})
}

// call runs f within the caller's deadline, and within the pool's own when
// the context has none or a later one, and turns its reply and error into
// the pool contract's.
func (p *basePool) call(ctx context.Context, op string, f func(ctx context.Context) (any, error)) (any, error) {
	if p.closed.Load() {
		return nil, p.nodeError(op, pool.ErrClosed)
	}
	ctx, cancel := p.bound(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return nil, p.nodeError(op, err)
	}
	reply, err := p.run(ctx, f)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, p.nodeError(op, err)
	}
	return resp2(reply), nil
}

// bound returns ctx with the pool's deadline when ctx has none or a later
// one.
func (p *basePool) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= p.cfg.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, p.cfg.timeout)
}

// run calls f, returning by ctx's end. A client with ContextTimeoutEnabled
// returns by then by itself. Otherwise f runs in a goroutine of its own,
// and when ctx ends first run returns ctx's error at once; go-redis ends
// the abandoned f within the client's own timeouts, and gate keeps it from
// writing a command after the deadline.
func (p *basePool) run(ctx context.Context, f func(ctx context.Context) (any, error)) (any, error) {
	if p.ctxTimeouts {
		return f(ctx)
	}
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
		return nil, fmt.Errorf("gave up waiting for the node (the client has no ContextTimeoutEnabled): %w", ctx.Err())
	}
}

// nodeError wraps err for the pool contract: a Redis error reply becomes a
// pool.ReplyError, and the client's password never appears in the text.
func (p *basePool) nodeError(op string, err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		err = pool.ReplyError(p.redact(re.Error()))
	} else if p.secret != "" && strings.Contains(err.Error(), p.secret) {
		err = redacted{msg: p.redact(err.Error()), cause: err}
	}
	return &pool.NodeError{Addr: p.cfg.name, Op: op, Err: err}
}

func (p *basePool) redact(s string) string {
	if p.secret == "" {
		return s
	}
	return strings.ReplaceAll(s, p.secret, "xxxxx")
}

// redacted keeps an error's identity (errors.Is, errors.As) while its text
// has the password removed.
type redacted struct {
	msg   string
	cause error
}

func (r redacted) Error() string { return r.msg }
func (r redacted) Unwrap() error { return r.cause }

// resp2 turns a go-redis reply into the pool contract's, which is what
// RESP2 gives: a RESP3 boolean true is 1 and false nil (a Lua script's
// booleans reach a RESP3 client as booleans), a double is its shortest
// text ("inf", "-inf", "nan" for the special values), a big number its
// decimal text, a map a flat array of keys and values (in the order of the
// keys' text: go-redis does not keep the node's order); sets are arrays
// already. Error replies inside arrays become pool.ReplyError values.
// Arrays are converted in place.
func resp2(reply any) any {
	switch v := reply.(type) {
	case nil, int64, string:
		return v
	case []any:
		for i := range v {
			v[i] = resp2(v[i])
		}
		return v
	case bool:
		if v {
			return int64(1)
		}
		return nil
	case float64:
		switch {
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		case math.IsNaN(v):
			return "nan"
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case *big.Int:
		return v.String()
	case map[any]any:
		type entry struct {
			key  string
			k, v any
		}
		entries := make([]entry, 0, len(v))
		for k, e := range v {
			entries = append(entries, entry{fmt.Sprint(k), k, e})
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].key < entries[j].key })
		flat := make([]any, 0, 2*len(v))
		for _, e := range entries {
			flat = append(flat, resp2(e.k), resp2(e.v))
		}
		return flat
	case error:
		return pool.ReplyError(v.Error())
	}
	return reply
}

// dialCounter is the hook New adds: it counts each connection the client
// opens, and refuses to let a publish/subscribe connection of DialPubSub
// be dialled again (go-redis would reconnect and resubscribe by itself).
type dialCounter struct{ n atomic.Uint64 }

// pubSubKey marks the contexts of a DialPubSub connection's calls: its
// value is the *pubSub.
type pubSubKey struct{}

var errNoRedial = errors.New("a publish/subscribe connection is not dialled again (the caller dials a new one)")

// DialHook counts the connections; for a pub/sub connection of this
// counter's pool, only its first dial goes through.
func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ps, ok := ctx.Value(pubSubKey{}).(*pubSub); ok && ps.p.counter == d && !ps.dialled.CompareAndSwap(false, true) {
			return nil, errNoRedial
		}
		conn, err := next(ctx, network, addr)
		if err == nil {
			d.n.Add(1)
		}
		return conn, err
	}
}

// ProcessHook changes nothing.
func (*dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook changes nothing.
func (*dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// DialPubSub opens a publish/subscribe connection through the client's
// own (redis.UniversalClient.Subscribe, with a PING to open it; its answer
// is not an event), bounded by ctx and WithTimeout; a cluster client opens
// it on one of its nodes (a cluster delivers PUBLISH to every node). What
// arrives goes to on, from one goroutine, in order. go-redis would dial
// again and subscribe again by itself after a failure; here a failure
// ends the connection instead, with a PubSubClosed event that carries a
// *pool.NodeError, and the caller dials again, so that it knows what the
// node confirmed. The hook New adds makes go-redis' own attempt to dial
// again fail at once; on a client without it (another UniversalClient)
// that attempt may connect and subscribe again for a moment before the
// connection is closed, and nothing it receives is delivered. Close does
// not wait: it may be called from on. Errors are *pool.NodeError values
// with Op "dial".
func (p *subPool) DialPubSub(ctx context.Context, on func(pool.PubSubEvent)) (pool.PubSubConn, error) {
	if p.closed.Load() {
		return nil, p.nodeError("dial", pool.ErrClosed)
	}
	ctx, cancel := p.bound(ctx)
	defer cancel()
	ps := p.c.Subscribe(context.Background())
	c := &pubSub{p: p.basePool, ps: ps, shutDone: make(chan struct{}), done: make(chan struct{})}
	// Subscribe dials lazily: the PING dials, and makes sure that the node
	// answers.
	_, err := p.run(context.WithValue(ctx, pubSubKey{}, c), func(ctx context.Context) (any, error) {
		return nil, ps.Ping(ctx)
	})
	if err != nil {
		if p.ctxTimeouts {
			_ = ps.Close()
		} else {
			// The PING may still hold ps's lock, until the client's own
			// timeouts end it.
			go func() { _ = ps.Close() }()
		}
		return nil, p.nodeError("dial", err)
	}
	go c.read(on)
	return c, nil
}

// pubSub is a pool.PubSubConn over a go-redis PubSub.
type pubSub struct {
	p        *basePool
	ps       *redis.PubSub
	dialled  atomic.Bool // its connection was dialled (dialCounter)
	byCaller atomic.Bool // Close was called
	once     sync.Once
	shutDone chan struct{} // closed once ps is closed
	done     chan struct{} // closed when the reader has returned
}

// Subscribe sends SUBSCRIBE for channels.
func (c *pubSub) Subscribe(channels ...string) error {
	return c.send("SUBSCRIBE", func(ctx context.Context) error { return c.ps.Subscribe(ctx, channels...) })
}

// Unsubscribe sends UNSUBSCRIBE for channels.
func (c *pubSub) Unsubscribe(channels ...string) error {
	return c.send("UNSUBSCRIBE", func(ctx context.Context) error { return c.ps.Unsubscribe(ctx, channels...) })
}

// Ping sends PING; the answer is a PubSubPong event.
func (c *pubSub) Ping() error {
	return c.send("PING", func(ctx context.Context) error { return c.ps.Ping(ctx) })
}

// send writes one command. A failed write ends the connection.
func (c *pubSub) send(op string, f func(ctx context.Context) error) error {
	select {
	case <-c.done:
		return c.p.nodeError(op, errors.New("the connection has ended"))
	default:
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), pubSubKey{}, c), c.p.cfg.timeout)
	defer cancel()
	if err := f(ctx); err != nil {
		c.shut(false)
		return c.p.nodeError(op, err)
	}
	return nil
}

// Close ends the connection without waiting: the PubSubClosed event, with
// a nil Err, follows from the reader. It may be called from the callback.
func (c *pubSub) Close() error {
	c.byCaller.Store(true)
	c.shut(false)
	return nil
}

// shut closes the go-redis PubSub once, from a goroutine of its own (its
// lock may be held for a moment by the reader), which makes a Receive in
// progress fail; with wait, it returns once the PubSub is closed.
func (c *pubSub) shut(wait bool) {
	c.once.Do(func() {
		go func() {
			_ = c.ps.Close()
			close(c.shutDone)
		}()
	})
	if wait {
		<-c.shutDone
	}
}

// read hands what arrives to on until the connection fails or is closed,
// then ends it with PubSubClosed once the PubSub is closed.
// receive is ps.Receive, with a panic of go-redis turned into an error:
// go-redis reads a malformed publish/subscribe reply (an empty array, a
// kind that is not a string) by indexing and asserting without checks,
// and a node must not be able to crash the process.
func receive(ctx context.Context, ps *redis.PubSub) (msg any, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed publish/subscribe reply (go-redis: %v)", r)
		}
	}()
	return ps.Receive(ctx)
}

func (c *pubSub) read(on func(pool.PubSubEvent)) {
	defer close(c.done)
	ctx := context.WithValue(context.Background(), pubSubKey{}, c)
	dialPong := true // the answer to DialPubSub's PING comes first
	for {
		msg, err := receive(ctx, c.ps)
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
					err = fmt.Errorf("unexpected publish/subscribe confirmation %q", m.Kind)
				}
			case *redis.Pong:
				if dialPong {
					dialPong = false
					continue
				}
				ev = pool.PubSubEvent{Kind: pool.PubSubPong}
			default:
				err = fmt.Errorf("unexpected publish/subscribe message %T", msg)
			}
		}
		if err != nil {
			c.shut(true)
			if c.byCaller.Load() {
				err = nil
			} else {
				err = c.p.nodeError("SUBSCRIBE", err)
			}
			on(pool.PubSubEvent{Kind: pool.PubSubClosed, Err: err})
			return
		}
		dialPong = false
		on(ev)
	}
}
