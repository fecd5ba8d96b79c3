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

func TestParseMarker_malformedValuesAreNoMarker(t *testing.T) {
	for _, v := range []string{
		"",
		" ",
		"run-id",                               // not hexadecimal
		"9f0c3a e4b2d1 5",                      // three fields and no kind
		"9f0c3a  e4b2d1",                       // two spaces
		" 9f0c3a e4b2d1",                       // a leading space
		"9f0c3a e4b2d1 ",                       // a trailing space
		"9f0c3a\te4b2d1",                       // a tab
		"9f0c3a e4b2d1\n",                      // a newline
		"~ 9f0c3a e4b2d1",                      // no uptime
		"~ 9f0c3a 17",                          // no lineage
		"~9f0c3a e4b2d1 17",                    // no space after the kind
		"! 9f0c3a e4b2d1 17",                   // an unknown kind
		"~ 9f0c3a e4b2d1 -1",                   // a negative uptime
		"? 9f0c3a e4b2d1 1.5",                  // not a whole number
		"? 9f0c3a e4b2d1 +3",                   // a sign
		"~ 9f0c3a e4b2d1 17 extra",             // a fifth field
		"? 9f0c3a e4b2d1 99999999999999999999", // out of range
		"~ ~ 9f0c3a e4b2d1",
	} {
		m := ParseMarker(v)
		require.Equal(t, Marker{}, m, "%q", v)
		require.False(t, m.Valid(), "%q", v)
		require.Empty(t, m.String(), "%q", v)
		require.False(t, m.Marks("9f0c3a", "e4b2d1"), "%q", v)
	}
}

func TestMarker_marksItsProcessAndLineage(t *testing.T) {
	const id, replid = "9f0c3a", "e4b2d1"
	require.True(t, ParseMarker(MarkerOf(id, replid)).Marks(id, replid))
	require.True(t, ParseMarker(id).Marks(id, replid), "an older marker counts its run id on any lineage")
	require.False(t, ParseMarker(MarkerOf(id, "aaaa")).Marks(id, replid), "another lineage")
	require.False(t, ParseMarker(MarkerOf("bbbb", replid)).Marks(id, replid), "another process")
	require.False(t, ParseMarker("bbbb").Marks(id, replid), "another process's older marker")
	require.False(t, ParseMarker("~ "+id+" "+replid+" 3").Marks(id, replid), "a record is no mark")
	require.False(t, ParseMarker("? "+id+" "+replid+" 3").Marks(id, replid), "a record is no mark")
}

// node.lua writes and reads the forms that ParseMarker reads.
func TestParseMarker_theFormsOfNodeLua(t *testing.T) {
	for _, s := range []string{
		`local self = id .. " " .. replid`,
		`if v == self or v == id or mark == self then`,
		`string.match(v or "", "^([~?]) " .. self .. " (%d+)$")`,
		`redis.call("SET", marker, kind .. " " .. self .. " " .. up)`,
		`local id = string.match(info, "run_id:(%x+)")`,
		`local replid = string.match(repl, "master_replid:(%x+)")`,
	} {
		require.Contains(t, nodeSource, s)
	}
}
