package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ErrQueueFull is in the chain of a call whose context ended while it waited
// for room in the node's request queue: the node is not keeping up.
var ErrQueueFull = errors.New("redlock/pool: request queue full")

// errNodeDown is in the chain of calls failed without trying, while a node
// that could not be dialled is in its reconnect back-off.
var errNodeDown = errors.New("node down, reconnecting")

// request is one command on its way through a pipelined connection.
type request struct {
	cmd  string
	args []any
	done chan result // buffered: the reader never blocks on a caller that left
}

type result struct {
	reply any
	err   error
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan result, 1)} }}

// pipe is one pipelined connection slot of a Node: callers put requests on
// queue; the writer goroutine sends everything queued in one write and
// hands the requests, in order, to the reader goroutine of the current
// link, which matches them with the replies.
type pipe struct {
	n     *Node
	queue chan *request
	quit  chan struct{}
	done  chan struct{} // closed when the writer has exited

	// Reconnect back-off, used by the writer only.
	downUntil time.Time
	downErr   error
	backoff   time.Duration
}

// link is one connection of a pipe, with its reader.
type link struct {
	conn        redis.Conn
	inflight    chan *request // sent, reply not read yet; closed by the writer when it drops the link
	broken      atomic.Bool   // set by either side on a connection error
	outstanding atomic.Int64  // requests sent whose reply has not been delivered
	lastUsed    time.Time     // writer only
	readerDone  chan struct{}
}

const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 1 * time.Second
	maxBatch   = 256
)

func newPipe(n *Node) *pipe {
	p := &pipe{
		n:     n,
		queue: make(chan *request, n.cfg.queueSize),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go p.writer()
	return p
}

// call queues cmd and waits for its reply until ctx ends. A caller that
// leaves early gets a timeout; its reply is still read in order and thrown
// away, never handed to another caller.
func (p *pipe) call(ctx context.Context, cmd string, args []any) (any, error) {
	req := requestPool.Get().(*request)
	req.cmd, req.args = cmd, args
	select {
	case p.queue <- req:
	case <-ctx.Done():
		req.args = nil
		requestPool.Put(req)
		return nil, errors.Join(ErrQueueFull, ctx.Err())
	case <-p.quit:
		req.args = nil
		requestPool.Put(req)
		return nil, ErrClosed
	}
	select {
	case r := <-req.done:
		req.args = nil
		requestPool.Put(req) // the reply was delivered: nobody else holds req
		return r.reply, r.err
	case <-ctx.Done():
		return nil, ctx.Err() // req is dropped, not reused: its reply is still to come
	}
}

func (req *request) deliver(reply any, err error) {
	req.done <- result{reply, err}
}

// writer owns the link: it dials, batches and writes, and replaces the link
// when it breaks.
func (p *pipe) writer() {
	defer close(p.done)
	var l *link
	defer func() {
		if l != nil {
			p.drop(l)
		}
		p.failQueued(ErrClosed)
	}()
	batch := make([]*request, 0, maxBatch)
	for {
		var req *request
		select {
		case req = <-p.queue:
		case <-p.quit:
			return
		}
		batch = append(batch[:0], req)
	fill:
		for len(batch) < maxBatch {
			select {
			case req = <-p.queue:
				batch = append(batch, req)
			default:
				break fill
			}
		}
		if l != nil && l.broken.Load() {
			p.drop(l)
			l = nil
		}
		if l == nil {
			var err error
			if l, err = p.connect(); err != nil {
				for _, r := range batch {
					r.deliver(nil, err)
				}
				continue
			}
		}
		p.send(l, batch)
	}
}

// send writes a batch on l in one flush and hands its requests to l's
// reader in order.
func (p *pipe) send(l *link, batch []*request) {
	if idle := p.n.cfg.pingIdle; idle > 0 && l.outstanding.Load() == 0 && time.Since(l.lastUsed) >= idle {
		// Nothing is in flight, so the reader is not reading: check the
		// connection directly before trusting it with the batch.
		if _, err := redis.DoWithTimeout(l.conn, p.n.cfg.readTimeout, "PING"); err != nil {
			l.broken.Store(true)
		}
	}
	l.lastUsed = time.Now()
	var err error
	if l.broken.Load() {
		err = errors.New("connection broken")
	}
	sent := 0
	for _, r := range batch {
		if err != nil {
			break
		}
		if err = l.conn.Send(r.cmd, r.args...); err == nil {
			sent++
		}
	}
	if err == nil {
		err = l.conn.Flush()
	}
	if err != nil {
		l.broken.Store(true)
		// Requests that reached the buffer may or may not reach the node:
		// they fail like any request on a broken connection.
		err = fmt.Errorf("write: %w", err)
	}
	for i, r := range batch {
		if i >= sent || err != nil {
			r.deliver(nil, p.n.nodeErr(r.cmd, err))
			continue
		}
		l.outstanding.Add(1)
		l.inflight <- r
	}
}

// connect dials a new link, unless the node is in its reconnect back-off.
func (p *pipe) connect() (*link, error) {
	if time.Now().Before(p.downUntil) {
		return nil, p.n.nodeErr("dial", fmt.Errorf("%w: %v", errNodeDown, p.downErr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.n.cfg.dialTimeout)
	conn, err := p.n.dial(ctx)
	cancel()
	if err != nil {
		if p.backoff == 0 {
			p.backoff = minBackoff
		} else if p.backoff *= 2; p.backoff > maxBackoff {
			p.backoff = maxBackoff
		}
		p.downUntil, p.downErr = time.Now().Add(p.backoff), err
		return nil, p.n.nodeErr("dial", err)
	}
	p.backoff = 0
	l := &link{
		conn:       conn,
		inflight:   make(chan *request, 4*maxBatch),
		lastUsed:   time.Now(),
		readerDone: make(chan struct{}),
	}
	go p.reader(l)
	return l, nil
}

// drop closes a link: the reader fails what is still in flight and exits.
func (p *pipe) drop(l *link) {
	l.broken.Store(true)
	close(l.inflight)
	_ = l.conn.Close()
	<-l.readerDone
}

// reader reads one reply per request in flight, in order. A read that
// times out or fails breaks the link: every request still in flight on it
// fails with the node's error.
func (p *pipe) reader(l *link) {
	defer close(l.readerDone)
	var broken error
	for r := range l.inflight {
		if broken == nil && l.broken.Load() {
			broken = errors.New("connection broken")
		}
		if broken != nil {
			l.outstanding.Add(-1)
			r.deliver(nil, p.n.nodeErr(r.cmd, broken))
			continue
		}
		reply, err := redis.ReceiveWithTimeout(l.conn, p.n.cfg.readTimeout)
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			// A transport error: nothing more can be read from this
			// connection. Close it so that the writer sees it too.
			broken = err
			l.broken.Store(true)
			_ = l.conn.Close()
		}
		l.outstanding.Add(-1)
		r.deliver(reply, p.n.nodeErr(r.cmd, err))
	}
}

// failQueued fails every request still waiting in the queue.
func (p *pipe) failQueued(err error) {
	for {
		select {
		case r := <-p.queue:
			r.deliver(nil, p.n.nodeErr(r.cmd, err))
		default:
			return
		}
	}
}
