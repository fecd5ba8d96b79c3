package pool

import (
	"context"
	"net"
	"time"
)

// deadlineSlack is how much later than asked a lazyDeadlineConn may leave
// a deadline in place.
const deadlineSlack = 20 * time.Millisecond

// lazyDeadlineConn skips deadline updates that would move a deadline later
// by less than deadlineSlack. redigo sets a fresh read deadline before
// every reply and a write deadline before every flush; on a pipelined
// connection that reads thousands of replies a second, most of those
// updates move the deadline by microseconds, and each costs a trip through
// the runtime's timer heap. A deadline that is earlier than the one in
// place, or cleared, is always applied, so no read or write ever waits
// longer than redigo asked plus the slack.
//
// Each deadline is set only by one goroutine (the reader sets read
// deadlines, the writer write deadlines), so the fields need no lock.
type lazyDeadlineConn struct {
	net.Conn
	read, write time.Time
}

func (c *lazyDeadlineConn) SetReadDeadline(t time.Time) error {
	if skip(c.read, t) {
		return nil
	}
	c.read = t
	return c.Conn.SetReadDeadline(t)
}

func (c *lazyDeadlineConn) SetWriteDeadline(t time.Time) error {
	if skip(c.write, t) {
		return nil
	}
	c.write = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *lazyDeadlineConn) SetDeadline(t time.Time) error {
	c.read, c.write = t, t
	return c.Conn.SetDeadline(t)
}

// skip reports whether deadline t may be left at cur: t is set, cur is set,
// and t is not earlier than cur but less than the slack later.
func skip(cur, t time.Time) bool {
	if t.IsZero() || cur.IsZero() {
		return false
	}
	d := t.Sub(cur)
	return d >= 0 && d < deadlineSlack
}

// dialLazy dials TCP like redigo would (connect timeout, keep-alive) and
// wraps the connection in a lazyDeadlineConn.
func dialLazy(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lazyDeadlineConn{Conn: c}, nil
	}
}
