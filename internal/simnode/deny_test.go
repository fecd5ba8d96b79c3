//go:build go1.25

package simnode_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
)

// A client denied INFO replication (an ACL without +info|replication)
// gets NOPERM for it, also from a script's redis.pcall, where the restart
// check reads the lineage as unknown; other clients are not affected.
func TestDeny_refusesInfoReplicationToOneClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns := newNodes(1)
		defer ns[0].Close()
		ns[0].Deny("restricted", "info|replication")
		ctx := context.Background()
		lineage := map[string]string{}
		for _, client := range []string{"restricted", "full"} {
			p := pools(t, ns, client)[0]
			_, err := p.Do(ctx, "INFO", "replication")
			if client == "restricted" {
				require.ErrorContains(t, err, "NOPERM")
			} else {
				require.NoError(t, err)
			}
			reply, err := p.Eval(ctx, wire.NodeCheck, wire.NodeCheckArgs("", "", "")...)
			require.NoError(t, err)
			f, err := wire.ParseNodeCheck(reply)
			require.NoError(t, err)
			lineage[client] = f.Lineage
		}
		require.Equal(t, wire.UnknownLineage, lineage["restricted"])
		require.NotEqual(t, wire.UnknownLineage, lineage["full"])
	})
}
