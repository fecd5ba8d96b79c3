package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/async"
)

// errQueueFull is in the chain of a call that found no room in the node's
// request queue (nodeStarter), or whose context ended while it waited for
// room (Do, Eval): the node is not keeping up. Its *NodeError has Op
// "queue".
var errQueueFull = errors.New("request queue full: the node is not keeping up")

// errNodeDown is in the chain of calls failed without trying, while a node
// that could not be dialled is in its reconnect back-off.
var errNodeDown = errors.New("node down, reconnecting")

var (
	errBroken       = errors.New("connection broken")
	errNotAnswering = errors.New("node not answering")
)

// request is one command on its way through a pipelined connection. Its
// reply goes either to done, where a caller waits, or to rcv.
//
// Requests are recycled (Node.getRequest, Node.putRequest), and with them what
// they own: the argument buffer of scripts and the timer of Do and Eval.
// Nothing the caller passed survives putRequest.
type request struct {
	cmd  string
	args []any       // what is sent after cmd: the caller's, or buf
	buf  []any       // a script's arguments: its boxed prefix (Script.evalsha), then the caller's
	done chan result // buffered: the reader never blocks on a caller that left
	// state says who has req: the queue (reqQueued), the writer
	// (reqTaken: it may be written), or nobody (reqLeft: its caller gave
	// up before the writer took it, so it is never written). Caller and
	// writer race for it with CompareAndSwap.
	state atomic.Int32
	rcv   async.Receiver
	// script is set for EVALSHA and EVAL: what EVAL needs after NOSCRIPT.
	script *Script
	// tx, when set, makes the request a transaction (nodeStarter.StartTx):
	// MULTI, these commands (each its name, then its arguments), EXEC; cmd
	// is "MULTI" and args is unused. txKey picks its connection.
	tx    [][]any
	txKey string
	// The I/O timeout of a caller of Do or Eval whose context ends later:
	// timer fires at until (zero when not armed).
	timer *time.Timer
	until time.Time
}

// The states of a request of Do or Eval (request.state).
const (
	reqQueued int32 = iota
	reqTaken
	reqLeft
)

type result struct {
	reply any
	err   error
}

// maxKeptArgs bounds the argument buffer that a recycled request keeps.
const maxKeptArgs = 64

// getRequest returns a recycled request of the node, or a new one. Each
// node keeps its own: a request owns a channel and a timer, which inside
// a testing/synctest bubble belong to the bubble, and a node is used in
// one bubble (or none) only.
func (n *Node) getRequest() *request {
	req, _ := n.reqs.Get().(*request)
	if req == nil {
		req = &request{done: make(chan result, 1)}
	}
	req.state.Store(reqQueued)
	return req
}

func (n *Node) putRequest(req *request) {
	req.reset()
	n.reqs.Put(req)
}

// reset readies req for its next use.
func (req *request) reset() {
	req.stopTimer()
	clear(req.buf) // keep none of the caller's arguments
	if cap(req.buf) > maxKeptArgs {
		req.buf = nil
	}
	req.cmd, req.args, req.buf, req.rcv, req.script = "", nil, req.buf[:0], nil, nil
	req.tx, req.txKey = nil, ""
}

// newRequest returns a request for cmd with the caller's args, sent as
// they are.
func (n *Node) newRequest(cmd string, args []any) *request {
	req := n.getRequest()
	req.cmd, req.args = cmd, args
	return req
}

// newScriptRequest returns a request for EVALSHA (or EVAL, with eval) of
// script s with the caller's keysAndArgs. They are copied into the
// request's buffer, never written to: callers pass one slice to all the
// nodes at once.
func (n *Node) newScriptRequest(s *Script, keysAndArgs []any, eval bool) *request {
	req := n.getRequest()
	req.cmd, req.script = "EVALSHA", s
	req.buf = slices.Grow(req.buf, len(s.evalsha)+len(keysAndArgs))
	req.buf = append(append(req.buf, s.evalsha...), keysAndArgs...)
	req.args = req.buf
	if eval {
		req.toEval()
	}
	return req
}

// toEval turns a request for EVALSHA into one for EVAL: the script's
// source replaces its hash (and both are followed by the same arguments).
func (req *request) toEval() {
	req.cmd = "EVAL"
	copy(req.buf, req.script.eval)
}

