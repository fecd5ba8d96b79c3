package pool

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomodule/redigo/redis"
)

// PubSubKind says what a PubSubEvent is.
type PubSubKind uint8

// The events of a publish/subscribe connection.
const (
	// PubSubMessage is a message published on Channel; Data is its payload.
	PubSubMessage PubSubKind = iota + 1
	// PubSubSubscribed is the node's confirmation of SUBSCRIBE for Channel.
	PubSubSubscribed
	// PubSubUnsubscribed is the node's confirmation of UNSUBSCRIBE for
	// Channel.
	PubSubUnsubscribed
	// PubSubPong is the node's answer to Ping.
	PubSubPong
	// PubSubClosed ends the connection: Err says why, nil after Close.
	// Nothing follows it.
	PubSubClosed
)

// PubSubEvent is what arrived on a publish/subscribe connection (see
// Subscriber).
type PubSubEvent struct {
	Kind    PubSubKind
	Channel string // for messages and confirmations
	Data    string // the payload of a message
	Err     error  // for PubSubClosed: a *NodeError, or nil after Close
}

// PubSubConn is a publish/subscribe connection to one node, opened by
// Subscriber.DialPubSub. Its methods send a command and return without
// waiting for the answer, which arrives as an event; they are safe for
// concurrent use. An error reply to any of them, or a connection that
// breaks, ends the connection with a PubSubClosed event that carries
// the error.
type PubSubConn interface {
	// Subscribe sends SUBSCRIBE for channels.
	Subscribe(channels ...string) error
	// Unsubscribe sends UNSUBSCRIBE for channels.
	Unsubscribe(channels ...string) error
	// Ping sends PING; the answer is a PubSubPong event.
	Ping() error
	// Close ends the connection; the PubSubClosed event follows, from
	// the goroutine that delivers the events. It does not wait for it.
	Close() error
}

// redigoPubSub is the PubSubConn of New and FromRedigo: a redigo
// connection, read by a goroutine of its own.
type redigoPubSub struct {
	addr, secret string
	conn         redis.Conn
	wmu          sync.Mutex // orders the commands written
	shutOnce     sync.Once
	byCaller     atomic.Bool // Close was called
}

// startPubSub reads conn until it fails or is closed, handing what
// arrives to on.
func startPubSub(addr, secret string, conn redis.Conn, on func(PubSubEvent)) *redigoPubSub {
	ps := &redigoPubSub{addr: addr, secret: secret, conn: conn}
	go ps.read(on)
	return ps
}

func (ps *redigoPubSub) Subscribe(channels ...string) error {
	return ps.send("SUBSCRIBE", channels)
}

func (ps *redigoPubSub) Unsubscribe(channels ...string) error {
	return ps.send("UNSUBSCRIBE", channels)
}

func (ps *redigoPubSub) Ping() error { return ps.send("PING", nil) }

func (ps *redigoPubSub) Close() error {
	ps.byCaller.Store(true)
	ps.shut()
	return nil
}

// shut closes the connection: a read in progress fails, and the reader
// returns.
func (ps *redigoPubSub) shut() { ps.shutOnce.Do(func() { _ = ps.conn.Close() }) }

// send writes one command. A failed write breaks the connection, which
// the reader reports.
func (ps *redigoPubSub) send(cmd string, channels []string) error {
	args := make([]any, len(channels))
	for i, ch := range channels {
		args[i] = ch
	}
	ps.wmu.Lock()
	defer ps.wmu.Unlock()
	err := ps.conn.Send(cmd, args...)
	if err == nil {
		err = ps.conn.Flush()
	}
	return wrapErr(ps.addr, cmd, err, ps.secret)
}

var errOutOfStep = errors.New("not a publish/subscribe reply: the connection is out of step")

// read hands each reply to on until the connection ends.
func (ps *redigoPubSub) read(on func(PubSubEvent)) {
	for {
		reply, err := neutral(redis.ReceiveWithTimeout(ps.conn, 0))
		ev, ok := PubSubEvent{}, false
		if err == nil {
			ev, ok = pubSubEvent(reply)
			if !ok {
				err = fmt.Errorf("%w: %T", errOutOfStep, reply)
			}
		}
		if err != nil {
			ps.shut()
			if ps.byCaller.Load() {
				err = nil
			} else {
				err = wrapErr(ps.addr, "SUBSCRIBE", err, ps.secret)
			}
			on(PubSubEvent{Kind: PubSubClosed, Err: err})
			return
		}
		on(ev)
	}
}

// pubSubEvent reads one pub/sub reply.
func pubSubEvent(reply any) (PubSubEvent, bool) {
	if s, ok := reply.(string); ok && s == "PONG" {
		return PubSubEvent{Kind: PubSubPong}, true
	}
	vs, ok := reply.([]any)
	if !ok || len(vs) < 2 {
		return PubSubEvent{}, false
	}
	kind, ok1 := asString(vs[0])
	ch, ok2 := asString(vs[1])
	if !ok1 || !ok2 {
		return PubSubEvent{}, false
	}
	switch {
	case kind == "message" && len(vs) == 3:
		data, ok := asString(vs[2])
		return PubSubEvent{Kind: PubSubMessage, Channel: ch, Data: data}, ok
	case kind == "subscribe":
		return PubSubEvent{Kind: PubSubSubscribed, Channel: ch}, true
	case kind == "unsubscribe":
		return PubSubEvent{Kind: PubSubUnsubscribed, Channel: ch}, true
	case kind == "pong":
		return PubSubEvent{Kind: PubSubPong}, true
	}
	return PubSubEvent{}, false
}

// asString reads a simple or bulk string reply.
func asString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}
