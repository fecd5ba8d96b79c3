package otelredlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// quorumErr returns the error of a round on five nodes (quorum 3) whose
// nodes ended with statuses.
func quorumErr(op redlock.Op, sentinel error, statuses ...redlock.NodeStatus) *redlock.QuorumError {
	qe := &redlock.QuorumError{Op: op, Key: "k", Quorum: 3, Err: sentinel}
	for i, s := range statuses {
		n := redlock.NodeResult{Addr: fmt.Sprintf("n%d:6379", i), Status: s}
		if s == redlock.NodeFailed {
			n.Err = errors.New("connection refused")
		}
		qe.Nodes = append(qe.Nodes, n)
	}
	return qe
}

func busyErr() *redlock.QuorumError {
	r := redlock.NodeRefused
	return quorumErr("acquire", redlock.ErrNotAcquired, r, r, r, redlock.NodeOK, redlock.NodeFailed)
}

func TestAcquireOutcome(t *testing.T) {
	f := redlock.NodeFailed
	unreachable := quorumErr("acquire", redlock.ErrNotAcquired, f, f, f, redlock.NodeOK, redlock.NodeOK)
	ended := busyErr()
	ended.Cause = context.DeadlineExceeded
	canceled := quorumErr("acquire", redlock.ErrNotAcquired, f, f, f, redlock.NodeOK, redlock.NodeOK)
	canceled.Cause = context.Canceled
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"busy", busyErr(), "busy"},
		{"busy, wrapped", fmt.Errorf("taking the job: %w", busyErr()), "busy"},
		{"nodes failed", unreachable, "unreachable"},
		{"too little validity", quorumErr("acquire", redlock.ErrNotAcquired, redlock.NodeOK, redlock.NodeOK, redlock.NodeOK), "unreachable"},
		{"not a quorum error", errors.New("restart check failed"), "unreachable"},
		{"deadline on a busy key", ended, "canceled"},
		{"context canceled", canceled, "canceled"},
		{"closed Client", pool.ErrClosed, "canceled"},
		{"closed Client while waiting", errors.Join(pool.ErrClosed, busyErr()), "canceled"},
	} {
		require.Equal(t, tc.want, outcomeNames[acquireOutcome(tc.err)], tc.name)
	}
}

func TestLostCause(t *testing.T) {
	r := redlock.NodeRefused
	gone := quorumErr("extend", redlock.ErrLockLost, r, r, r, redlock.NodeOK, redlock.NodeOK)
	require.Equal(t, "expired", causeNames[lostCause(redlock.ErrExpired)])
	require.Equal(t, "lost", causeNames[lostCause(gone)])
	require.Equal(t, "lost", causeNames[lostCause(redlock.ErrLockLost)])
	require.Equal(t, "other", causeNames[lostCause(errors.New("?"))])
	require.Equal(t, "other", causeNames[lostCause(nil)])
}

// round returns an acquisition round on five nodes: three granted, one
// refused, one failed with a reply, one pending.
func round() *redlock.RoundInfo {
	ms := time.Millisecond
	return &redlock.RoundInfo{Op: "acquire", Key: "orders:42", Start: time.Now(), Duration: 3 * ms, Won: true,
		Validity: 9 * time.Second, Drift: 100 * ms,
		Nodes: []redlock.NodeResult{
			{Addr: "a:1", Status: redlock.NodeOK, Latency: ms},
			{Addr: "b:1", Status: redlock.NodeOK, Latency: 2 * ms},
			{Addr: "c:1", Status: redlock.NodeOK, Latency: 3 * ms},
			{Addr: "d:1", Status: redlock.NodeRefused, Latency: ms},
			{Addr: "e:1", Status: redlock.NodeFailed, Latency: 2 * ms, Err: errors.New("ERR")},
			{Addr: "f:1", Status: redlock.NodePending},
		}}
}