// bound arms req's timer: the caller stops waiting after d even if its
// context has not ended.
func (req *request) bound(d time.Duration) {
	req.until = time.Now().Add(d)
	if req.timer == nil {
		req.timer = time.NewTimer(d)
		return
	}
	req.timer.Reset(d)
}

// expiry returns the channel of req's timer, or nil (never ready) when
// it is not armed.
func (req *request) expiry() <-chan time.Time {
	if req.until.IsZero() {
		return nil
	}
	return req.timer.C
}

// expired reports, when req's timer fired, whether its bound has passed.
// A tick before it is stale, left from an earlier use of req (timers that
// follow the rules before Go 1.23 may keep one in their channel after
// Stop): the timer is armed again for what is left.
func (req *request) expired() bool {
	left := time.Until(req.until)
	if left <= 0 {
		return true
	}
	req.timer.Reset(left)
	return false
}

func (req *request) stopTimer() {
	if !req.until.IsZero() {
		req.timer.Stop()
		req.until = time.Time{}
	}
}

// pipe is one pipelined connection slot of a node.
//
// Callers put requests on queue and wake the writer goroutine, which sends
// everything queued in one write and hands the requests, in order, to the
// reader goroutine of the link, which matches them with the replies.
//
// Dialling and the idle-connection ping run in goroutines of their own, so
// that no caller waits on them beyond its own deadline.
type pipe struct {
	n      *Node
	queue  chan *request
	kick   chan struct{} // wakes the writer goroutine
	quit   chan struct{} // closed by close
	closed atomic.Bool

	// connecting is set while a dial is under way, and lastErr holds why
	// the last attempt to connect failed (nil once one succeeded): a
	// caller whose context ends while it waits for the dial is told so,
	// and so is anyone who asks (connState, Node.ConnErr).
	connecting atomic.Bool
	lastErr    atomic.Pointer[error]
	// opened is set once a dial has succeeded: a dial under way before it
	// is the pipe's first (nodeStarter.Connecting).
	opened atomic.Bool

	wmu       sync.Mutex // the write lock: guards the fields below
	l         *link      // current link; nil when not connected
	dialing   bool       // a dial, or a ping of an idle link, is under way
	downUntil time.Time  // reconnect back-off
	downErr   error      // why the last attempt to connect failed; nil after a success
	held      []*request // queued when a dial after a failure began: they wait for it
	backoff   time.Duration
	batch     []*request
	bg        sync.WaitGroup // the writer, the dialler, the idle ping
}

// link is one connection of a pipe, with its reader.
type link struct {
	conn        redis.Conn
	inflight    chan *request         // sent, reply not read yet; closed when the link is dropped
	broken      atomic.Bool           // set by either side on a connection error
	failWith    atomic.Value          // error for requests still in flight when dropped
	good        atomic.Bool           // the node sent a reply that is not an error
	cause       atomic.Pointer[error] // the first error on the link
	outstanding atomic.Int64          // requests sent whose reply has not been delivered
	lastUsed    time.Time             // under the write lock
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
		kick:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
		batch: make([]*request, 0, maxBatch),
	}
	p.bg.Add(1)
	go p.writer()
	return p
}

// call queues req and waits for its reply until ctx ends, or req's timer
// when it is armed. A caller that leaves before its command was written
// keeps it from being written; one that leaves later gets a timeout at
// once, and its reply is still read in order and thrown away, never
// handed to another caller.
func (p *pipe) call(ctx context.Context, req *request) (any, error) {
	select {
	case p.queue <- req:
	default:
		if err := p.waitForRoom(ctx, req); err != nil {
			p.n.putRequest(req)
			return nil, err
		}
	}
	p.flush()
	for {
		select {
		case r := <-req.done:
			p.n.putRequest(req) // the reply was delivered: nobody else holds req
			return r.reply, r.err
		case <-ctx.Done():
			return nil, p.leave(req, ctx.Err())
		case <-req.expiry():
			if req.expired() {
				return nil, p.leave(req, context.DeadlineExceeded)
			}
		}
	}
}

// waitForRoom queues req when the queue has room again, or fails when the
// caller's wait ends first.
func (p *pipe) waitForRoom(ctx context.Context, req *request) error {
	for {
		select {
		case p.queue <- req:
			return nil
		case <-ctx.Done():
			return p.queueFull(ctx.Err())
		case <-req.expiry():
			if req.expired() {
				return p.queueFull(context.DeadlineExceeded)
			}
		}
	}
}

