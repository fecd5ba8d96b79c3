package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// dialer opens a node's connections: TCP, the TLS handshake when
// configured, and the checks of what the node sends (respConn). redigo
// authenticates and selects the database over the connection it returns.
//
// The handshake is done here rather than by redigo (DialUseTLS) so that
// the checks see the plaintext, and so that the handshake shares the dial
// timeout and the caller's context with the TCP connect.
type dialer struct {
	net       net.Dialer
	tls       *tls.Config // nil for plain TCP
	timeout   time.Duration
	custom    func(ctx context.Context, network, addr string) (net.Conn, error) // WithDialer; nil for TCP
	allowance bulkAllowance                                                     // the node's, shared by the connections it dials
}

func newDialer(cfg *config, tc *tls.Config) *dialer {
	return &dialer{net: net.Dialer{Timeout: cfg.dialTimeout, KeepAlive: 5 * time.Minute}, tls: tc, timeout: cfg.dialTimeout, custom: cfg.dial}
}

// dialFunc returns the function redigo dials with. With lazy, deadlines
// are applied up to deadlineSlack late (see lazyDeadlineConn): the
// pipelined connections use it, pub/sub connections get exact deadlines.
func (d *dialer) dialFunc(lazy bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, d.timeout)
		defer cancel()
		dial := d.net.DialContext
		if d.custom != nil {
			dial = d.custom
		}
		c, err := dial(ctx, network, addr)
		if err == nil && c == nil {
			err = errors.New("the dialer returned no connection")
		}
		if err != nil {
			return nil, err
		}
		if d.tls != nil {
			tc := tls.Client(c, d.tls)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = c.Close()
				if ctx.Err() != nil {
					// A node without TLS on this port waits for a command
					// and says nothing.
					return nil, fmt.Errorf("TLS handshake: no answer in time (is TLS enabled on the node's port?): %w", err)
				}
				return nil, fmt.Errorf("TLS handshake: %w", err)
			}
			c = tc
		}
		if lazy {
			c = &lazyDeadlineConn{Conn: c}
		}
		return &respConn{Conn: c, s: respScanner{allowance: &d.allowance}}, nil
	}
}
