package goredis

import (
	"context"
	"errors"
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

type replyErr string

func (e replyErr) Error() string { return string(e) }

// RESP3 replies become what RESP2 gives.
func TestResp2(t *testing.T) {
	big, _ := new(big.Int).SetString("1234567890123456789012345678901234567890", 10)
	for _, c := range []struct {
		name     string
		in, want any
	}{
		{"nil", nil, nil},
		{"integer", int64(7), int64(7)},
		{"string", "OK", "OK"},
		{"true", true, int64(1)},
		{"false", false, nil},
		{"double", 1.5, "1.5"},
		{"whole double", 3.0, "3"},
		{"small double", 1e-7, "1e-07"},
		{"inf", math.Inf(1), "inf"},
		{"-inf", math.Inf(-1), "-inf"},
		{"nan", math.NaN(), "nan"},
		{"big number", big, "1234567890123456789012345678901234567890"},
		{"error inside an array", []any{int64(1), replyErr("ERR x")}, []any{int64(1), pool.ReplyError("ERR x")}},
		{"nested", []any{[]any{true, false}, nil, "a"}, []any{[]any{int64(1), nil}, nil, "a"}},
		{"map", map[any]any{"b": int64(2), "a": true}, []any{"a", int64(1), "b", int64(2)}},
		{"map inside an array", []any{map[any]any{"k": 2.5}}, []any{[]any{"k", "2.5"}}},
		{"empty array", []any{}, []any{}},
	} {
		require.Equal(t, c.want, resp2(c.in), c.name)
	}
}

func TestGatedArg_refusesOnceTheCallHasReturned(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a := gatedArg{ctx: ctx, v: int64(42)}
	b, err := a.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, "42", string(b))
	require.Equal(t, "42", a.String())
	cancel()
	_, err = a.MarshalBinary()
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}
