package pool

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
)

// Limits on what a node may declare in a reply. redigo allocates a bulk
// string or an array as soon as it reads its header, and reads nested
// arrays recursively; a broken or hostile peer could make it allocate
// terabytes (which panics the process) or recurse until the stack is
// exhausted. The replies of lock commands are a few dozen bytes; the
// limits leave room for anything a lock client sends through Do.
const (
	// maxBulkLen bounds one bulk string: 64 MiB (Redis's own default
	// limit on what a client may send is 512 MB).
	maxBulkLen = 64 << 20
	// maxPendingElems bounds the array elements declared but not read yet,
	// over all nesting levels: redigo allocates 16 bytes for each up front.
	maxPendingElems = 1 << 20
	// maxDepth bounds the nesting of arrays.
	maxDepth = 32
	// maxLineLen bounds a status, error or integer line, and a header.
	maxLineLen = 1 << 20
	// largeBulk is the size above which a bulk string draws on its
	// node's allowance (bulkAllowance), shared by all the node's
	// connections: maxBulkLen alone bounds each connection, and a node
	// with many connections could declare one on each at once.
	largeBulk = 1 << 20
)

// bulkAllowance is what the bulk strings larger than largeBulk that a
// node declared and has not sent in full yet may add up to, over all its
// connections: maxBulkLen. A header past it drops its connection as a
// bad reply does.
type bulkAllowance struct{ declared atomic.Int64 }

// take reserves n bytes, or reports that they do not fit.
func (a *bulkAllowance) take(n int64) bool {
	if a.declared.Add(n) > maxBulkLen {
		a.declared.Add(-n)
		return false
	}
	return true
}

// errBadReply is in the chain of the error of every call whose connection
// was dropped because the node sent a reply that is malformed or exceeds
// the limits above.
var errBadReply = errors.New("malformed or oversized reply")

// respConn checks the replies a node sends, as they are read, before
// redigo parses them: a Read that would hand redigo a header out of bounds
// returns an error instead, and so does every Read after it. Bytes before
// the bad header are returned first, so replies that came before it still
// reach their callers.
type respConn struct {
	net.Conn
	s   respScanner
	err error
}

// Close closes the connection and gives back what the bulk string being
// read holds of its node's allowance.
func (c *respConn) Close() error {
	c.s.giveBack()
	return c.Conn.Close()
}

func (c *respConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		good, bad := c.s.scan(p[:n])
		if bad != nil {
			c.err = bad
			if good == 0 {
				return 0, bad
			}
			return good, nil
		}
	}
	return n, err
}

// respScanner follows the RESP2 framing that redigo reads (simple strings,
// errors, integers, bulk strings, arrays) one byte range at a time, without
// allocating. It only checks what redigo would otherwise trust: declared
// lengths, nesting and line lengths. Other malformations are left for
// redigo to report.
type respScanner struct {
	state   uint8
	kind    byte  // the type byte of the line being read
	neg     bool  // the header's value starts with '-'
	digits  int   // digits in the header's value
	val     int64 // the header's value so far
	lineLen int   // bytes of the current line so far
	bulk    int64 // bytes of bulk data (and its CRLF) still to skip
	// The remaining element counts of the arrays being read, innermost
	// last, and their sum.
	stack   [maxDepth]int64
	depth   int
	pending int64
	// The node's allowance for large bulk strings (nil: none), and what
	// the bulk string being read holds of it (read by Close too).
	allowance *bulkAllowance
	held      atomic.Int64
}

// giveBack returns what the scanner holds of its node's allowance. It
// runs at the end of every bulk string: a load, and a swap only for the
// rare one that holds a share.
func (s *respScanner) giveBack() {
	if s.held.Load() == 0 {
		return
	}
	if n := s.held.Swap(0); n > 0 {
		s.allowance.declared.Add(-n)
	}
}

const (
	stLineStart = iota // expecting a type byte
	stLine             // inside a line, up to its '\n'
	stBulk             // skipping bulk data
)

