package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
)

// One case per row of docs/operations.md, "What restart safety
// excludes": the facts a check finds in that event, and what restart
// safety does. The rows where the answer comes from node.lua (it reports
// the node marked) are checked on real nodes too: tests/, pool/goredis/.
func TestVerdictOf_eachEventOfTheDocsTable(t *testing.T) {
	const id, lin, other = "aa11", "bb22", "cc33"
	const minute = time.Minute
	at := time.Unix(1000, 0)
	facts := func(up time.Duration, marker string, copied bool) nodeFacts {
		return nodeFacts{runID: id, lineage: lin, uptime: up, marker: marker, copied: copied, at: at}
	}
	node := func(f nodeFacts) checked {
		return checked{f: f, shared: minute, longest: minute, node: true}
	}
	prev := func(c checked, runID, lineage string) checked {
		c.prev.runID, c.prev.lineage = runID, lineage
		return c
	}
	with := func(c checked, change func(*checked)) checked { change(&c); return c }
	for _, row := range []struct {
		event string
		in    checked
		wait  time.Duration // 0: counted now
		mark  bool
		reset bool
	}{
		{"a new deployment, Clients starting together", with(node(facts(time.Second, "", false)), func(c *checked) { c.fresh = true }), 0, true, false},
		{"a new cluster deployment: a shard listed when it was new", checked{f: facts(time.Second, "", false), shared: minute, longest: minute, listed: true, shard: 6093}, 0, true, false},
		{"a new cluster deployment: a shard not listed, restarted since", checked{f: facts(time.Second, "", false), shared: minute, longest: minute, shard: 6093}, 59 * time.Second, false, false},
		{"Clients with and without INFO replication: node.lua reports the mark", node(facts(time.Second, id, false)), 0, false, false},
		{"a rolling upgrade: node.lua reports the mark of any earlier form", node(facts(time.Second, id, false)), 0, false, false},
		{"different WithRestartSafety: a mark by Clients of a shorter bound, after a restart", prev(with(node(facts(70*time.Second, id, false)), func(c *checked) { c.longest = 5 * minute }), "dd44", lin), 230 * time.Second, false, true},
		{"different WithRestartSafety: a mark, same process", prev(with(node(facts(70*time.Second, id, false)), func(c *checked) { c.longest = 5 * minute }), id, lin), 0, false, false},
		{"WithDurableNodes beside Clients without it: a marker that survived", with(node(facts(time.Second, "~", true)), func(c *checked) { c.durable = true }), 0, true, false},
		{"WithDurableNodes: another durable Client's mark for kept data, after a restart", prev(with(node(nodeFacts{runID: id, lineage: lin, uptime: time.Second, marker: id, kept: true, at: at}), func(c *checked) { c.durable, c.longest = true, 5*minute }), "dd44", lin), 0, false, false},
		{"WithDurableNodes: a mark by a Client of a shorter bound that waited out an empty restart", prev(with(node(facts(70*time.Second, id, false)), func(c *checked) { c.durable, c.longest = true, 5*minute }), "dd44", lin), 230 * time.Second, false, false},
		{"CLIENT KILL, a pool that reconnects: the same process", prev(node(facts(time.Hour, id, false)), id, lin), 0, false, false},
		{"a slot moved between shards: the shard's own mark", checked{f: facts(time.Second, id, false), shared: minute, longest: minute, shard: 12}, 0, false, false},
		{"a restart without data", prev(node(facts(2*time.Second, "", false)), "dd44", lin), 58 * time.Second, false, true},
		{"a restart from a snapshot", node(facts(3*time.Second, "~", true)), 57 * time.Second, false, true},
		{"a restart from a snapshot, durable declared but no marker survived", with(node(facts(3*time.Second, "", false)), func(c *checked) { c.durable = true }), 57 * time.Second, false, false},
		{"a replica promoted", node(facts(4*time.Second, "~", true)), 56 * time.Second, false, true},
		{"a shard that failed over", checked{f: facts(4*time.Second, "", true), shared: minute, longest: minute, shard: 99}, 56 * time.Second, false, false},
		{"a marker of a later form, a young node", node(facts(10*time.Second, wire.UnknownMarker, false)), 50 * time.Second, false, false},
		{"a marker of a later form, up for the maximum TTL", node(facts(minute, wire.UnknownMarker, false)), 0, true, false},
		{"no marker, up for the maximum TTL", node(facts(minute, "", false)), 0, true, false},
		{"another lineage of the same process (a promotion): node.lua reports a sighting", prev(node(facts(0, "~", true)), id, other), minute, false, true},
	} {
		v := verdictOf(row.in)
		require.Equal(t, row.wait, v.wait, "%s: wait", row.event)
		require.Equal(t, row.mark, v.mark, "%s: mark", row.event)
		require.Equal(t, row.reset, v.reset, "%s: reset", row.event)
		require.Equal(t, row.wait > 0, v.why != "", "%s: why %q", row.event, v.why)
	}
}