// leave gives up on req, queued, with err from the end of the wait. A
// request the writer has not taken yet is never written: while the node
// is being dialled, the error says so (Op "dial": never sent). One the
// writer took may have been written, even on a connection that was
// opened just now, and fails like any command whose deadline passed.
func (p *pipe) leave(req *request, err error) error {
	// Before it is marked left: from then on the writer may recycle req.
	req.stopTimer()
	if !req.state.CompareAndSwap(reqQueued, reqLeft) {
		return err // taken: req is not reused, a reply may still come
	}
	if p.connecting.Load() {
		return p.stillConnecting(err)
	}
	return err
}

// take claims req for writing; false when its caller left first, and
// req is then recycled. It runs under the write lock.
func (p *pipe) take(req *request) bool {
	if req.state.CompareAndSwap(reqQueued, reqTaken) {
		return true
	}
	p.n.putRequest(req) // its caller is gone: do not send
	return false
}

// stillConnecting is the error of a caller whose context ended while its
// command waited for the node to be dialled: it says so, and why the last
// attempt failed, rather than only that the deadline passed.
func (p *pipe) stillConnecting(ctxErr error) error {
	state := p.connState()
	if state == nil {
		state = errConnecting // the dial ended just now
	}
	return wrapErr(p.n.addr, "dial", fmt.Errorf("%w: %w", state, ctxErr), p.n.secret)
}

// errConnecting is the state of a pipe whose first dial is under way.
var errConnecting = errors.New("still connecting to the node")

// connState returns nil while the pipe is connected, or idle before its
// first dial, and otherwise why it is not: a dial is under way, and, once
// one failed, why the latest attempt failed. That stays until a dial
// succeeds.
func (p *pipe) connState() error {
	last := p.lastErr.Load()
	switch {
	case last != nil && p.connecting.Load():
		return fmt.Errorf("%w (the last attempt failed: %w)", errConnecting, *last)
	case last != nil:
		return fmt.Errorf("reconnecting to the node (the last attempt failed: %w)", *last)
	case p.connecting.Load():
		return errConnecting
	}
	return nil
}

// nodeDown is the error of calls failed without trying: the node is in
// its reconnect back-off, or being dialled again after a failure. It runs
// under the write lock.
func (p *pipe) nodeDown() error {
	return wrapErr(p.n.addr, "dial", fmt.Errorf("%w: %w", errNodeDown, p.downErr), p.n.secret)
}

// start queues a request whose reply goes to its receiver, without
// waiting for room: a full queue fails it at once.
func (p *pipe) start(req *request) {
	select {
	case p.queue <- req:
		p.flush()
	default:
		p.deliver(req, nil, p.queueFull(nil))
	}
}

// queueFull is the error of a call that found no room in the queue, with
// the end of its context (nil when it did not wait).
func (p *pipe) queueFull(ctxErr error) error {
	err := errQueueFull
	if ctxErr != nil {
		err = errors.Join(errQueueFull, ctxErr)
	}
	return wrapErr(p.n.addr, "queue", err, "")
}

// deliver hands a reply to whoever waits for it. A script that the node
// did not have is sent again with EVAL first.
func (p *pipe) deliver(req *request, reply any, err error) {
	if req.rcv == nil {
		req.done <- result{reply, err}
		return
	}
	if req.script != nil && req.cmd == "EVALSHA" && isNoScript(err) {
		req.toEval()
		req.state.Store(reqQueued) // for the writer to take again
		p.start(req)
		return
	}
	rcv, cmd := req.rcv, req.cmd
	p.n.putRequest(req)
	rcv.Receive(reply, p.n.nodeErr(cmd, err))
}

// flush wakes the pipe's writer goroutine. It yields once before it
// drains the queue, so that a busy node gets few, large writes; on an idle
// node the hand-off costs no more than writing from the caller (measured
// with redlock-bench's latency mode), and the callers never wait for the
// write lock.
func (p *pipe) flush() {
	if p.closed.Load() {
		// Queued after close drained the queue, or about to be drained by
		// it: either way it fails here or there, never waits.
		p.failQueued(ErrClosed)
		return
	}
	select {
	case p.kick <- struct{}{}:
	default: // the writer is awake already
	}
}

