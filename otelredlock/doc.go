// Package otelredlock records OpenTelemetry metrics of a redlock Client:
// how long acquisitions take and wait, how long locks are held, how often
// they are lost, and how each node answers. It is built only on the
// Client's public hooks (redlock.WithObserver), and switched on with one
// option:
//
//	client, err := redlock.New(pools, otelredlock.WithMetrics(meterProvider))
//
// A nil MeterProvider stands for the global one (otel.GetMeterProvider).
//
// # Instruments
//
// The meter's scope is ScopeName. Durations are histograms in seconds
// ("s"); counters count ones.
//
//   - redlock.lock.acquire.duration (histogram, s): every call that takes
//     a lock (TryLock, Lock, a semaphore's TryAcquire and Acquire, a
//     read-write lock's calls, a campaign) that reached the nodes, from
//     its start to its return (calls with bad arguments are not
//     counted). Attributes redlock.kind (below) and redlock.outcome:
//     "acquired"; "busy": the key is held by another owner on too many
//     nodes for a quorum (a *redlock.QuorumError whose Busy is true);
//     "canceled": the call was ended on the caller's side: its context
//     ended (the error matches context.Canceled or
//     context.DeadlineExceeded, also for a Lock that gave up waiting on a
//     held key) or the Client was closed (pool.ErrClosed: a shutdown is
//     not a fault of the nodes, and must not raise an alert on them);
//     "unreachable": anything else, such as too many nodes failing or
//     too little validity left after a slow round.
//   - redlock.lock.wait.duration (histogram, s): Lock calls that got the
//     lock after their first round was refused, how long they waited
//     (the whole call). Attribute redlock.kind. Acquisitions that did not wait are
//     not recorded: acquire.duration counts them already, and zeros would
//     swamp the percentiles of the waits that matter. Waits that ended
//     without the lock are in acquire.duration (canceled).
//   - redlock.lock.held.duration (histogram, s): how long each lock was
//     held, from its acquisition round's start to its release by Unlock
//     or to the moment the Client learned of its loss. Attribute
//     redlock.kind. Restored locks (Client.Restore), whose start is unknown, are not
//     recorded.
//   - redlock.lock.lost (counter, {lock}): locks that ended before
//     Unlock, once per lock. Attributes redlock.kind and redlock.cause: "expired": the
//     validity ran out without an extension in time (redlock.ErrExpired);
//     "lost": an extension or the release found fewer than a quorum of
//     nodes holding the token (redlock.ErrLockLost); "other": any other
//     cause.
//   - redlock.lock.extend.failed (counter, {round}): extension rounds,
//     by Extend or by automatic extension, that did not reach a quorum;
//     the lock may still be valid. Attribute redlock.kind.
//   - redlock.node.duration (histogram, s): for every node of every
//     round that replied before the round was decided, the time from the
//     round's start to its reply. Attributes: server.address, the node's
//     name as its pool gives it (pool.Pool.Addr: the configured address,
//     not a resolved one); redlock.node.outcome: "ok" (the node did what
//     was asked), "refused" (held by another owner, or no longer ours),
//     "failed" (an error reply or a connection error); redlock.operation:
//     the round, "acquire", "extend", "unlock" or "fence". A node that
//     had not replied at the decision, or that timed out, has no sample:
//     watch for a node whose samples stop as well as for "failed" ones.
//     Locks taken by hand-offs ("handoff" rounds) send no command and are
//     not recorded.
//   - redlock.node.reset (counter, {reset}): a node was seen to have lost
//     its data (a new run id, or a changed fence epoch). Attribute
//     server.address.
//   - redlock.node.excluded (counter, {exclusion}): restart safety
//     stopped counting a node toward quorums (redlock.WithRestartSafety).
//     Attribute server.address.
//
// redlock.kind is the kind of lock (redlock.LockKind): "mutex" (one
// key), "multi" (several keys at once), "semaphore" (a permit),
// "rwlock_read" and "rwlock_write" (a read-write lock's reader and
// writer), "election" (a leadership: a campaign's wait for it, its term,
// its loss or resignation). A dashboard can then tell a semaphore whose
// callers wait for permits from contended mutexes, or readers from
// writers.
//
// No instrument has the lock key as an attribute: keys are unbounded, and
// a series per key would grow without limit. The attributes above have a
// few values each, times the number of nodes.
//
// # Buckets
//
// The acquisition, wait and node histograms share explicit bucket
// boundaries, in seconds, from 100µs (a node on the same host) to a
// minute (a long wait): 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
// 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60. The
// held.duration histogram adds 300, 900, 1800 and 3600, since extended
// locks can be held much longer than a TTL. An SDK View can replace
// them.
//
// # Cost
//
// The Client calls its observers synchronously, on the goroutines of its
// callers. Every attribute set is built once (those of a node the first
// time the node is seen in a kind of round), so recording allocates
// nothing of its own; what the SDK allocates per measurement is up to
// it. node.duration is skipped entirely when its instrument is not
// enabled (no reader wants it).
package otelredlock
