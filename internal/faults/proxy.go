package faults

import (
	"errors"
	"fmt"
	"math/rand"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does to the traffic it carries.
type Mode int

const (
	// Pass forwards everything at once.
	Pass Mode = iota
	// Latency delays every chunk, both ways, by Delay plus a random part
	// of up to Jitter, keeping the order of the bytes.
	Latency
	// BlackHole accepts connections and forwards nothing either way. A
	// connection that carried anything during the black hole is closed
	// when it ends, as TCP would give up on it: a byte stream is never
	// resumed with bytes missing.
	BlackHole
	// Reset forwards requests, and cuts the next reply on each connection
	// in half: the client gets the first half, then both sides of the
	// connection are reset (RST).
	Reset
	// DelayReplies forwards requests at once (the node executes them) and
	// holds every reply back for Delay.
	DelayReplies
	// Trickle forwards requests at once and writes replies one byte at a
	// time, Delay between bytes.
	Trickle
)

var modeNames = [...]string{"pass", "latency", "black-hole", "reset", "delay-replies", "trickle"}

// String names the mode.
func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Fault is a Proxy's behaviour: a Mode and its parameters.
type Fault struct {
	Mode   Mode
	Delay  time.Duration // Latency, DelayReplies: the delay; Trickle: the gap between bytes
	Jitter time.Duration // Latency: up to this much more, at random, per chunk
}

// proxyDialTimeout bounds the proxy's connection to its node.
const proxyDialTimeout = time.Second

// proxyQueue is how many chunks a direction of a connection holds back
// before its reader waits.
const proxyQueue = 256

// Proxy is a TCP proxy on 127.0.0.1 in front of one node. It forwards
// each connection it accepts to a new connection to the node, and applies
// its current Fault to the traffic; Set changes the fault for the
// connections open now and those to come. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	l      net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	fault  Fault
	rng    *rand.Rand // jitter; guarded by mu
	conns  map[*proxyConn]struct{}
	closed bool
}

// NewProxy listens on a free 127.0.0.1 port and forwards to target, which
// must be on 127.0.0.1 too. seed seeds the jitter.
func NewProxy(target string, seed int64) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("faults: proxy target %q: %w", target, err)
	}
	if host != "127.0.0.1" {
		return nil, fmt.Errorf("faults: proxy target %q is not on 127.0.0.1", target)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy listen: %w", err)
	}
	p := &Proxy{target: target, l: l, rng: rand.New(rand.NewSource(seed)), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Target returns the node's address.
func (p *Proxy) Target() string { return p.target }

// Set makes f the proxy's behaviour from now on. Chunks already held back
// keep their schedule. Leaving BlackHole closes the connections it
// swallowed traffic of.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	p.fault = f
	var poisoned []*proxyConn
	if f.Mode != BlackHole {
		for c := range p.conns {
			if c.poisoned.Load() {
				poisoned = append(poisoned, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range poisoned {
		c.close(false)
	}
}

// Heal is Set(Fault{}): everything passes again.
func (p *Proxy) Heal() { p.Set(Fault{}) }

// Fault returns the current behaviour.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Conns returns how many connections the proxy carries now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	err := p.l.Close()
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// accept serves connections until the listener is closed.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve connects client to the node and pumps both ways until either
// side ends.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
	if err != nil {
		reset(client) // the node is down: the client sees its connection refused
		return
	}
	c := &proxyConn{p: p, client: client, up: up, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close(false)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.pump(client, up, false) }()
	go func() { defer wg.Done(); c.pump(up, client, true) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// plan decides what happens to a chunk read now on a connection: when to
// write it, and how.
func (p *Proxy) plan(reply bool, now time.Time) (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fault
	var d time.Duration
	switch {
	case f.Mode == Latency:
		d = f.Delay
		if f.Jitter > 0 {
			d += time.Duration(p.rng.Int63n(int64(f.Jitter) + 1))
		}
	case f.Mode == DelayReplies && reply:
		d = f.Delay
	}
	return f, d
}

// proxyConn is one client connection and its connection to the node.
type proxyConn struct {
	p        *Proxy
	client   net.Conn
	up       net.Conn
	poisoned atomic.Bool // carried traffic during a black hole
	once     sync.Once
	done     chan struct{} // closed by close
}

// chunk is a piece of a byte stream waiting to be written.
type chunk struct {
	data    []byte
	at      time.Time // not before
	cut     bool      // Reset: write half, then reset the connection
	gap     time.Duration
	trickle bool // Trickle: one byte at a time, gap between bytes
}

// pump copies src to dst through a queue that applies the fault; reply
// tells the direction (node to client).
func (c *proxyConn) pump(src, dst net.Conn, reply bool) {
	q := make(chan chunk, proxyQueue)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.write(dst, q)
	}()
	defer func() {
		close(q)
		c.close(false)
		wg.Wait()
	}()
	var last time.Time
	for {
		buf := make([]byte, 16<<10)
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			f, d := c.p.plan(reply, now)
			if f.Mode == BlackHole {
				c.poisoned.Store(true)
			}
			if c.poisoned.Load() {
				continue // swallowed; the connection is closed when the black hole ends
			}
			ch := chunk{data: buf[:n], at: now.Add(d)}
			if ch.at.Before(last) {
				ch.at = last // keep the byte order
			}
			last = ch.at
			if reply && f.Mode == Reset {
				ch.cut = true
			}
			if reply && f.Mode == Trickle {
				ch.trickle, ch.gap = true, f.Delay
			}
			select {
			case q <- ch:
			case <-c.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes the chunks of q to dst when they are due.
func (c *proxyConn) write(dst net.Conn, q <-chan chunk) {
	for ch := range q {
		if !c.wait(time.Until(ch.at)) {
			continue // closed: drain
		}
		switch {
		case ch.cut:
			_, _ = dst.Write(ch.data[:len(ch.data)/2])
			c.close(true)
		case ch.trickle:
			for i := range ch.data {
				if i > 0 && !c.wait(ch.gap) {
					break
				}
				if _, err := dst.Write(ch.data[i : i+1]); err != nil {
					c.close(false)
					break
				}
			}
		default:
			if _, err := dst.Write(ch.data); err != nil {
				c.close(false)
			}
		}
	}
}

// wait sleeps for d and reports whether the connection is still open.
func (c *proxyConn) wait(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-c.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// close closes both sides once, with a reset (RST) when rst is set.
func (c *proxyConn) close(rst bool) {
	c.once.Do(func() {
		close(c.done)
		if rst {
			reset(c.client)
			reset(c.up)
			return
		}
		_ = c.client.Close()
		_ = c.up.Close()
	})
}

// reset closes conn so that the peer gets a RST instead of a FIN.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
