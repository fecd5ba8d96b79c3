// Package redlock takes distributed locks on N independent Redis nodes
// with the Redlock algorithm: a lock is held when a majority of the nodes
// agree, for a measured time that accounts for the round's own duration
// and for clock drift.
//
// # The round
//
// TryLock generates a fresh random token (a UUID v4: 122 bits from
// crypto/rand) and sends SET key token NX PX ttl to every node at once. It
// stops waiting as soon as the outcome is decided: success when a quorum
// (N/2+1) said OK, failure as soon as so many nodes refused or failed that
// a quorum is no longer possible, or when the node timeout (default 50ms)
// passes. Slow nodes are not waited for. The lock's validity is
//
//	validity = ttl - elapsed - (ttl*driftFactor + 2ms)
//
// where elapsed is measured on the monotonic clock from before the first
// command was sent to the decision, and driftFactor defaults to 0.01. The
// acquisition succeeds only with a quorum and positive validity (or more
// than WithMinValidity). Otherwise every node that may hold the new token
// is released: nodes that said OK or failed (a failed SET may still have
// landed) at once, nodes that reply after the decision as their replies
// come. Refusals are never released: they hold another owner's key.
//
// Lock repeats rounds until one succeeds or its context ends. It does not
// poll: after a refused round it subscribes to the key's release
// announcements on every node (one pub/sub connection per node per
// Client) and sleeps until a release that concerns it is announced, or
// until the holder's key runs out (its rounds run a script that reports
// the key's TTL). While it waits it is queued on the nodes, and a release
// keeps the key for the longest waiter for a short window
// (WithHandoffWindow), so waiters are served in the order they came and
// the releasing worker cannot take the lock straight back. A back-off
// (WithRetry: a random, growing delay from 5-10ms up to 125-250ms) paces the rounds only when the nodes cannot tell how long to
// wait. Each round has its own token. See docs/waiting.md.
//
// # Extend and Unlock
//
// Extend runs, on every node, a script that gives the key a new TTL only
// while it still holds our token; a key that expired or was taken is never
// re-created. With a quorum, the validity is recomputed exactly as above;
// with fewer, Extend returns ErrLockLost. Unlock runs a script that deletes
// the key only while it holds our token, so it never removes another
// owner's lock; it returns once every node answered or the node timeout
// passed, so that no node that answered still holds the token (a refused
// TryLock likewise returns once its round is undone: docs/algorithm.md,
// "Done when returned"), and fewer than a quorum releasing means the
// lock had already been lost (ErrLockLost). A node whose SET was
// still in flight when the lock was granted gets its release only after
// that SET has returned, so a late SET cannot outlive Unlock.
//
// Scripts are sent with EVALSHA and fall back to EVAL when a node answers
// NOSCRIPT (after a restart or SCRIPT FLUSH). They take the key in KEYS and
// every value in ARGV.
//
// # Critical sections
//
// Client.Do runs a function while holding a lock: it waits for the lock
// as Lock does, runs the function with the lock's context, extends the
// lock in the background (every ttl/3 by default), and releases it when
// the function returns or panics. Lock users get the same with
// Lock.Context and WithAutoExtend.
//
// The lock's context (Lock.Context) ends, with a cause read by
// context.Cause, when the validity runs out (ErrExpired; earlier by
// WithSafetyMargin), after Unlock (ErrReleased), or when the lock is lost
// (ErrLockLost). Its Deadline is the validity end and moves with each
// extension; its timers run on the Client's clock.
//
// Automatic extension never re-creates a key. An extension that finds the
// key no longer ours on too many nodes for a quorum ends the lock at once.
// One that fails for other reasons (nodes down or slow) is retried after a
// short random delay; when extensions have failed for a whole node
// timeout, the lock ends with ErrLockLost, and never later than the
// validity end. WithMaxHold bounds how long a
// function that never returns can keep a lock. The extender is one
// goroutine per lock; it stops on Unlock, loss, expiry, a limit, or Close.
//
// The context tells a holder to stop; it cannot stop work already on its
// way. A process that checked the context and then paused (GC, swapping,
// a stopped VM) can act after the lock has passed to another owner. Only
// the protected resource can refuse such a stale writer, for example by
// checking a fencing token.
//
// # Fencing tokens
//
// With WithFencing, an acquisition also mints a fencing token
// (Lock.Fence): for one key, a lock acquired after another was acquired
// always has a strictly larger fence, so a resource that refuses writes
// with a fence below the highest it has accepted refuses a stalled
// holder's late write. Two locks can share a fence only if mutual
// exclusion itself already failed (both held a quorum at once). It costs
// a second quorum round, counted against the validity, and about 1.6x the
// time of an uncontended lock and unlock, so it is opt-in. Each node keeps
// a counter per key, "<key>:fence", and an epoch, "redlock:epoch", both
// without TTL; see docs/fencing.md for the scheme and what the nodes must
// guarantee (no eviction of those keys, persistence).
//
// # Restart safety
//
// A node that restarts without its data forgets the locks it held. With
// its first acquisition (beside it on pool.New's nodes, so that it costs
// no round trip of its own: a grant waits for the check, within the node
// timeout), and whenever a pool opened a new connection
// (pool.Reconnector; with other pools, after a call to the node failed
// without its answer), a Client asks each node for its run id, its uptime
// and a marker key ("redlock:node") that holds the run id of the process
// Clients last counted. A node without the marker, or with another
// process's, is not counted toward an acquisition until it has been up for
// the maximum TTL (WithRestartSafety, default 1m), so every lock it may have
// forgotten has run out; its error matches ErrNodeRestarted. A new
// deployment (a quorum answers and no node has a marker) is counted at
// once. WithDurableNodes counts a node that kept its data at once, and
// WithRestartSafety(0) turns the check off. See docs/safety.md and
// docs/operations.md.
//
// # Errors
//
// A failed round returns a *QuorumError that lists every node with its
// address and outcome (OK, refused, failed with its error, timed out, or
// not awaited because the outcome was decided without it), so "the lock is busy" (QuorumError.Busy) and "the nodes are
// unreachable" can be told apart. It matches ErrNotAcquired for
// acquisitions and ErrLockLost for Extend and Unlock, and also the caller's
// context error when the context ended the round. Errors never contain the
// token.
//
// # Keys
//
// Keys are used exactly as given, so other Redlock clients that use the
// same SET NX PX convention interoperate on the same key. To keep lock keys
// apart from the application's data on shared nodes, give them a prefix of
// your own, for example "lock:{orders}:42"; the library adds none.
//
// # Assumptions
//
// The nodes are independent masters (no replication between them), their
// clocks run at rates within driftFactor of each other, and lock keys are
// not evicted (run the nodes with maxmemory-policy noeviction, or volatile
// policies on nodes that hold nothing else). Every client of the nodes
// uses TTLs up to the same maximum TTL (restart safety). A holder that
// stalls after checking its validity can still act on an expired lock; a
// TTL alone cannot prevent that.
package redlock
