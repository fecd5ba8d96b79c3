package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMarker_everyForm(t *testing.T) {
	const id, replid = "9f0c3a", "e4b2d1"
	for _, c := range []struct {
		v    string
		want Marker
	}{
		{id + " " + replid, Marker{RunID: id, Lineage: replid}},
		{id, Marker{RunID: id}},
		{"~ " + id + " " + replid + " 17", Marker{RunID: id, Lineage: replid, Pending: "~", Seen: 17}},
		{"? " + id + " " + replid + " 0", Marker{RunID: id, Lineage: replid, Pending: "?", Seen: 0}},
		{"ABCdef0 12", Marker{RunID: "ABCdef0", Lineage: "12"}}, // %x matches either case
	} {
		got := ParseMarker(c.v)
		require.Equal(t, c.want, got, "%q", c.v)
		require.True(t, got.Valid(), "%q", c.v)
		require.Equal(t, c.v, got.String(), "%q: read back as written", c.v)
	}
	require.Equal(t, MarkerOf(id, replid), ParseMarker(MarkerOf(id, replid)).String())
}

// A later version may add fields after those a form has: every version
// reads the fields it knows and ignores the rest, so that a marker of a
// newer form is never taken for another process's.
func TestParseMarker_fieldsALaterVersionAddsAreIgnored(t *testing.T) {
	const id, replid = "9f0c3a", "e4b2d1"
	for v, want := range map[string]Marker{
		id + " " + replid + " 5":               {RunID: id, Lineage: replid},
		id + " " + replid + " v4 extra":        {RunID: id, Lineage: replid},
		id + " later":                          {RunID: id},
		"  " + id + "  " + replid + " ":        {RunID: id, Lineage: replid},
		"~ " + id + " " + replid + " 17 extra": {RunID: id, Lineage: replid, Pending: "~", Seen: 17},
	} {
		require.Equal(t, want, ParseMarker(v), "%q", v)
	}
}

func TestParseMarker_malformedValuesAreNoMarker(t *testing.T) {
	for _, v := range []string{
		"",
		" ",
		"run-id",                               // not hexadecimal
		"v4 9f0c3a e4b2d1",                     // a form this version does not know
		"~ 9f0c3a e4b2d1",                      // no uptime
		"~ 9f0c3a 17",                          // no lineage
		"~9f0c3a e4b2d1 17",                    // no space after the kind
		"! 9f0c3a e4b2d1 17",                   // an unknown kind
		"~ 9f0c3a e4b2d1 -1",                   // a negative uptime
		"? 9f0c3a e4b2d1 1.5",                  // not a whole number
		"? 9f0c3a e4b2d1 +3",                   // a sign
		"? 9f0c3a e4b2d1 99999999999999999999", // out of range
		"~ ~ 9f0c3a e4b2d1",
	} {
		m := ParseMarker(v)
		require.Equal(t, Marker{}, m, "%q", v)
		require.False(t, m.Valid(), "%q", v)
		require.Empty(t, m.String(), "%q", v)
		require.False(t, m.Marks("9f0c3a", "e4b2d1", true), "%q", v)
	}
}

func TestMarker_marksItsProcessAndLineage(t *testing.T) {
	const id, replid = "9f0c3a", "e4b2d1"
	require.True(t, ParseMarker(MarkerOf(id, replid)).Marks(id, replid, false))
	require.True(t, ParseMarker(id).Marks(id, replid, true), "a marker of the run id alone counts a process that was never a replica")
	require.False(t, ParseMarker(id).Marks(id, replid, false), "but not one promoted since: the lineage may be another")
	require.True(t, ParseMarker(MarkerOf(id, UnknownLineage)).Marks(id, replid, true), "written by a Client without INFO replication")
	require.False(t, ParseMarker(MarkerOf(id, UnknownLineage)).Marks(id, replid, false))
	require.True(t, ParseMarker(MarkerOf(id, replid)).Marks(id, UnknownLineage, false), "read by a Client without INFO replication")
	require.False(t, ParseMarker(MarkerOf(id, "aaaa")).Marks(id, replid, true), "another lineage")
	require.False(t, ParseMarker(MarkerOf("bbbb", replid)).Marks(id, replid, true), "another process")
	require.False(t, ParseMarker("bbbb").Marks(id, replid, true), "another process's older marker")
	require.False(t, ParseMarker("~ "+id+" "+replid+" 3").Marks(id, replid, true), "a record is no mark")
	require.False(t, ParseMarker("? "+id+" "+replid+" 3").Marks(id, replid, true), "a record is no mark")
}

func TestBorn_listsShardsByProcessAndLineage(t *testing.T) {
	born := BornOf([]string{"aa", "bb"}, []string{"11", UnknownLineage})
	require.Equal(t, "aa:11 bb:0", born)
	require.Equal(t, born, BornOf([]string{"aa", "", "bb"}, []string{"11", "", UnknownLineage}), "a shard that did not answer is left out")
	require.True(t, BornHas(born, "aa", "11", false))
	require.False(t, BornHas(born, "aa", "22", true), "another lineage")
	require.False(t, BornHas(born, "cc", "11", true), "another process")
	require.True(t, BornHas(born, "bb", "22", true), "listed by a Client without INFO replication")
	require.False(t, BornHas(born, "bb", "22", false))
	require.True(t, BornHas(born, "aa", UnknownLineage, false), "asked by a Client without INFO replication")
	require.False(t, BornHas("", "aa", "11", true))
}

// node.lua writes and reads the forms that ParseMarker reads.
func TestParseMarker_theFormsOfNodeLua(t *testing.T) {
	for _, s := range []string{
		`local self = id .. " " .. replid`,
		`redis.call("SET", marker, id)`,
		`redis.call("SET", markKey, self)`,
		`redis.call("SET", seenKey, kind .. " " .. self .. " " .. up)`,
		`for w in string.gmatch(v or "", "%S+") do`,
		`local id = string.match(info, "run_id:(%x+)")`,
		`local replid = string.match(repl, "master_replid:(%x+)")`,
	} {
		require.Contains(t, nodeSource, s)
	}
}