// writer writes the queue whenever it is kicked, until the pipe closes.
func (p *pipe) writer() {
	defer p.bg.Done()
	for {
		select {
		case <-p.kick:
		case <-p.quit:
			return
		}
		runtime.Gosched() // let callers that are about to queue do so
		p.wmu.Lock()
		p.writeQueued()
		p.wmu.Unlock()
	}
}

// writeQueued sends the queue in batches. It runs under the write lock.
func (p *pipe) writeQueued() {
	for len(p.queue) > 0 {
		if p.closed.Load() {
			p.failQueued(ErrClosed)
			return
		}
		if p.l != nil && p.l.broken.Load() {
			p.lost(p.l)
		}
		if p.l == nil {
			p.connect()
			return
		}
		if p.dialing {
			return // a ping is checking the link
		}
		if p.pingDue() {
			// Check an idle link in the background, as a dial is done: a
			// node that does not answer must not hold up this caller.
			p.dialing = true
			p.bg.Add(1)
			go p.ping(p.l)
			return
		}
		batch := p.nextBatch()
		p.send(p.l, batch)
		clear(batch)
	}
}

// connect begins a dial in the background for what is queued, unless one
// is under way, or fails the queue while the node is down. It runs under
// the write lock, when the pipe has no link.
func (p *pipe) connect() {
	switch {
	case p.dialing && p.downErr != nil:
		// Dialling again after a failure: the commands that started it
		// wait for it (held), later ones fail at once with the cause, as
		// during the back-off, rather than wait out a dial that may fail
		// the same way.
		p.failQueued(p.nodeDown())
		return
	case p.dialing:
		return // the dialler writes when it is done
	case time.Now().Before(p.downUntil):
		p.failQueued(p.nodeDown())
		return
	}
	p.dialing = true
	p.connecting.Store(true)
	if p.downErr != nil {
		p.hold()
	}
	p.bg.Add(1)
	go p.dial()
}

// pingDue reports whether the link stayed idle long enough that it must
// answer a PING before it carries commands again. It runs under the write
// lock.
func (p *pipe) pingDue() bool {
	idle := p.n.cfg.pingIdle
	return idle > 0 && p.l.outstanding.Load() == 0 && time.Since(p.l.lastUsed) >= idle
}

// nextBatch takes up to maxBatch requests off the queue into p.batch,
// leaving out those whose caller is gone. It runs under the write lock.
func (p *pipe) nextBatch() []*request {
	batch := p.batch[:0]
	for len(batch) < maxBatch {
		select {
		case req := <-p.queue:
			if p.take(req) {
				batch = append(batch, req)
			}
		default:
			return batch
		}
	}
	return batch
}

// ping checks an idle link in the background, then writes what queued;
// a link that does not answer is dropped and the node dialled again.
func (p *pipe) ping(l *link) {
	defer p.bg.Done()
	_, err := redis.DoWithTimeout(l.conn, p.n.cfg.ioTimeout, "PING")
	p.wmu.Lock()
	p.dialing = false
	switch {
	case err == nil:
		l.good.Store(true)
		l.lastUsed = time.Now()
	case p.l == l:
		l.setCause(err)
		l.broken.Store(true)
		p.lost(l)
	}
	p.writeQueued()
	p.wmu.Unlock()
	p.flush()
}

// dial connects in the background and then writes what queued meanwhile;
// a failed dial starts or lengthens the back-off and fails the queue.
func (p *pipe) dial() {
	defer p.bg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), p.n.cfg.dialTimeout)
	conn, err := p.n.dial(ctx)
	cancel()
	p.wmu.Lock()
	p.dialing = false
	switch {
	case err != nil:
		p.down(err)
		err = wrapErr(p.n.addr, "dial", err, p.n.secret)
		p.failHeld(err)
		p.failQueued(err)
	case p.closed.Load():
		_ = conn.Close()
		p.failHeld(ErrClosed)
		p.failQueued(ErrClosed)
	default:
		p.connected(conn)
	}
	p.connecting.Store(false)
	p.wmu.Unlock()
	p.flush()
}

