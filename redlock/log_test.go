package redlock

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithLogger_warnsOncePerNodeAndCause(t *testing.T) {
	var buf bytes.Buffer
	c, _, _ := newFakeClient(t, 3, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	denied := errors.New("NOPERM: the user may not run ZADD")
	for range 3 {
		c.warnNode("node1:6379", "node refused an acquisition", denied)
	}
	c.warnNode("node2:6379", "node refused an acquisition", denied)
	c.warnNode("node1:6379", "node refused an acquisition", errors.New("READONLY"))
	out := buf.String()
	require.Equal(t, 3, strings.Count(out, "level=WARN"), out)
	require.Equal(t, 2, strings.Count(out, "node=node1:6379"), out)
	require.Contains(t, out, "ZADD")
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
