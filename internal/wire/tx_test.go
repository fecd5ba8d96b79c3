package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueueTx_writesWhatTheAcquisitionScriptWritesForARefusedWaiter(t *testing.T) {
	q := NewQueue(50, 150, 1000)
	w := Waiter{ID: "c.1", Since: 1_700_000_000_000_000, Waited: 5, Round: 1, Handoff: "c.1/s"}
	require.Equal(t, [][]any{
		{"SET", "k:{k}queue:c.1", "1 8000 c.1/s", "PX", any(int64(1150))},
		{"ZADD", "k:{k}queue", "NX", int64(1_700_000_000_000_000), "c.1"},
		{"PEXPIRE", "k:{k}queue", any(int64(1150))},
		{"TIME"},
		{"GET", "k"},
		{"PTTL", "k"},
	}, q.QueueTx("k", 8000, w))
	w.Handoff = ""
	require.Equal(t, "1", q.QueueTx("k", 8000, w)[0][2], "a waiter without a hand-off token: its round alone")
}

func TestParseQueueTx_readsTheKeyAsTheScriptWould(t *testing.T) {
	now := []any{[]byte("1700000000"), []byte("250")}
	reply := func(v any, pttl int64) any { return []any{"OK", int64(1), int64(1), now, v, pttl} }
	for _, tc := range []struct {
		name    string
		v       any
		pttl    int64
		refusal []any
		free    bool
	}{
		{"held", []byte("tok"), 900, []any{int64(CodeHeld), int64(900)}, false},
		{"held without a TTL", []byte("tok"), -1, []any{int64(CodeHeld), int64(-1)}, false},
		{"reserved", []byte(Reservation("c.2")), 40, []any{int64(CodeReserved), int64(40)}, false},
		{"a read-write lock", []byte(RWMarker), -1, []any{int64(CodeKind)}, false},
		{"free", nil, -2, []any{int64(CodeHeld), int64(0)}, true},
	} {
		got, err := ParseQueueTx(reply(tc.v, tc.pttl))
		require.NoError(t, err, tc.name)
		require.Equal(t, any(tc.refusal), got.Refusal, tc.name)
		require.Equal(t, tc.free, got.Free, tc.name)
		require.True(t, got.Added, tc.name)
		require.Equal(t, int64(1_700_000_000_000_250), got.Micros, tc.name)
	}
}

func TestParseQueueTx_failsOnAnythingElse(t *testing.T) {
	now := []any{[]byte("1700000000"), []byte("250")}
	for _, reply := range []any{
		nil, int64(1), "OK", []any{"OK"},
		[]any{"OK", "1", int64(1), now, []byte("t"), int64(5)},                           // ZADD not an integer
		[]any{"OK", int64(1), int64(1), []any{[]byte("x"), []byte("1")}, nil, int64(-2)}, // TIME not a number
		[]any{"OK", int64(1), int64(1), []any{[]byte("1")}, nil, int64(-2)},              // TIME of one part
		[]any{"OK", int64(1), int64(1), now, int64(7), int64(5)},                         // the value an integer
		[]any{"OK", int64(1), int64(1), now, []byte("t"), "5"},                           // PTTL not an integer
	} {
		_, err := ParseQueueTx(reply)
		require.ErrorContains(t, err, "unexpected reply", "%#v", reply)
	}
}

func TestWaiter_Misplaced_trustsAClockWithinASecondOfTheNodes(t *testing.T) {
	const node = 1_700_000_000_000_000
	w := Waiter{Since: node - 300_000, Waited: 300_000}
	_, bad := w.Misplaced(node)
	require.False(t, bad, "an honest clock")
	w.Since = node - 300_000 - 900_000
	_, bad = w.Misplaced(node)
	require.False(t, bad, "0.9s off")
	w.Since = node - 10_000_000
	began, bad := w.Misplaced(node)
	require.True(t, bad, "10s behind")
	require.Equal(t, int64(node-300_000), began, "placed by the node's clock less the time waited")
	w.Since = node + 2_000_000
	_, bad = w.Misplaced(node)
	require.True(t, bad, "2s ahead")
}