// connected makes conn, just dialled, the pipe's link and writes what
// waited for it: the held requests first. It runs under the write lock.
func (p *pipe) connected(conn redis.Conn) {
	// The back-off is not reset yet: a node at its client limit accepts
	// and closes. It is when the link is lost without having carried a
	// good reply (lost).
	p.downErr = nil
	p.lastErr.Store(nil)
	p.opened.Store(true)
	p.n.gen.Add(1) // before anything is written on the new link
	p.l = &link{
		conn:       conn,
		inflight:   make(chan *request, 4*maxBatch),
		lastUsed:   time.Now(),
		readerDone: make(chan struct{}),
	}
	go p.reader(p.l)
	p.sendHeld()
	p.writeQueued()
}

// hold moves what is queued to held, for the dial about to begin. It runs
// under the write lock.
func (p *pipe) hold() {
	for {
		select {
		case req := <-p.queue:
			p.held = append(p.held, req)
		default:
			return
		}
	}
}

// sendHeld writes the requests held for the dial that just succeeded,
// before anything queued later. It runs under the write lock.
func (p *pipe) sendHeld() {
	batch := p.batch[:0]
	for i, req := range p.held {
		p.held[i] = nil
		if !p.take(req) {
			continue
		}
		if batch = append(batch, req); len(batch) == maxBatch {
			p.send(p.l, batch)
			clear(batch)
			batch = batch[:0]
		}
	}
	p.send(p.l, batch)
	clear(batch)
	p.held = p.held[:0]
}

// failHeld fails the requests held for a dial that failed. It runs under
// the write lock.
func (p *pipe) failHeld(err error) {
	for i, req := range p.held {
		p.held[i] = nil
		p.deliver(req, nil, err)
	}
	p.held = p.held[:0]
}

// down starts or lengthens the back-off after a failure to connect. It
// runs under the write lock.
func (p *pipe) down(err error) {
	if p.backoff == 0 {
		p.backoff = minBackoff
	} else if p.backoff *= 2; p.backoff > maxBackoff {
		p.backoff = maxBackoff
	}
	p.downUntil, p.downErr = time.Now().Add(p.backoff), err
	p.lastErr.Store(&err)
}

// lost drops the current link l, which broke. A link that carried a good
// reply resets the back-off: the node is dialled again at once. One that
// did not counts as a failed dial. It runs under the write lock.
func (p *pipe) lost(l *link) {
	p.drop(l, errBroken)
	p.l = nil
	if l.good.Load() {
		p.backoff = 0
		return
	}
	cause := errBroken
	if c := l.cause.Load(); c != nil {
		cause = *c
	}
	p.down(fmt.Errorf("connection lost before the node answered: %w", cause))
}

// send writes a batch on l in one flush and hands its requests to l's
// reader in order. It runs under the write lock.
func (p *pipe) send(l *link, batch []*request) {
	if len(batch) == 0 {
		return
	}
	l.lastUsed = time.Now()
	if batch = p.fit(l, batch); len(batch) == 0 {
		return
	}
	if err := write(l.conn, batch); err != nil {
		// Commands that reached the buffer may or may not reach the node:
		// they fail like any command on a broken connection.
		err = fmt.Errorf("write: %w", err)
		l.setCause(err)
		l.broken.Store(true)
		for _, r := range batch {
			p.deliver(r, nil, err)
		}
		return
	}
	for _, r := range batch {
		l.outstanding.Add(1)
		l.inflight <- r
	}
}

// fit returns as much of batch as l's reader has room for, and fails the
// rest. It never waits for the reader: a node that stopped answering must
// not hold up the caller that happens to be writing. Only send adds to
// inflight, under the write lock, so the room seen here can only grow.
func (p *pipe) fit(l *link, batch []*request) []*request {
	room := cap(l.inflight) - len(l.inflight)
	if len(batch) <= room {
		return batch
	}
	stuck := fmt.Errorf("%w: %d commands waiting for replies", errNotAnswering, len(l.inflight))
	for _, r := range batch[room:] {
		p.deliver(r, nil, stuck)
	}
	return batch[:room]
}

// write sends batch on conn in one flush.
func write(conn redis.Conn, batch []*request) error {
	for _, r := range batch {
		if r.tx != nil {
			if err := writeTx(conn, r.tx); err != nil {
				return err
			}
			continue
		}
		if err := conn.Send(r.cmd, r.args...); err != nil {
			return err
		}
	}
	return conn.Flush()
}

