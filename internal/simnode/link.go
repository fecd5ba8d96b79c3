package simnode

import (
	"net"
	"sync"
	"time"
)

// link relays one connection between a client and the engine:
//
//	client ⇄ (pipe) ⇄ link ⇄ (pipe) ⇄ miniredis
//
// Each direction has a reader that queues what arrives (as a kernel's
// socket buffer would, so that neither side blocks on the other's faults)
// and a writer that passes it on once the node's faults allow: a paused
// node takes no commands, a cut client's bytes wait, a slow node's replies
// wait for their delay.
type link struct {
	n      *Node
	inc    *incarnation
	client string
	cli    net.Conn // our end of the client's pipe
	eng    net.Conn // our end of the engine's pipe
	up     chan chunk
	down   replies
	closed chan struct{}
	once   sync.Once
}

type chunk struct {
	b  []byte
	at time.Time // when it arrived
}

// linkBuffer bounds the chunks of commands queued on a link: a client
// that sends that much to a node that does not read waits, as on a full
// socket.
const linkBuffer = 1024

// openLocked opens a connection of client to inc and returns the client's
// end. Called with n.mu held.
func (n *Node) openLocked(inc *incarnation, client string) net.Conn {
	c, cli := net.Pipe()
	eng, srv := net.Pipe()
	l := &link{n: n, inc: inc, client: client, cli: cli, eng: eng,
		up: make(chan chunk, linkBuffer), down: replies{ready: make(chan struct{}, 1)}, closed: make(chan struct{})}
	n.links = append(n.links, l)
	n.stats.Dials++
	inc.m.Server().ServeConn(srv)
	go l.read(l.cli, l.up)
	go l.readReplies()
	go l.writeUp()
	go l.writeDown()
	return c
}

// read queues what arrives on c until it fails, then closes the link.
func (l *link) read(c net.Conn, q chan<- chunk) {
	defer l.close()
	buf := make([]byte, 16<<10)
	for {
		k, err := c.Read(buf)
		if k > 0 {
			select {
			case q <- chunk{b: append([]byte(nil), buf[:k]...), at: time.Now()}:
			case <-l.closed:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readReplies queues what the engine sends until it fails, then closes
// the link. It never waits for the client: the engine must not stall on
// a client that is cut off (a node buffers its output).
func (l *link) readReplies() {
	defer l.close()
	buf := make([]byte, 16<<10)
	for {
		k, err := l.eng.Read(buf)
		if k > 0 {
			l.down.push(chunk{b: append([]byte(nil), buf[:k]...), at: time.Now()})
		}
		if err != nil {
			return
		}
	}
}

// replies is a link's queue of replies: unbounded, as a node's output
// buffer is.
type replies struct {
	mu    sync.Mutex
	q     []chunk
	ready chan struct{} // a token while q is not empty
}

func (r *replies) push(c chunk) {
	r.mu.Lock()
	r.q = append(r.q, c)
	r.mu.Unlock()
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// pop takes the oldest reply, waiting for one until closed is.
func (r *replies) pop(closed <-chan struct{}) (chunk, bool) {
	for {
		r.mu.Lock()
		if len(r.q) > 0 {
			c := r.q[0]
			r.q[0] = chunk{}
			r.q = r.q[1:]
			if len(r.q) > 0 {
				select {
				case r.ready <- struct{}{}:
				default:
				}
			}
			r.mu.Unlock()
			return c, true
		}
		r.mu.Unlock()
		select {
		case <-r.ready:
		case <-closed:
			return chunk{}, false
		}
	}
}

// writeUp passes the client's bytes to the engine while the node runs
// and the client is not cut off, with the engine's clock set to the
// node's.
func (l *link) writeUp() {
	for {
		var c chunk
		select {
		case c = <-l.up:
		case <-l.closed:
			return
		}
		if !l.await(func(n *Node) bool {
			repliesOnly, cut := n.cuts[l.client]
			return !n.paused && (!cut || repliesOnly)
		}) {
			return
		}
		l.n.mu.Lock()
		now := l.n.clk.at(time.Now())
		l.n.stats.Commands++
		l.n.mu.Unlock()
		l.inc.m.SetTime(now)
		if _, err := l.eng.Write(c.b); err != nil {
			l.close()
			return
		}
	}
}

// writeDown passes the engine's replies to the client after the node's
// delay, while the client is not cut off.
func (l *link) writeDown() {
	for {
		c, ok := l.down.pop(l.closed)
		if !ok {
			return
		}
		l.n.mu.Lock()
		delay := l.n.delay
		l.n.mu.Unlock()
		if wait := time.Until(c.at.Add(delay)); delay > 0 && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return
			}
		}
		if !l.await(func(n *Node) bool { _, cut := n.cuts[l.client]; return !cut }) {
			return
		}
		if _, err := l.cli.Write(c.b); err != nil {
			l.close()
			return
		}
	}
}

// await waits until ok holds for the node (checked under its mutex),
// or the link closes (false).
func (l *link) await(ok func(*Node) bool) bool {
	for {
		l.n.mu.Lock()
		pass, changed := ok(l.n), l.n.changed
		l.n.mu.Unlock()
		if pass {
			return true
		}
		select {
		case <-changed:
		case <-l.closed:
			return false
		}
	}
}

// close ends the connection on both sides and forgets it.
func (l *link) close() {
	l.once.Do(func() {
		close(l.closed)
		_ = l.cli.Close()
		_ = l.eng.Close()
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
