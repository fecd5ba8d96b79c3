package simnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// link is one connection between a client and the node: two in-memory
// byte queues, up (commands) and down (replies), with the client holding
// one end (clientEnd) and the node serving the other (nodeEnd, serve).
//
// The faults gate each queue where it is read, so a write never waits on
// the other side (as a socket buffer takes what is sent): the node's end
// reads no command while the node is paused or the client is cut off both
// ways; the client's end reads no reply before the node's delay has passed
// since the node wrote it, nor while the client is cut off. Nothing else
// runs between the two: a command is one hand-off from the client's
// writer to the node's reader, and a reply one hand-off back.
type link struct {
	n      *Node
	inc    *incarnation
	client string
	up     queue // commands, the client's end writes them
	down   queue // replies, the node's end writes them
	closed chan struct{}
	once   sync.Once
}

// linkBuffer bounds the bytes of commands queued on a link: a client that
// sends that much to a node that does not read waits, as on a full socket.
const linkBuffer = 4 << 20

// openLocked opens a connection of client to inc and returns the client's
// end. Called with n.mu held.
func (n *Node) openLocked(inc *incarnation, client string) net.Conn {
	l := &link{n: n, inc: inc, client: client, closed: make(chan struct{})}
	l.up.init()
	l.down.init()
	n.links = append(n.links, l)
	n.stats.Dials++
	go l.serve(inc.e, &nodeEnd{end: end{l: l, from: &l.up, to: &l.down}})
	return &clientEnd{end: end{l: l, from: &l.down, to: &l.up}}
}

// serve is the node's side of the link: it reads each command, runs it
// on the engine and writes its reply. Replies are flushed when the node
// needs more of the connection's bytes (flusher), so the replies to the
// commands of one read go out in one write, as Redis answers a pipeline.
// When the link ends, so do the connection's subscriptions.
func (l *link) serve(e *engine, c *nodeEnd) {
	cn := e.newConn(bufio.NewWriterSize(c, 16<<10))
	cn.client = l.client
	r := bufio.NewReaderSize(flusher{c, cn}, 16<<10)
	defer func() {
		e.closeConn(cn)
		l.close()
	}()
	for {
		args, err := readCommand(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				cn.wmu.Lock()
				writeReply(cn.w, errorReply("ERR Protocol error: "+err.Error()))
				_ = cn.w.Flush()
				cn.wmu.Unlock()
			}
			return
		}
		reply := e.run(cn, args)
		cn.wmu.Lock()
		writeReply(cn.w, reply)
		if cn.quit {
			_ = cn.w.Flush()
		}
		cn.wmu.Unlock()
		if cn.quit {
			return
		}
	}
}

// flusher reads a link's commands, having flushed the replies written so
// far: the reader asks for more only once every command it holds has run.
type flusher struct {
	c  *nodeEnd
	cn *conn
}

func (f flusher) Read(b []byte) (int, error) {
	f.cn.wmu.Lock()
	_ = f.cn.w.Flush()
	f.cn.wmu.Unlock()
	return f.c.Read(b)
}

// readCommand reads one command: an array of bulk strings, as clients
// send them.
func readCommand(r *bufio.Reader) ([]string, error) {
	k, err := readHeader(r, '*')
	if err != nil {
		return nil, err
	}
	if k <= 0 || k > 1<<20 {
		return nil, fmt.Errorf("invalid multibulk length %d", k)
	}
	args := make([]string, k)
	for i := range args {
		size, err := readHeader(r, '$')
		if err != nil {
			return nil, err
		}
		if size < 0 || size > 512<<20 {
			return nil, fmt.Errorf("invalid bulk length %d", size)
		}
		var b []byte
		if size+2 <= r.Size() {
			// Read in place: the string is the only copy.
			if b, err = r.Peek(size + 2); err != nil {
				return nil, err
			}
		} else {
			b = make([]byte, size+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return nil, err
			}
		}
		if b[size] != '\r' || b[size+1] != '\n' {
			return nil, errors.New("a bulk string without CRLF")
		}
		args[i] = string(b[:size])
		if size+2 <= r.Size() {
			_, _ = r.Discard(size + 2)
		}
	}
	return args, nil
}