func TestObserver_recordsEveryInstrumentWithItsAttributes(t *testing.T) {
	m := newMeter(t)
	o := newObserver(m.provider)

	o.Round(round())
	o.Round(&redlock.RoundInfo{Op: "handoff", Won: true, Nodes: []redlock.NodeResult{{Addr: "a:1", Status: redlock.NodeOK}}})
	unlock := round()
	unlock.Op = "unlock"
	o.Round(unlock)

	mutex, sem, read := redlock.KindMutex, redlock.KindSemaphore, redlock.KindRWRead
	o.Event(redlock.Event{Kind: redlock.EventAcquired, Lock: mutex, Key: "k", Duration: 5 * time.Millisecond})
	o.Event(redlock.Event{Kind: redlock.EventAcquired, Lock: sem, Key: "k", Duration: 2 * time.Second, Wait: 2 * time.Second})
	o.Event(redlock.Event{Kind: redlock.EventNotAcquired, Lock: mutex, Key: "k", Duration: time.Millisecond, Err: busyErr()})
	o.Event(redlock.Event{Kind: redlock.EventNotAcquired, Lock: read, Key: "k", Duration: time.Millisecond, Err: pool.ErrClosed})
	o.Event(redlock.Event{Kind: redlock.EventReleased, Lock: sem, Key: "k", Duration: 3 * time.Second})
	o.Event(redlock.Event{Kind: redlock.EventReleased, Lock: mutex, Key: "k"}) // a restored lock
	o.Event(redlock.Event{Kind: redlock.EventLost, Lock: read, Key: "k", Duration: time.Minute, Err: redlock.ErrExpired})
	o.Event(redlock.Event{Kind: redlock.EventLost, Lock: mutex, Key: "k", Err: redlock.ErrLockLost})
	o.Event(redlock.Event{Kind: redlock.EventExtendFailed, Lock: redlock.KindElection, Key: "k", Err: redlock.ErrLockLost})
	o.Event(redlock.Event{Kind: redlock.EventNodeReset, Node: "a:1", Err: errors.New("new run id")})
	o.Event(redlock.Event{Kind: redlock.EventNodeReset, Node: "a:1", Err: errors.New("new run id")})
	o.Event(redlock.Event{Kind: redlock.EventNodeExcluded, Node: "b:1", Duration: time.Minute})

	c := m.collect(t)
	require.Len(t, c, 8, "every instrument has data")

	n, sum := c.count(t, acquireName, map[string]string{"redlock.outcome": "acquired"})
	require.Equal(t, uint64(2), n)
	require.InDelta(t, 2.005, sum, 1e-9)
	n, _ = c.count(t, acquireName, map[string]string{"redlock.outcome": "acquired", "redlock.kind": "semaphore"})
	require.Equal(t, uint64(1), n)
	n, _ = c.count(t, acquireName, map[string]string{"redlock.outcome": "busy", "redlock.kind": "mutex"})
	require.Equal(t, uint64(1), n)
	n, _ = c.count(t, acquireName, map[string]string{"redlock.outcome": "canceled", "redlock.kind": "rwlock_read"})
	require.Equal(t, uint64(1), n)
	require.Equal(t, map[string]bool{"acquired": true, "busy": true, "canceled": true}, c.values(t, acquireName, "redlock.outcome"))
	require.Equal(t, map[string]bool{"mutex": true, "semaphore": true, "rwlock_read": true}, c.values(t, acquireName, "redlock.kind"))

	n, sum = c.count(t, waitName, nil)
	require.Equal(t, uint64(1), n, "TryLock and immediate acquisitions do not wait")
	require.InDelta(t, 2.0, sum, 1e-9)
	require.Equal(t, map[string]string{"redlock.kind": "semaphore"}, attrs(c.hist(t, waitName)[0].Attributes))

	n, sum = c.count(t, heldName, nil)
	require.Equal(t, uint64(2), n, "restored locks have no hold time")
	require.InDelta(t, 63.0, sum, 1e-9)
	require.Equal(t, heldBounds, c.hist(t, heldName)[0].Bounds)
	n, sum = c.count(t, heldName, map[string]string{"redlock.kind": "rwlock_read"})
	require.Equal(t, uint64(1), n, "the lost reader's hold")
	require.InDelta(t, 60.0, sum, 1e-9)

	require.Equal(t, int64(1), c.counter(t, lostName, "{lock}", map[string]string{"redlock.cause": "expired", "redlock.kind": "rwlock_read"}))
	require.Equal(t, int64(1), c.counter(t, lostName, "{lock}", map[string]string{"redlock.cause": "lost", "redlock.kind": "mutex"}))
	require.Equal(t, int64(1), c.counter(t, extendName, "{round}", map[string]string{"redlock.kind": "election"}))
	require.Equal(t, int64(2), c.counter(t, resetName, "{reset}", map[string]string{"server.address": "a:1"}))
	require.Equal(t, int64(1), c.counter(t, excludedName, "{exclusion}", map[string]string{"server.address": "b:1"}))

	// node.duration: the five nodes that replied, in both rounds; never
	// the pending node, the hand-off, or the key.
	for _, dp := range c.hist(t, nodeName) {
		a := attrs(dp.Attributes)
		require.Len(t, a, 3, "%v", a)
		require.Contains(t, []string{"acquire", "unlock"}, a["redlock.operation"])
		require.Equal(t, latencyBounds, dp.Bounds)
		for _, v := range a {
			require.NotEqual(t, "orders:42", v)
		}
	}
	for _, op := range []string{"acquire", "unlock"} {
		for addr, outcome := range map[string]string{"a:1": "ok", "b:1": "ok", "c:1": "ok", "d:1": "refused", "e:1": "failed"} {
			n, _ := c.count(t, nodeName, map[string]string{"server.address": addr, "redlock.node.outcome": outcome, "redlock.operation": op})
			require.Equal(t, uint64(1), n, "%s %s %s", op, addr, outcome)
		}
	}
	n, _ = c.count(t, nodeName, nil)
	require.Equal(t, uint64(10), n)
	n, _ = c.count(t, nodeName, map[string]string{"server.address": "f:1"})
	require.Zero(t, n)
	n, sum = c.count(t, nodeName, map[string]string{"server.address": "c:1"})
	require.Equal(t, uint64(2), n)
	require.InDelta(t, 0.006, sum, 1e-9, "seconds")
}

