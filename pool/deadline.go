package pool

import (
	"net"
	"time"
)

// deadlineSlack is how much later than asked a lazyDeadlineConn may apply
// a deadline.
const deadlineSlack = 20 * time.Millisecond

// lazyDeadlineConn applies deadlines up to deadlineSlack late, so that it
// can skip most updates. redigo sets a fresh read deadline before every
// reply and a write deadline before every flush; on a pipelined connection
// that reads thousands of replies a second, most of those updates move the
// deadline by microseconds, and each costs a trip through the runtime's
// timer heap. A deadline asked for is applied as t+slack, and a later
// request is skipped while it is not past the deadline in place: no read
// or write ever waits less than redigo asked, nor more than the slack
// longer. A cleared deadline is always applied.
//
// Each deadline is set only by one goroutine (the reader sets read
// deadlines, the writer write deadlines), so the fields need no lock.
type lazyDeadlineConn struct {
	net.Conn
	read, write time.Time // the deadlines in place; zero when cleared
}

func (c *lazyDeadlineConn) SetReadDeadline(t time.Time) error {
	t, ok := lazy(c.read, t)
	if !ok {
		return nil
	}
	c.read = t
	return c.Conn.SetReadDeadline(t)
}

func (c *lazyDeadlineConn) SetWriteDeadline(t time.Time) error {
	t, ok := lazy(c.write, t)
	if !ok {
		return nil
	}
	c.write = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *lazyDeadlineConn) SetDeadline(t time.Time) error {
	c.read, c.write = t, t
	return c.Conn.SetDeadline(t)
}

// lazy returns the deadline to apply for a request of t when cur is in
// place, and false when cur already serves: it is set and not before t.
func lazy(cur, t time.Time) (time.Time, bool) {
	if t.IsZero() {
		return t, true
	}
	if !cur.IsZero() && !cur.Before(t) {
		return cur, false
	}
	return t.Add(deadlineSlack), true
}