// readHeader reads a line "<kind><integer>\r\n" and returns the integer.
func readHeader(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 4 || line[0] != kind || line[len(line)-2] != '\r' {
		return 0, fmt.Errorf("expected '%c', got %q", kind, line)
	}
	digits, neg := line[1:len(line)-2], false
	if digits[0] == '-' {
		digits, neg = digits[1:], true
	}
	k := 0
	for _, d := range digits {
		if d < '0' || d > '9' || k > 1<<40 {
			return 0, fmt.Errorf("invalid length %q", line)
		}
		k = k*10 + int(d-'0')
	}
	if len(digits) == 0 {
		return 0, fmt.Errorf("invalid length %q", line)
	}
	if neg {
		k = -k
	}
	return k, nil
}

// queue is one direction of a link: chunks in the order written, each
// with when it was written.
type queue struct {
	mu     sync.Mutex
	q      []chunk
	off    int // bytes of q[0] already read
	size   int // bytes queued
	change chan struct{}
}

type chunk struct {
	b  []byte
	at time.Time // when it was written
}

func (q *queue) init() { q.change = make(chan struct{}) }

// notifyLocked wakes the readers and writers waiting on q.
func (q *queue) notifyLocked() {
	close(q.change)
	q.change = make(chan struct{})
}

// end is what both ends of a link share: deadlines, and reading from and
// writing to the link's queues.
type end struct {
	l        *link
	from, to *queue

	dmu      sync.Mutex
	rdl, wdl time.Time     // deadlines, zero when none
	dchange  chan struct{} // closed and replaced when a deadline changes
}

// errDeadline is a passed deadline's error: os.ErrDeadlineExceeded, which
// is a net.Error whose Timeout is true.
var errDeadline = os.ErrDeadlineExceeded

// deadline returns the read or write deadline and what wakes a waiter
// when either changes.
func (e *end) deadline(read bool) (time.Time, <-chan struct{}) {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if e.dchange == nil {
		e.dchange = make(chan struct{})
	}
	if read {
		return e.rdl, e.dchange
	}
	return e.wdl, e.dchange
}

func (e *end) setDeadline(read, write bool, t time.Time) error {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if read {
		e.rdl = t
	}
	if write {
		e.wdl = t
	}
	if e.dchange != nil {
		close(e.dchange)
	}
	e.dchange = make(chan struct{})
	return nil
}

func (e *end) SetDeadline(t time.Time) error      { return e.setDeadline(true, true, t) }
func (e *end) SetReadDeadline(t time.Time) error  { return e.setDeadline(true, false, t) }
func (e *end) SetWriteDeadline(t time.Time) error { return e.setDeadline(false, true, t) }

func (e *end) LocalAddr() net.Addr  { return addr(e.l.client) }
func (e *end) RemoteAddr() net.Addr { return addr(e.l.n.addr) }

// Close closes the whole link, both ends.
func (e *end) Close() error {
	e.l.close()
	return nil
}

// addr is a link end's address.
type addr string

func (a addr) Network() string { return "simnode" }
func (a addr) String() string  { return string(a) }

// write queues b on e.to, waiting while the queue is full.
func (e *end) write(b []byte) (int, error) {
	q := e.to
	for {
		select {
		case <-e.l.closed:
			return 0, io.ErrClosedPipe
		default:
		}
		q.mu.Lock()
		if q.size < linkBuffer {
			q.q = append(q.q, chunk{b: append([]byte(nil), b...), at: time.Now()})
			q.size += len(b)
			q.notifyLocked()
			q.mu.Unlock()
			return len(b), nil
		}
		change := q.change
		q.mu.Unlock()
		if err := e.wait(false, change, nil, time.Time{}); err != nil {
			return 0, err
		}
	}
}

