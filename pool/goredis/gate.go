package goredis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Late commands. Without ContextTimeoutEnabled, go-redis applies only its
// own timeouts to the socket, and run leaves a call whose deadline passed
// to its goroutine. That call may still be waiting for a connection to
// be set up (a new connection's HELLO or AUTH to a paused node): once the
// node answers, go-redis would write the command, after the caller was
// told that the call failed. The lock client counts on the contrary: a
// command it saw fail either reached the node before the call returned
// or never will, so that releases sent afterwards come after it (see
// redlock's owed releases). So one argument of each command is wrapped
// in a gatedArg, which go-redis asks for its bytes (MarshalBinary) while
// it writes the command: once the call's context has ended, it refuses,
// go-redis drops the connection (an error while writing makes it a bad
// connection, so a partly buffered command never reaches the node whole)
// and nothing is sent.

// gate returns args with the command's name wrapped in a gatedArg, when
// the client does not apply contexts' deadlines itself; otherwise args as
// they are. The name is written first, so a refusal leaves nothing of the
// command buffered; and it is never a key: a cluster client routes by the
// key, and since go-redis 9.24 takes it only from an argument of a plain
// type (a wrapped GET key failed with "cannot determine the routing key").
// go-redis reads the name through String.
func (p *basePool) gate(ctx context.Context, args []any) []any {
	if p.ctxTimeouts || len(args) == 0 || !gateable(args[0]) {
		return args
	}
	args[0] = gatedArg{ctx: ctx, v: args[0]}
	return args
}

// gatedArg is an argument that go-redis may write only while ctx lasts.
type gatedArg struct {
	ctx context.Context
	v   any
}

// MarshalBinary returns the argument's bytes as go-redis would write them,
// or an error once the call's context has ended.
func (a gatedArg) MarshalBinary() ([]byte, error) {
	if err := a.ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock/pool/goredis: not sent, the call has returned: %w", err)
	}
	return encodeArg(a.v), nil
}

// String is the argument as go-redis reads it to route a command (a
// cluster client takes the key's slot from it).
func (a gatedArg) String() string {
	switch v := a.v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return fmt.Sprint(a.v)
}

// gateable reports whether encodeArg knows v's type. Others (pointers,
// encoding.BinaryMarshaler values, whose bytes may differ from call to
// call) stay unwrapped.
func gateable(v any) bool {
	switch v.(type) {
	case nil, string, []byte, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
		float32, float64, bool, time.Duration, time.Time, net.IP:
		return true
	}
	return false
}

// encodeArg returns v's bytes as go-redis writes an argument of its type;
// v is of a type gateable accepts.
func encodeArg(v any) []byte {
	var b []byte
	switch v := v.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	case int:
		b = strconv.AppendInt(b, int64(v), 10)
	case int8:
		b = strconv.AppendInt(b, int64(v), 10)
	case int16:
		b = strconv.AppendInt(b, int64(v), 10)
	case int32:
		b = strconv.AppendInt(b, int64(v), 10)
	case int64:
		b = strconv.AppendInt(b, v, 10)
	case uint:
		b = strconv.AppendUint(b, uint64(v), 10)
	case uint8:
		b = strconv.AppendUint(b, uint64(v), 10)
	case uint16:
		b = strconv.AppendUint(b, uint64(v), 10)
	case uint32:
		b = strconv.AppendUint(b, uint64(v), 10)
	case uint64:
		b = strconv.AppendUint(b, v, 10)
	case float32:
		b = strconv.AppendFloat(b, float64(v), 'f', -1, 64)
	case float64:
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
	case bool:
		b = []byte{'0'}
		if v {
			b[0] = '1'
		}
	case time.Duration:
		b = strconv.AppendInt(b, v.Nanoseconds(), 10)
	case time.Time:
		b = v.AppendFormat(b, time.RFC3339Nano)
	case net.IP:
		b = v
	}
	return b
}
