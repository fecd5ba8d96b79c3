package goredis_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/goredis"
)

// hostileNode is a fake node: it answers HELLO with an error (so that
// the client speaks RESP2), CLIENT, SELECT and AUTH with +OK, and every
// other command (PING, SUBSCRIBE, ...) with reply, raw RESP.
func hostileNode(t *testing.T, reply string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil || len(line) < 2 {
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
					var args []string
					for range n {
						l, err := r.ReadString('\n')
						if err != nil || len(l) < 2 {
							return
						}
						sz, _ := strconv.Atoi(strings.TrimSpace(l[1:]))
						b := make([]byte, sz+2)
						if _, err := io.ReadFull(r, b); err != nil {
							return
						}
						args = append(args, string(b[:sz]))
					}
					out := reply
					switch strings.ToUpper(args[0]) {
					case "HELLO":
						out = "-ERR unknown command 'HELLO'\r\n"
					case "CLIENT", "SELECT", "AUTH":
						out = "+OK\r\n"
					}
					if _, err := c.Write([]byte(out)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A node that answers the publish/subscribe connection's PING with a
// malformed array (an empty one, or one whose kind is not a string) ends
// the connection with an error naming the node. go-redis reads such a
// reply by indexing and asserting without checks: it panicked in the
// adapter's reader goroutine, and took the process down with it.
func TestDialPubSub_aMalformedReplyEndsTheConnectionWithoutACrash(t *testing.T) {
	for _, reply := range []string{":1\r\n", "*0\r\n", "*1\r\n:1\r\n", "*1\r\n$9\r\nsubscribe\r\n"} {
		t.Run(fmt.Sprintf("%q", reply), func(t *testing.T) {
			addr := hostileNode(t, reply)
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			defer c.Close()
			p := goredis.New(c)
			defer p.(io.Closer).Close()
			evs := make(chan pool.PubSubEvent, 16)
			conn, err := p.(pool.Subscriber).DialPubSub(ctxT(t, time.Second), func(ev pool.PubSubEvent) { evs <- ev })
			var ne *pool.NodeError
			if err != nil {
				require.ErrorAs(t, err, &ne)
				return
			}
			defer conn.Close()
			_ = conn.Subscribe("ch")
			for {
				select {
				case ev := <-evs:
					if ev.Kind != pool.PubSubClosed {
						continue
					}
					require.ErrorAs(t, ev.Err, &ne, "the connection ends with the node's error")
					require.Equal(t, addr, ne.Addr)
					return
				case <-time.After(3 * time.Second):
					t.Fatalf("the malformed reply %q did not end the connection", reply)
				}
			}
		})
	}
}
