package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readCommand reads one RESP command (an array of bulk strings).
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, n)
	for range n {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:size]))
	}
	return args, nil
}

// subscriberNode is a fake node for pub/sub connections: answer is called
// with each SUBSCRIBE's channels and may write to the connection; it
// returns false to close it. Other commands get an error and the
// connection is closed, as a node that is not usable for locking.
func subscriberNode(t *testing.T, subs *atomic.Int32, answer func(c net.Conn, chans []string) bool) *fakeServer {
	return startFakeServer(t, func(c net.Conn) {
		defer c.Close()
		r := bufio.NewReader(c)
		counted := false
		for {
			cmd, err := readCommand(r)
			if err != nil {
				return
			}
			switch strings.ToUpper(cmd[0]) {
			case "SUBSCRIBE":
				if !counted {
					counted = true
					subs.Add(1)
				}
				if !answer(c, cmd[1:]) {
					return
				}
			case "PING":
				_, _ = c.Write([]byte("*2\r\n$4\r\npong\r\n$0\r\n\r\n"))
			case "UNSUBSCRIBE":
			default:
				_, _ = c.Write([]byte("-ERR this node only subscribes\r\n"))
				return
			}
		}
	})
}

// waitOn makes a Lock wait for a key held on four real nodes, with the
// fake node fake as the fifth, and returns once it waits.
func waitOn(t *testing.T, fake *fakeServer) {
	e := newEnv(t, 4)
	key := newKey(t)
	holdForeign(t, e.nodes, key, 0, 1, 2, 3)
	waiter := newClient(t, newPools(t, append(e.addrs, fake.Addr())), noRefresh)
	got := lockAsync(ctxT(t, time.Minute), waiter, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)
	t.Cleanup(func() {
		select {
		case r := <-got:
			t.Errorf("Lock returned while the key was held: %v", r.err)
		default:
		}
	})
}

// A node that acknowledges SUBSCRIBE and then closes the connection is
// dialled again after the back-off, not in a loop.
func TestLock_aNodeThatAcknowledgesSubscribeAndClosesIsNotDialledInALoop(t *testing.T) {
	t.Parallel()
	var subs atomic.Int32
	fake := subscriberNode(t, &subs, func(c net.Conn, chans []string) bool {
		for i, ch := range chans {
			_, _ = fmt.Fprintf(c, "*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, i+1)
		}
		return false
	})
	waitOn(t, fake)
	before := subs.Load()
	time.Sleep(2 * time.Second) // about 8 dials with the back-off
	dials := subs.Load() - before
	require.Positive(t, dials, "the node is dialled again")
	require.LessOrEqual(t, dials, int32(20), "dialled in a loop")
}

// A node that answers PING but never acknowledges SUBSCRIBE is dropped
// and dialled again, instead of piling up unacknowledged subscriptions
// on a connection that keeps answering.
func TestLock_aNodeThatNeverAcknowledgesSubscribeIsDialledAgain(t *testing.T) {
	t.Parallel()
	var subs atomic.Int32
	fake := subscriberNode(t, &subs, func(net.Conn, []string) bool { return true })
	waitOn(t, fake)
	require.Eventually(t, func() bool { return subs.Load() >= 2 }, 10*time.Second, 10*time.Millisecond,
		"a connection that left SUBSCRIBE unanswered for long was kept")
}