// scan consumes b. It returns how many bytes of b come before the line
// that breaks a limit, and the error; or len(b) and nil.
func (s *respScanner) scan(b []byte) (int, error) {
	lineStart := 0 // where in b the current line began (0 if before b)
	for i := 0; i < len(b); {
		switch s.state {
		case stBulk:
			i = s.skipBulk(b, i)
		case stLineStart:
			lineStart = i
			if err := s.startLine(b[i]); err != nil {
				return lineStart, err
			}
			i++
		case stLine:
			c := b[i]
			i++
			if s.lineLen++; s.lineLen > maxLineLen {
				return lineStart, fmt.Errorf("%w: a line longer than %d bytes", errBadReply, maxLineLen)
			}
			if c == '\n' {
				if err := s.endLine(); err != nil {
					return lineStart, err
				}
				continue
			}
			if s.kind != '$' && s.kind != '*' || c == '\r' {
				continue
			}
			if err := s.headerByte(c); err != nil {
				return lineStart, err
			}
		}
	}
	return len(b), nil
}

// skipBulk skips the bulk data that starts at b[i] and returns where it
// ends in b, or len(b) when it goes on past b.
func (s *respScanner) skipBulk(b []byte, i int) int {
	if left := int64(len(b) - i); left < s.bulk {
		s.bulk -= left
		return len(b)
	}
	i += int(s.bulk)
	s.bulk = 0
	s.giveBack()
	// The CRLF after the data was skipped with it; redigo checks it.
	s.complete()
	s.state = stLineStart
	return i
}

// startLine begins a line with its type byte c.
func (s *respScanner) startLine(c byte) error {
	switch c {
	case '+', '-', ':', '$', '*':
	default:
		return fmt.Errorf("%w: unexpected type byte %q", errBadReply, c)
	}
	s.kind = c
	s.neg, s.digits, s.val, s.lineLen = false, 0, 0, 0
	s.state = stLine
	return nil
}

// headerByte reads c, a byte of the value of a '$' or '*' header.
func (s *respScanner) headerByte(c byte) error {
	switch {
	case c == '-' && s.digits == 0 && !s.neg:
		s.neg = true
	case c >= '0' && c <= '9':
		s.digits++
		if s.val = s.val*10 + int64(c-'0'); s.val > s.limit() {
			return s.tooLong()
		}
	default:
		return fmt.Errorf("%w: bad length in a %q header", errBadReply, s.kind)
	}
	return nil
}

// endLine acts on a complete line.
func (s *respScanner) endLine() error {
	s.state = stLineStart
	if s.kind != '$' && s.kind != '*' {
		s.complete()
		return nil
	}
	switch {
	case s.neg && s.digits == 1 && s.val == 1: // $-1, *-1: nil
		s.complete()
		return nil
	case s.neg || s.digits == 0:
		return fmt.Errorf("%w: bad length in a %q header", errBadReply, s.kind)
	case s.kind == '$':
		if s.val > largeBulk && s.allowance != nil {
			if !s.allowance.take(s.val) {
				return fmt.Errorf("%w: bulk strings of more than %d bytes declared at once on the node's connections", errBadReply, maxBulkLen)
			}
			s.held.Store(s.val)
		}
		s.bulk = s.val + 2
		s.state = stBulk
		return nil
	}
	if s.val == 0 {
		s.complete()
		return nil
	}
	if s.pending+s.val > maxPendingElems {
		return s.tooLong()
	}
	if s.depth == maxDepth {
		return fmt.Errorf("%w: arrays nested more than %d deep", errBadReply, maxDepth)
	}
	s.stack[s.depth] = s.val
	s.depth++
	s.pending += s.val
	return nil
}

// complete records that one element ended, and with it every array whose
// last element it was.
func (s *respScanner) complete() {
	for s.depth > 0 {
		s.pending--
		if s.stack[s.depth-1]--; s.stack[s.depth-1] > 0 {
			return
		}
		s.depth--
	}
}

// limit returns the largest value the header being read may declare.
func (s *respScanner) limit() int64 {
	if s.kind == '$' {
		return maxBulkLen
	}
	return maxPendingElems
}

func (s *respScanner) tooLong() error {
	if s.kind == '$' {
		return fmt.Errorf("%w: bulk string of %d bytes or more (limit %d)", errBadReply, s.val, maxBulkLen)
	}
	return fmt.Errorf("%w: array of %d elements or more (limit %d pending)", errBadReply, s.val, maxPendingElems)
}
