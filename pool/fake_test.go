package pool_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeNode is a TCP server on 127.0.0.1 that plays a broken or hostile
// Redis node: each connection it accepts is handed to a function of the
// test, with its number (0 for the first).
type fakeNode struct {
	addr     string
	accepted atomic.Int64 // connections accepted
	dropped  atomic.Int64 // connections the client closed or reset
}

// fakeConn is one connection to a fakeNode.
type fakeConn struct {
	net.Conn
	r *bufio.Reader
}

// readCommand reads one command the client sent, as its arguments. It
// fails (io.EOF and the like) when the client closed the connection.
func (c *fakeConn) readCommand() ([]string, error) {
	line, err := c.readLine()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		if line, err = c.readLine(); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(line, "$"))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func (c *fakeConn) readLine() (string, error) {
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\r\n"), err
}

// answerAll answers every command on c with reply (raw RESP) until the
// client closes the connection.
func (c *fakeConn) answerAll(reply func(args []string) string) {
	for {
		args, err := c.readCommand()
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, reply(args)); err != nil {
			return
		}
	}
}

// pong answers like a healthy node would to what these tests send.
func pong(args []string) string {
	if strings.EqualFold(args[0], "ECHO") && len(args) == 2 {
		return fmt.Sprintf("$%d\r\n%s\r\n", len(args[1]), args[1])
	}
	return "+PONG\r\n"
}

// startFake starts a fakeNode that runs serve for each connection. When
// serve returns, the connection is read until the client closes it (which
// counts it as dropped), then closed. Everything stops when the test ends.
func startFake(t *testing.T, serve func(i int, c *fakeConn)) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeNode{addr: ln.Addr().String()}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  bool
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(f.accepted.Add(1)) - 1
			mu.Lock()
			if done {
				nc.Close()
			}
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				c := &fakeConn{Conn: nc, r: bufio.NewReader(nc)}
				serve(i, c)
				_, _ = io.Copy(io.Discard, c.r)
				mu.Lock()
				if !done {
					f.dropped.Add(1) // the client closed (or reset) it
				}
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		done = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return f
}
