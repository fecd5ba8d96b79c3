package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAcquire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
		want  Acquisition
		ok    bool
	}{
		{"acquired", int64(1), Acquisition{Code: CodeAcquired}, true},
		{"acquired with a fence", []any{int64(1), []byte("7"), []byte("epoch")}, Acquisition{Code: CodeAcquired}, true},
		{"acquired with two keys' fences", []any{int64(1), []byte("7"), []byte("e"), []byte("3"), []byte("e")}, Acquisition{Code: CodeAcquired}, true},
		{"acquired with half a fence", []any{int64(1), []byte("7")}, Acquisition{}, false},
		{"held", []any{int64(0), int64(1500)}, Acquisition{Code: CodeHeld, PTTL: 1500}, true},
		{"reserved", []any{int64(2), int64(40)}, Acquisition{Code: CodeReserved, PTTL: 40}, true},
		{"held without TTL", []any{int64(0), int64(-1)}, Acquisition{Code: CodeHeld, PTTL: -1}, true},
		{"unknown code", []any{int64(9), int64(1)}, Acquisition{}, false},
		{"integer other than 1", int64(0), Acquisition{}, false},
		{"short array", []any{int64(0)}, Acquisition{}, false},
		{"not an array", "OK", Acquisition{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseAcquire(tc.reply)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestFenceAt(t *testing.T) {
	grant := []any{int64(1), []byte("7"), []byte("e1"), "3", []byte("e2")}
	for k, want := range []Fence{{7, "e1"}, {3, "e2"}} {
		f, err := FenceAt(grant, 2, k)
		require.NoError(t, err)
		require.Equal(t, want, f)
	}
	for _, bad := range []any{
		[]any{int64(1), []byte("7"), []byte("e1")},           // one key's, two asked
		[]any{int64(0), []byte("7"), []byte("e1"), "3", "e"}, // not a grant
		[]any{int64(1), []byte("x"), []byte("e1"), "3", "e"}, // not a number
		[]any{int64(1), int64(7), []byte("e1"), "3", "e"},    // not a string
		int64(1),
	} {
		_, err0 := FenceAt(bad, 2, 0)
		_, err1 := FenceAt(bad, 2, 1)
		require.True(t, err0 != nil || err1 != nil, "%v", bad)
	}
}

func TestParseDone(t *testing.T) {
	for _, tc := range []struct {
		reply any
		want  Done
	}{
		{int64(1), Done{OK: true}},
		{int64(0), Done{}},
		{[]any{int64(1), []byte("NOPERM x")}, Done{OK: true, Unannounced: "NOPERM x"}},
	} {
		d, err := ParseDone(tc.reply)
		require.NoError(t, err)
		require.Equal(t, tc.want, d)
	}
	// What no extension or release script answers: a node that did not run it.
	for _, reply := range []any{"OK", []byte("abc"), int64(7), int64(-1), []any{}, []any{[]byte("a"), []byte("b")},
		[]any{int64(0), []byte("x")}, []any{int64(1)}, nil} {
		_, err := ParseDone(reply)
		require.Error(t, err, "%#v", reply)
	}
}

func TestParseAnnouncement(t *testing.T) {
	require.Equal(t, Announcement{}, ParseAnnouncement(""))
	require.Equal(t, Announcement{To: "c.1"}, ParseAnnouncement("c.1"))
	require.Equal(t, Announcement{To: "c.1", Round: 4, Handoff: true}, ParseAnnouncement("c.1 4"))
	require.Equal(t, Announcement{To: "c.1", Handoff: true}, ParseAnnouncement("c.1 x"), "no round named")
}

func TestCalled_namesTheCommandOfEveryScriptLine(t *testing.T) {
	for _, s := range Scripts {
		found := 0
		for line := 1; line < 400; line++ {
			if _, ok := Called(s.Script.Hash(), line); ok {
				found++
			}
		}
		require.Positive(t, found, "%s: no command found", s.Name)
	}
	src := fenceReadSource + inspectSource
	line := strings.Count(src[:strings.Index(src, "return {redis.call(")], "\n") + 1
	cmd, ok := Called(Inspect.Hash(), line)
	require.True(t, ok)
	require.Equal(t, "GET", cmd, "inspect.lua's return calls GET first")
}

func TestParseLeaderRead(t *testing.T) {
	r, err := ParseLeaderRead([]any{[]byte("t1"), []byte("t1"), []byte("v"), []byte("7"), []byte("c")})
	require.NoError(t, err)
	require.Equal(t, LeaderRecord{Token: "t1", Record: "t1", Value: "v", Term: 7, Client: "c"}, r)
	require.True(t, r.Current())

	r, err = ParseLeaderRead([]any{[]byte("t2"), []byte("t1"), []byte("v"), []byte("7"), []byte("c")})
	require.NoError(t, err)
	require.False(t, r.Current(), "the record of an earlier holder")

	r, err = ParseLeaderRead([]any{nil, nil, nil, nil, nil})
	require.NoError(t, err)
	require.Equal(t, LeaderRecord{}, r)
	require.False(t, r.Current(), "no key, no record")

	for _, bad := range []any{
		[]any{nil, nil, nil, []byte("x"), nil}, // a term that is not a number
		[]any{nil, nil, nil, nil},              // short
		"OK",
	} {
		_, err := ParseLeaderRead(bad)
		require.Error(t, err, "%v", bad)
	}
}

// A fence counter above MaxFence is none the scripts compare exactly: it
// is refused, in a grant and in a write-back's refusal alike.
func TestFenceCounters_aboveMaxFenceAreRefused(t *testing.T) {
	grant := func(counter string) any {
		return []any{int64(CodeAcquired), []byte(counter), []byte("epoch")}
	}
	f, err := FenceAt(grant("9007199254740991"), 1, 0)
	require.NoError(t, err)
	require.EqualValues(t, MaxFence, f.Counter)
	for _, c := range []string{"9007199254740992", "18446744073709551615"} {
		_, err := FenceAt(grant(c), 1, 0)
		require.ErrorContains(t, err, "is above 9007199254740991", c)
		_, ok := ParseFenceRefusal([]any{int64(0), []byte(c)})
		require.False(t, ok, c)
	}
	n, ok := ParseFenceRefusal([]any{int64(0), []byte("9007199254740991")})
	require.True(t, ok)
	require.EqualValues(t, MaxFence, n)
}
