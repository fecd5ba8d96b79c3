package pool

import (
	"strings"
	"testing"
)

// validStream is RESP2 as Redis sends it: every reply kind, nil replies,
// nested arrays, and bulk data that holds CR, LF and type bytes.
const validStream = "+OK\r\n" +
	"-ERR wrong number of arguments\r\n" +
	":-42\r\n" +
	":1234567890123\r\n" +
	"$-1\r\n" +
	"*-1\r\n" +
	"$0\r\n\r\n" +
	"*0\r\n" +
	"$12\r\n$3\r\n*1\r\n:1\r\n\r\n" +
	"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$4\r\ndata\r\n" +
	"*2\r\n*2\r\n:1\r\n$-1\r\n*1\r\n*1\r\n+PONG\r\n" +
	"+PONG\r\n"

// Valid replies pass, however the reads split them.
func TestRespScanner_passesValidRepliesSplitAnywhere(t *testing.T) {
	for size := 1; size <= len(validStream); size++ {
		var s respScanner
		for i := 0; i < len(validStream); i += size {
			chunk := []byte(validStream[i:min(i+size, len(validStream))])
			if n, err := s.scan(chunk); err != nil || n != len(chunk) {
				t.Fatalf("reads of %d bytes, at %d: scan = %d, %v", size, i, n, err)
			}
		}
		if s.state != stLineStart || s.depth != 0 || s.pending != 0 {
			t.Fatalf("reads of %d bytes: not between replies at the end: state %d, depth %d, pending %d", size, s.state, s.depth, s.pending)
		}
	}
}

// A bad header is reported at the start of its line, after the replies
// before it.
func TestRespScanner_stopsAtTheLineThatBreaksALimit(t *testing.T) {
	nested := strings.Repeat("*1\r\n", maxDepth)
	for _, tc := range []struct{ name, good, bad string }{
		{"bulk over the limit", "", "$67108865\r\n"},
		{"array over the limit", "", "*1048577\r\n"},
		{"arrays over the limit between them", "*1048575\r\n", "*2\r\n"},
		{"nested too deep", nested, "*1\r\n"},
		{"unknown type", "", "%1\r\n"},
		{"negative length", "", "$-2\r\n"},
		{"no digits", "", "*\r\n"},
		{"line too long", "", "+" + strings.Repeat("x", maxLineLen+1) + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s respScanner
			n, err := s.scan([]byte(validStream + tc.good + tc.bad))
			if err == nil {
				t.Fatal("no error")
			}
			if want := len(validStream + tc.good); n != want {
				t.Fatalf("scan = %d, want %d (the start of the bad line)", n, want)
			}
		})
	}

	// The limits themselves pass.
	for _, ok := range []string{"$67108864\r\n", "*1048576\r\n", nested} {
		var s respScanner
		if _, err := s.scan([]byte(ok)); err != nil {
			t.Fatalf("%.20q: %v", ok, err)
		}
	}
}

// Bulk strings over largeBulk draw on their node's allowance, shared by
// the scanners of all its connections: once they add up to maxBulkLen, a
// header that would pass it is a bad reply, until a bulk string is read
// through or its connection closes. Each connection's own limit let a
// node with 64 connections make the client allocate 64 times maxBulkLen.
func TestRespScanner_largeBulkStringsShareTheirNodesAllowance(t *testing.T) {
	var a bulkAllowance
	var first, second, third respScanner
	first.allowance, second.allowance, third.allowance = &a, &a, &a
	if _, err := first.scan([]byte("$67108864\r\n")); err != nil {
		t.Fatalf("the allowance itself: %v", err)
	}
	if n, err := second.scan([]byte("+OK\r\n$2097152\r\n")); err == nil || n != len("+OK\r\n") {
		t.Fatalf("a second large bulk while the first is held: scan = %d, %v", n, err)
	}
	if _, err := third.scan([]byte("$1048576\r\n")); err != nil {
		t.Fatalf("a bulk of largeBulk bytes draws on no allowance: %v", err)
	}
	// The first is read through: its share comes back.
	chunk := []byte(strings.Repeat("x", 1<<20))
	for range 64 {
		first.scan(chunk)
	}
	first.scan([]byte("\r\n"))
	var fourth respScanner
	fourth.allowance = &a
	if _, err := fourth.scan([]byte("$33554432\r\n")); err != nil {
		t.Fatalf("after the first was read: %v", err)
	}
	// A connection that closes mid-bulk gives its share back.
	fourth.giveBack()
	if got := a.declared.Load(); got != 0 {
		t.Fatalf("allowance in use after every bulk ended: %d", got)
	}
}
