package pool_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// A command whose caller's context ends while the node is being dialled
// is reported as never sent (Op "dial") only when it was not written; one
// that the writer took on the connection just opened may have reached the
// node, and must say so (Op the command): a lock client owes a release to
// a node whose acquisition may have landed. The node here accepts and
// never reads, so the write of a large command on the new connection is
// still under way when the caller's deadline passes.
func TestNode_Do_aCommandWrittenOnAConnectionJustDialledIsNotReportedAsNeverSent(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	f := startFake(t, func(_ int, _ *fakeConn) { <-stop })
	t.Cleanup(func() { close(stop) }) // before the fake's own cleanup
	n := newNode(t, f.addr, pool.WithIOTimeout(time.Second))

	big := strings.Repeat("x", 64<<20) // far more than the socket buffers hold
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	_, err := n.Do(ctx, "SET", "k", big)
	ne := requireTimeout(t, err, f.addr)
	require.Equal(t, "SET", ne.Op, "the command was being written when the caller left: %v", err)
}