// read takes what e.from holds into b once ready says the first chunk may
// be read: ready returns whether it may, and else what to wait for (a
// channel that a fault change closes, and a time, zero for none). With
// the first, read takes the chunks after it written up to when ready
// allows (zero: any).
func (e *end) read(b []byte, ready func(c chunk) (ok bool, gate <-chan struct{}, at, upTo time.Time)) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	q := e.from
	for {
		select {
		case <-e.l.closed:
			return 0, io.EOF
		default:
		}
		q.mu.Lock()
		var c chunk
		if len(q.q) > 0 {
			c = q.q[0]
		}
		change := q.change
		q.mu.Unlock()
		var gate <-chan struct{}
		var at time.Time
		if c.b != nil {
			ok, g, t, upTo := ready(c)
			if ok {
				return q.take(b, upTo), nil
			}
			gate, at = g, t
		}
		if err := e.wait(true, change, gate, at); err != nil {
			return 0, err
		}
	}
}

// take moves up to len(b) queued bytes into b, from the first chunk and
// the ones after it written up to upTo (zero: any). Only the reader
// takes, so the first chunk is still the one read looked at.
func (q *queue) take(b []byte, upTo time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := 0
	for k < len(b) && len(q.q) > 0 && (k == 0 || upTo.IsZero() || !q.q[0].at.After(upTo)) {
		c := q.q[0].b[q.off:]
		m := copy(b[k:], c)
		k += m
		if m < len(c) {
			q.off += m
			break
		}
		q.q[0] = chunk{}
		q.q = q.q[1:]
		q.off = 0
	}
	q.size -= k
	q.notifyLocked()
	return k
}

// wait waits until the queue changes, the gate opens, time at comes, the
// deadline passes (errDeadline) or the link closes (io.EOF on a read,
// io.ErrClosedPipe on a write).
func (e *end) wait(read bool, change, gate <-chan struct{}, at time.Time) error {
	dl, dchange := e.deadline(read)
	if !dl.IsZero() && (at.IsZero() || dl.Before(at)) {
		if !time.Now().Before(dl) {
			return errDeadline
		}
		at = dl
	}
	var timer <-chan time.Time
	if !at.IsZero() {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-change:
	case <-gate:
	case <-dchange:
	case <-timer:
	case <-e.l.closed:
		if read {
			return io.EOF
		}
		return io.ErrClosedPipe
	}
	return nil
}

// clientEnd is the client's end of a link: it writes commands, and reads
// replies once the node's delay has passed and while it is not cut off.
type clientEnd struct{ end }

func (c *clientEnd) Write(b []byte) (int, error) { return c.write(b) }

func (c *clientEnd) Read(b []byte) (int, error) {
	l := c.l
	return c.read(b, func(ch chunk) (bool, <-chan struct{}, time.Time, time.Time) {
		n := l.n
		n.mu.Lock()
		_, cut := n.cuts[l.client]
		delay, changed := n.delay+n.stalls[l.client], n.changed
		n.mu.Unlock()
		if cut {
			return false, changed, time.Time{}, time.Time{}
		}
		if delay <= 0 {
			return true, nil, time.Time{}, time.Time{}
		}
		now := time.Now()
		if due := ch.at.Add(delay); now.Before(due) {
			return false, changed, due, time.Time{}
		}
		return true, nil, time.Time{}, now.Add(-delay)
	})
}

// nodeEnd is the node's end of a link: it reads commands while the node
// runs and the client is not cut off both ways, and writes replies.
type nodeEnd struct{ end }

func (c *nodeEnd) Write(b []byte) (int, error) { return c.write(b) }

func (c *nodeEnd) Read(b []byte) (int, error) {
	l := c.l
	k, err := c.read(b, func(chunk) (bool, <-chan struct{}, time.Time, time.Time) {
		n := l.n
		n.mu.Lock()
		defer n.mu.Unlock()
		repliesOnly, cut := n.cuts[l.client]
		if n.paused || cut && !repliesOnly {
			return false, n.changed, time.Time{}, time.Time{}
		}
		n.stats.Commands++
		return true, nil, time.Time{}, time.Time{}
	})
	return k, err
}

// close ends the connection on both sides and forgets it.
func (l *link) close() {
	l.once.Do(func() {
		close(l.closed)
		n := l.n
		n.mu.Lock()
		for i, o := range n.links {
			if o == l {
				n.links = append(n.links[:i], n.links[i+1:]...)
				break
			}
		}
		n.mu.Unlock()
	})
}