// writeTx sends the transaction of cmds: MULTI, cmds, EXEC.
func writeTx(conn redis.Conn, cmds [][]any) error {
	if err := conn.Send("MULTI"); err != nil {
		return err
	}
	for _, c := range cmds {
		name, _ := c[0].(string)
		if err := conn.Send(name, c[1:]...); err != nil {
			return err
		}
	}
	return conn.Send("EXEC")
}

// drop closes a link: the reader fails what is still in flight with err
// and exits. It runs under the write lock.
func (p *pipe) drop(l *link, err error) {
	l.failWith.Store(err)
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
	good := false
	for r := range l.inflight {
		if broken == nil && l.broken.Load() {
			broken = l.dropErr(errBroken)
		}
		if broken != nil {
			l.outstanding.Add(-1)
			p.deliver(r, nil, broken)
			continue
		}
		var reply any
		var err error
		if r.tx != nil {
			reply, err = p.receiveTx(l, len(r.tx))
		} else {
			reply, err = redis.ReceiveWithTimeout(l.conn, p.n.cfg.ioTimeout)
		}
		if !good {
			good = l.firstReplies(err)
		}
		reply, err = neutral(reply, err)
		if _, replied := err.(ReplyError); err != nil && !replied {
			// A transport error: nothing more can be read from this
			// connection. Close it so that the writer sees it too.
			err = l.dropErr(err) // the error it was dropped with, if it was
			broken = err
			l.broken.Store(true)
			_ = l.conn.Close()
		}
		l.outstanding.Add(-1)
		p.deliver(r, reply, err)
	}
}

// receiveTx reads the replies of a transaction of n commands: MULTI's,
// one per command as it was queued, and EXEC's, which it returns. When
// the node refused a command as it was queued, EXEC's reply is an
// EXECABORT error and the refusal is returned instead: it names the
// cause. A transport error ends the reading.
func (p *pipe) receiveTx(l *link, n int) (any, error) {
	var refused error
	for k := 0; k <= n; k++ {
		_, err := redis.ReceiveWithTimeout(l.conn, p.n.cfg.ioTimeout)
		if err == nil {
			continue
		}
		if _, ok := err.(redis.Error); !ok {
			return nil, err
		}
		if refused == nil {
			refused = err
		}
	}
	reply, err := redis.ReceiveWithTimeout(l.conn, p.n.cfg.ioTimeout)
	re, ok := err.(redis.Error)
	switch {
	case !ok:
		return reply, err
	case refused != nil:
		return nil, refused
	}
	rest, discarded := strings.CutPrefix(string(re), "EXECABORT ")
	if !discarded {
		// EXEC refused without discarding the transaction (Redis and
		// Valkey discard it): the connection may still be inside it, and
		// would queue the commands behind it.
		return nil, fmt.Errorf("%w: EXEC refused (%s), and the connection may be left inside the transaction: closed", errBroken, string(re))
	}
	if _, cause, found := strings.Cut(rest, "because of: "); found {
		return nil, redis.Error(cause) // EXEC itself refused: "EXECABORT ... because of: NOPERM ..."
	}
	return nil, re
}

// dropErr returns the error the link was dropped with (drop), or err when
// it was not dropped on purpose.
func (l *link) dropErr(err error) error {
	if e, ok := l.failWith.Load().(error); ok {
		return e
	}
	return err
}

// firstReplies records the outcome of a read until one succeeds: the
// first error is the link's cause, a reply that is not an error makes the
// link good. It reports whether the link is good.
func (l *link) firstReplies(err error) bool {
	if err != nil {
		l.setCause(err)
		return false
	}
	l.good.Store(true)
	return true
}

// setCause records err as the link's first error, unless it has one.
func (l *link) setCause(err error) {
	l.cause.CompareAndSwap(nil, &err)
}

// failQueued fails every request still waiting in the queue.
func (p *pipe) failQueued(err error) {
	for {
		select {
		case r := <-p.queue:
			p.deliver(r, nil, err)
		default:
			return
		}
	}
}

// close fails what is queued and in flight with ErrClosed and waits for
// the pipe's goroutines.
func (p *pipe) close() {
	p.closed.Store(true)
	close(p.quit)
	p.wmu.Lock()
	if p.l != nil {
		p.drop(p.l, ErrClosed)
		p.l = nil
	}
	p.failQueued(ErrClosed)
	p.wmu.Unlock()
	p.bg.Wait()
	p.failQueued(ErrClosed) // queued while the writer was finishing
}
