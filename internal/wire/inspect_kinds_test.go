package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSemInspect(t *testing.T) {
	in, err := ParseSemInspect([]any{[]byte("2"), int64(1), []byte("tok"), int64(900), nil, int64(-2)}, 2)
	require.NoError(t, err)
	require.Equal(t, SemInspection{Size: 2, Queued: 1, Slots: []Slot{{Value: "tok", Held: true, PTTL: 900}, {PTTL: -2}}}, in)
	for _, bad := range []any{
		"OK",
		[]any{nil, int64(0), nil, int64(-2)}, // one slot for two
		[]any{[]byte("x"), int64(0), nil, int64(-2), nil, int64(-2)}, // a size that is no number
		[]any{nil, "0", nil, int64(-2), nil, int64(-2)},              // a queue that is no integer
		[]any{nil, int64(0), nil, []byte("1"), nil, int64(-2)},       // a PTTL that is no integer
	} {
		_, err := ParseSemInspect(bad, 2)
		require.Error(t, err, "%v", bad)
	}
}

func TestParseRWInspect(t *testing.T) {
	in, err := ParseRWInspect([]any{nil, int64(-2), []byte("c.1"), int64(500), int64(1), int64(2), []byte("r1"), int64(70)})
	require.NoError(t, err)
	require.Equal(t, RWInspection{Writer: Slot{PTTL: -2}, Intent: Slot{Value: "c.1", Held: true, PTTL: 500}, Mutex: true,
		Expired: 2, Readers: []Slot{{Value: "r1", Held: true, PTTL: 70}}}, in)
	for _, bad := range []any{
		nil,
		[]any{nil, int64(-2), nil, int64(-2), int64(0)},                                // too short
		[]any{nil, int64(-2), nil, int64(-2), int64(0), int64(0), []byte("r1")},        // a reader without its time
		[]any{nil, int64(-2), nil, int64(-2), int64(0), int64(0), int64(1), int64(70)}, // a reader token that is no string
		[]any{nil, "x", nil, int64(-2), int64(0), int64(0)},
	} {
		_, err := ParseRWInspect(bad)
		require.Error(t, err, "%v", bad)
	}
}

func TestParseElectionInspect(t *testing.T) {
	key, rec, err := ParseElectionInspect([]any{[]byte("t"), int64(800), int64(1), []byte("7"), []byte("t"), []byte("v"), []byte("7"), []byte("c")})
	require.NoError(t, err)
	require.Equal(t, Inspection{Value: "t", Held: true, PTTL: 800, Queued: 1, Fence: 7}, key)
	require.Equal(t, LeaderRecord{Token: "t", Record: "t", Value: "v", Term: 7, Client: "c"}, rec)
	require.True(t, rec.Current())
	_, _, err = ParseElectionInspect([]any{nil, int64(-2), int64(0), nil})
	require.Error(t, err)
	_, _, err = ParseElectionInspect([]any{nil, int64(-2), int64(0), nil, nil, nil, []byte("x"), nil})
	require.Error(t, err, "a term that is no number")
}
