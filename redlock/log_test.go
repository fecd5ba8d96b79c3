package redlock

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

func TestWithLogger_warnsOncePerNodeAndCause(t *testing.T) {
	var buf bytes.Buffer
	c, _, _ := newFakeClient(t, 3, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	reply := func(s string) error { return &pool.NodeError{Addr: "n", Op: "EVALSHA", Err: pool.ReplyError(s)} }
	denied := reply("NOPERM: the user may not run ZADD")
	for range 3 {
		c.warnNode("node1:6379", "node refused an acquisition", denied)
	}
	c.warnNode("node2:6379", "node refused an acquisition", denied)
	c.warnNode("node1:6379", "node refused an acquisition", reply("READONLY"))
	// A transport error names ports that change: one record a minute per
	// node, whatever its text.
	for port := range 3 {
		c.warnNode("node1:6379", "node failed", fmt.Errorf("read tcp 127.0.0.1:%d->node1:6379: i/o timeout", 40000+port))
	}
	out := buf.String()
	require.Equal(t, 4, strings.Count(out, "level=WARN"), out)
	require.Equal(t, 3, strings.Count(out, "node=node1:6379"), out)
	require.Contains(t, out, "ZADD")
	require.Equal(t, 1, strings.Count(out, "i/o timeout"), out)
}

// syncBuffer is a bytes.Buffer that background loggers may write to while
// a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
