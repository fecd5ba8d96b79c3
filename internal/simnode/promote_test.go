//go:build go1.25

package simnode_test

import (
	"context"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/simnode"
)

// infoField returns field's value in the node's INFO section.
func infoField(t *testing.T, n *simnode.Node, section, field string) string {
	t.Helper()
	v, err := n.Do("INFO", section)
	require.NoError(t, err)
	m := regexp.MustCompile(field + `:(\w+)`).FindStringSubmatch(v.(string))
	require.NotNil(t, m, "%s in %q", field, v)
	return m[1]
}

func TestNode_aPromotedReplicaHasANewLineageALongUptimeAndTheReplicasData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnode.New("sim1:6379")
		defer n.Close()
		_, err := n.Do("SET", "old", "1")
		require.NoError(t, err)
		runID, replid := infoField(t, n, "server", "run_id"), infoField(t, n, "replication", "master_replid")
		r := n.Replica()
		_, err = n.Do("SET", "new", "1") // after the copy: the replica lags
		require.NoError(t, err)
		conn, err := n.Dial(context.Background(), "c1")
		require.NoError(t, err)
		defer conn.Close()
		time.Sleep(2 * time.Second)

		n.Promote(r)
		require.NotEqual(t, runID, infoField(t, n, "server", "run_id"))
		require.NotEqual(t, replid, infoField(t, n, "replication", "master_replid"))
		require.Equal(t, replid, infoField(t, n, "replication", "master_replid2"))
		require.Equal(t, "3600", infoField(t, n, "server", "uptime_in_seconds"))
		require.Equal(t, []string{"old"}, n.Keys())
		_, err = conn.Read(make([]byte, 1))
		require.Error(t, err, "a connection to the old process closes")
	})
}

// A master restarted with its data (from its files) takes a new
// replication id and no second one, as Redis 7.0 and Valkey 8 do (both
// checked: master_replid2 stays all zeros after SHUTDOWN SAVE and a
// restart, or a restart from an append-only file).
func TestNode_aRestartWithDataTakesANewLineageAndNoSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnode.New("sim1:6379")
		defer n.Close()
		zeros := "0000000000000000000000000000000000000000"
		require.Equal(t, zeros, infoField(t, n, "replication", "master_replid2"))
		first := infoField(t, n, "replication", "master_replid")
		n.Save()
		for _, d := range []simnode.Data{simnode.Kept, simnode.Saved, simnode.Empty} {
			n.Restart(d)
			require.Equal(t, zeros, infoField(t, n, "replication", "master_replid2"), "%v", d)
			require.NotEqual(t, first, infoField(t, n, "replication", "master_replid"), "%v", d)
		}
	})
}