// A nil MeterProvider is the global one. (That the global one forwards to
// a provider installed later is OpenTelemetry's own behaviour, and works
// once per process: not checked here, so that the test can run again.)
func TestWithMetrics_nilIsTheGlobalProvider(t *testing.T) {
	prev := otel.GetMeterProvider()
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	m := newMeter(t)
	otel.SetMeterProvider(m.provider)
	o := newObserver(nil)
	o.Event(redlock.Event{Kind: redlock.EventAcquired, Duration: time.Millisecond})
	n, _ := m.collect(t).count(t, acquireName, map[string]string{"redlock.outcome": "acquired"})
	require.Equal(t, uint64(1), n)
}

func TestObserver_aNoopProviderRecordsNothingAndDoesNotPanic(t *testing.T) {
	o := newObserver(noop.NewMeterProvider())
	o.Round(round())
	o.Event(redlock.Event{Kind: redlock.EventLost, Duration: time.Second, Err: redlock.ErrExpired})
}

// The observer allocates nothing of its own per round or event once it
// has seen the nodes: the attribute sets are built in advance. What is
// left is the SDK's.
func TestObserver_allocations(t *testing.T) {
	m := newMeter(t)
	o := newObserver(m.provider)
	info := round()
	acquired := redlock.Event{Kind: redlock.EventAcquired, Key: "k", Duration: time.Millisecond}
	released := redlock.Event{Kind: redlock.EventReleased, Key: "k", Duration: time.Second}
	o.Round(info) // the nodes are seen
	perRound := testing.AllocsPerRun(1000, func() { o.Round(info) })
	perEvents := testing.AllocsPerRun(1000, func() { o.Event(acquired); o.Event(released) })
	t.Logf("allocations: %.1f per 5-node round, %.1f per acquired+released event pair", perRound, perEvents)
	if !raceEnabled {
		require.Zero(t, perRound)
		require.Zero(t, perEvents)
	}

	noopObs := newObserver(noop.NewMeterProvider())
	require.Zero(t, testing.AllocsPerRun(100, func() { noopObs.Round(info); noopObs.Event(acquired) }))
}

func BenchmarkObserver_Round(b *testing.B) {
	m := newMeter(b)
	o := newObserver(m.provider)
	info := round()
	b.ReportAllocs()
	for b.Loop() {
		o.Round(info)
	}
}

func BenchmarkObserver_lockLife(b *testing.B) {
	m := newMeter(b)
	o := newObserver(m.provider)
	acq, unlock := round(), round()
	unlock.Op = "unlock"
	acquired := redlock.Event{Kind: redlock.EventAcquired, Key: "k", Duration: time.Millisecond}
	released := redlock.Event{Kind: redlock.EventReleased, Key: "k", Duration: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		o.Round(acq)
		o.Event(acquired)
		o.Round(unlock)
		o.Event(released)
	}
}
