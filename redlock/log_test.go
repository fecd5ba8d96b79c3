package redlock

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
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
