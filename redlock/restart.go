package redlock

import "time"

// DefaultMaxTTL is the longest lock TTL that restart safety assumes any
// client of the nodes uses, unless WithMaxTTL says otherwise.
const DefaultMaxTTL = time.Minute

// WithMaxTTL sets the longest TTL that any client of these nodes gives a
// lock. A node that comes back without its data is not counted toward any
// quorum until that long after it restarted, so that every lock it forgot
// has run out on it first (docs/safety.md). A TTL above d used by this
// Client raises its own wait to that TTL. Default DefaultMaxTTL (1m); it
// must be positive. Give every client of a deployment the same value.
func WithMaxTTL(d time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.maxTTL = d })
}

// WithRestartSafety turns restart safety on (the default) or off. Off, a
// node that restarted empty counts toward a quorum at once, and a second
// owner can take a lock that the node forgot (docs/safety.md).
func WithRestartSafety(on bool) Option {
	return clientOption(func(c *clientConfig) { c.restartUnsafe = !on })
}

// WithDurableNodes declares that every node persists each write before it
// answers (appendonly yes, appendfsync always): a node that restarted with
// its data is counted at once. A node that restarted empty still waits out
// the maximum TTL. Default: nodes are not assumed durable.
func WithDurableNodes() Option {
	return clientOption(func(c *clientConfig) { c.durable = true })
}
