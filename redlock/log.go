package redlock

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// WithLogger makes the Client log what an operator must know: a lock
// lost before Unlock (its key and cause), a node that failed (no reply in
// time, a broken connection), and a node that refuses what the library
// asks (a missing ACL permission, a read-only replica, a full node), so
// that a Lock that waits by back-off instead of by announcement, or a
// node left out of every quorum, does not go unnoticed. Records are at
// Warn; node records at most one a minute for each node and cause. They
// never contain a token or a password. Default: no logging. See
// docs/observability.md.
func WithLogger(l *slog.Logger) Option {
	return clientOption(func(c *clientConfig) { c.logger = l })
}

// warnEvery bounds how often one node's one cause is logged.
const warnEvery = time.Minute

// warner logs node problems at Warn, each (node, cause) at most once per
// warnEvery.
type warner struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
}

// warnNode logs that node addr did not do what was asked, and why.
func (c *Client) warnNode(addr, what string, err error) {
	l := c.cfg.logger
	if l == nil || err == nil {
		return
	}
	cause := err.Error()
	// An error reply's text is the node's own and stable; a transport
	// error's names ports and addresses that change with every connection.
	key := [2]string{addr, what}
	if replied(err) {
		key[1] += cause
	}
	now := time.Now()
	c.warn.mu.Lock()
	if c.warn.last == nil {
		c.warn.last = map[[2]string]time.Time{}
	}
	if t, ok := c.warn.last[key]; ok && now.Sub(t) < warnEvery {
		c.warn.mu.Unlock()
		return
	}
	c.warn.last[key] = now
	c.warn.mu.Unlock()
	l.LogAttrs(context.Background(), slog.LevelWarn, "redlock: "+what,
		slog.String("node", addr), slog.String("error", cause))
}

// warnFailures logs the nodes of round r that failed without answering:
// a broken connection, or no reply within the node timeout.
func (c *Client) warnFailures(r *round) {
	for _, n := range r.nodes {
		if (n.Status == NodeFailed || n.Status == NodePending) && n.Err != nil && !replied(n.Err) {
			c.warnNode(n.Addr, "node failed", n.Err)
		}
	}
}

// warnRefusals logs the nodes of round r that answered with an error.
func (c *Client) warnRefusals(what string, r *round) {
	if c.cfg.logger == nil {
		return
	}
	for _, n := range r.nodes {
		if n.Status == NodeFailed && replied(n.Err) {
			c.warnNode(n.Addr, what, n.Err)
		}
	}
}

// unannounced reports the nodes of release round r that released the
// key but refused to announce it: logged at Warn (once a minute per
// node) and told to the observers as EventNotAnnounced. The release
// itself succeeded. kind is the lock's.
func (c *Client) unannounced(name string, kind LockKind, r *round) {
	if c.cfg.logger == nil && !c.observing() {
		return
	}
	for _, n := range r.nodes {
		if n.Status != NodeOK || n.Err == nil {
			continue
		}
		c.warnNode(n.Addr, "node released a lock but refused to announce it: waiting Lock calls fall back to the back-off (WithRetry); docs/operations.md lists the ACL", n.Err)
		if c.observing() {
			c.emit(Event{Kind: EventNotAnnounced, Lock: kind, Key: name, Node: n.Addr, Err: n.Err})
		}
	}
}
