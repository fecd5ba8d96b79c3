package pool

import "time"

// Settings that are not options of New, for the tests of package pool_test.

// WithQueueSize sets how many requests may wait, per connection, to be
// written (defaultQueueSize).
func WithQueueSize(n int) Option { return func(c *config) { c.queueSize = n } }

// WithPingAfterIdle makes a connection that stayed idle at least d answer
// a PING before it carries commands again (defaultPingIdle); 0 never pings.
func WithPingAfterIdle(d time.Duration) Option { return func(c *config) { c.pingIdle = d } }
