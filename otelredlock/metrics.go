package otelredlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// ScopeName is the instrumentation scope of the Meter that WithMetrics
// takes from its MeterProvider: the import path of this package.
const ScopeName = "github.com/quorumlock/redlock/otelredlock"

// Instrument names.
const (
	acquireName  = "redlock.lock.acquire.duration"
	waitName     = "redlock.lock.wait.duration"
	heldName     = "redlock.lock.held.duration"
	lostName     = "redlock.lock.lost"
	extendName   = "redlock.lock.extend.failed"
	nodeName     = "redlock.node.duration"
	resetName    = "redlock.node.reset"
	excludedName = "redlock.node.excluded"
)

// Attribute keys.
const (
	outcomeKey     = attribute.Key("redlock.outcome")
	causeKey       = attribute.Key("redlock.cause")
	addressKey     = attribute.Key("server.address") // as in OpenTelemetry's semantic conventions
	nodeOutcomeKey = attribute.Key("redlock.node.outcome")
	operationKey   = attribute.Key("redlock.operation")
	kindKey        = attribute.Key("redlock.kind")
)

// numKinds bounds the values of redlock.LockKind, the index of the
// options by kind: 0, the zero LockKind, records without redlock.kind.
// It counts the kinds the core knows, so that a new kind needs no change
// here.
var numKinds = func() int {
	n := 1
	for {
		if _, err := redlock.LockKind(n).MarshalText(); err != nil {
			return n
		}
		n++
	}
}()

// latencyBounds are the bucket boundaries, in seconds, of the acquisition,
// wait and node histograms: a 1-2.5-5 series from 100µs (a request to a
// node on the same host) to a minute (a Lock that waited long).
var latencyBounds = []float64{
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5,
	10, 30, 60,
}

// heldBounds are the bucket boundaries, in seconds, of the hold-time
// histogram: latencyBounds, then up to an hour, since locks that are
// extended can be held far longer than one TTL.
var heldBounds = append(append([]float64(nil), latencyBounds...), 300, 900, 1800, 3600)

// The values of redlock.outcome on redlock.lock.acquire.duration.
const (
	outcomeAcquired = iota
	outcomeBusy
	outcomeUnreachable
	outcomeCanceled
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"acquired", "busy", "unreachable", "canceled"}

// The values of redlock.cause on redlock.lock.lost.
const (
	causeExpired = iota
	causeLost
	causeOther
	numCauses
)

var causeNames = [numCauses]string{"expired", "lost", "other"}

// The values of redlock.node.outcome on redlock.node.duration.
const (
	nodeOK = iota
	nodeRefused
	nodeFailed
	numNodeOutcomes
)

var nodeOutcomeNames = [numNodeOutcomes]string{"ok", "refused", "failed"}

// WithMetrics returns a Client option that records OpenTelemetry metrics
// of the Client's locks and nodes with meters from mp (scope ScopeName).
// A nil mp stands for the global MeterProvider, otel.GetMeterProvider(),
// read when WithMetrics is called: until otel.SetMeterProvider installs
// one, the global provider records nothing, and it forwards to the one
// installed afterwards. The package documentation lists the instruments,
// their attributes and their buckets.
//
// Each call makes one Observer (redlock.WithObserver) for one Client.
// Instruments that mp cannot make are reported to otel.Handle and
// record nothing.
func WithMetrics(mp metric.MeterProvider) redlock.Option {
	return redlock.WithObserver(newObserver(mp))
}

// observer turns a Client's rounds and events into measurements. Every
// attribute set it records with is built once (per node and operation
// the first time one is seen), so that recording allocates nothing of
// its own.
type observer struct {
	ctx context.Context // what measurements are recorded with: none is given

	acquire, wait, held, node     metric.Float64Histogram
	lost, extend, reset, excluded metric.Int64Counter

	// The options of the lock instruments, by kind of lock (numKinds),
	// then by outcome or cause.
	acquireOpts        [][numOutcomes][]metric.RecordOption
	lostOpts           [][numCauses][]metric.AddOption
	waitOpts, heldOpts [][]metric.RecordOption
	extendOpts         [][]metric.AddOption

	// nodes holds the options of node.duration by node and operation.
	// Readers take no lock: the map is replaced, never changed, under mu.
	nodes atomic.Pointer[map[nodeKey]*nodeOpts]
	mu    sync.Mutex

	// The options of the node counters, by address (string → []metric.AddOption).
	resetOpts, excludedOpts sync.Map
}

// nodeKey names the attribute sets of one node in one kind of round.
type nodeKey struct {
	addr string
	op   redlock.Op
}

// nodeOpts are the options of a node's measurements in one kind of round,
// by node outcome.
type nodeOpts [numNodeOutcomes][]metric.RecordOption

func newObserver(mp metric.MeterProvider) *observer {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	o := &observer{ctx: context.Background()}
	o.acquire = histogram(m, acquireName, latencyBounds,
		"How long TryLock and Lock calls took, by outcome.")
	o.wait = histogram(m, waitName, latencyBounds,
		"How long Lock calls that got the lock waited after their first round was refused.")
	o.held = histogram(m, heldName, heldBounds,
		"How long locks were held, from their acquisition round's start to their release or loss.")
	o.node = histogram(m, nodeName, latencyBounds,
		"How long a node took to reply in a quorum round, from the round's start.")
	o.lost = counter(m, lostName, "{lock}", "Locks that ended before Unlock, by cause.")
	o.extend = counter(m, extendName, "{round}", "Extension rounds that did not reach a quorum.")
	o.reset = counter(m, resetName, "{reset}", "Times a node was seen to have lost its data.")
	o.excluded = counter(m, excludedName, "{exclusion}", "Times restart safety stopped counting a node toward quorums.")

	o.lockOpts()
	empty := map[nodeKey]*nodeOpts{}
	o.nodes.Store(&empty)
	return o
}

// lockOpts builds the options of the lock instruments: redlock.kind (none
// for the zero LockKind) and each outcome or cause.
func (o *observer) lockOpts() {
	o.acquireOpts = make([][numOutcomes][]metric.RecordOption, numKinds)
	o.lostOpts = make([][numCauses][]metric.AddOption, numKinds)
	o.waitOpts, o.heldOpts = make([][]metric.RecordOption, numKinds), make([][]metric.RecordOption, numKinds)
	o.extendOpts = make([][]metric.AddOption, numKinds)
	for k := range numKinds {
		var kind []attribute.KeyValue
		if k > 0 {
			kind = []attribute.KeyValue{kindKey.String(redlock.LockKind(k).String())}
		}
		with := func(kv attribute.KeyValue) []attribute.KeyValue { return append(slices.Clip(kind), kv) }
		for i, name := range outcomeNames {
			o.acquireOpts[k][i] = recordOpts(with(outcomeKey.String(name))...)
		}
		for i, name := range causeNames {
			o.lostOpts[k][i] = addOpts(with(causeKey.String(name))...)
		}
		o.waitOpts[k], o.heldOpts[k], o.extendOpts[k] = recordOpts(kind...), recordOpts(kind...), addOpts(kind...)
	}
}

// histogram makes a float64 histogram in seconds with bounds.
func histogram(m metric.Meter, name string, bounds []float64, desc string) metric.Float64Histogram {
	h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(bounds...))
	if err != nil {
		otel.Handle(err)
	}
	if h == nil {
		return noop.Float64Histogram{}
	}
	return h
}

// counter makes an int64 counter.
func counter(m metric.Meter, name, unit, desc string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
	}
	if c == nil {
		return noop.Int64Counter{}
	}
	return c
}

// recordOpts returns the options that record with attrs.
func recordOpts(attrs ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
}

// addOpts returns the options that add with attrs.
func addOpts(attrs ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
}

// Round records the latency of every node of the round that replied.
func (o *observer) Round(info *redlock.RoundInfo) {
	if info.Op == redlock.OpHandoff || !o.node.Enabled(o.ctx) {
		return
	}
	for i := range info.Nodes {
		n := &info.Nodes[i]
		if n.Latency <= 0 {
			continue
		}
		var k int
		switch n.Status {
		case redlock.NodeOK:
			k = nodeOK
		case redlock.NodeRefused:
			k = nodeRefused
		case redlock.NodeFailed:
			k = nodeFailed
		default:
			continue
		}
		o.node.Record(o.ctx, n.Latency.Seconds(), o.nodeOpts(n.Addr, info.Op)[k]...)
	}
}

// nodeOpts returns the options of node addr in rounds of op, made the
// first time they are asked for.
func (o *observer) nodeOpts(addr string, op redlock.Op) *nodeOpts {
	k := nodeKey{addr, op}
	if opts := (*o.nodes.Load())[k]; opts != nil {
		return opts
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.nodes.Load()
	if opts := old[k]; opts != nil {
		return opts
	}
	opts := new(nodeOpts)
	for i, name := range nodeOutcomeNames {
		opts[i] = recordOpts(addressKey.String(addr), nodeOutcomeKey.String(name), operationKey.String(string(op)))
	}
	m := make(map[nodeKey]*nodeOpts, len(old)+1)
	for kk, v := range old {
		m[kk] = v
	}
	m[k] = opts
	o.nodes.Store(&m)
	return opts
}

// Event records the events of a lock's life and of the nodes.
func (o *observer) Event(e redlock.Event) {
	k := int(e.Lock)
	if k >= numKinds {
		k = 0
	}
	switch e.Kind {
	case redlock.EventAcquired:
		o.acquire.Record(o.ctx, e.Duration.Seconds(), o.acquireOpts[k][outcomeAcquired]...)
		if e.Wait > 0 {
			o.wait.Record(o.ctx, e.Wait.Seconds(), o.waitOpts[k]...)
		}
	case redlock.EventNotAcquired:
		o.acquire.Record(o.ctx, e.Duration.Seconds(), o.acquireOpts[k][acquireOutcome(e.Err)]...)
	case redlock.EventReleased:
		if e.Duration > 0 {
			o.held.Record(o.ctx, e.Duration.Seconds(), o.heldOpts[k]...)
		}
	case redlock.EventLost:
		o.lost.Add(o.ctx, 1, o.lostOpts[k][lostCause(e.Err)]...)
		if e.Duration > 0 {
			o.held.Record(o.ctx, e.Duration.Seconds(), o.heldOpts[k]...)
		}
	case redlock.EventExtendFailed:
		o.extend.Add(o.ctx, 1, o.extendOpts[k]...)
	case redlock.EventNodeReset:
		o.reset.Add(o.ctx, 1, addrOpts(&o.resetOpts, e.Node)...)
	case redlock.EventNodeExcluded:
		o.excluded.Add(o.ctx, 1, addrOpts(&o.excludedOpts, e.Node)...)
	}
}

// addrOpts returns the options that add with server.address addr, kept
// in cache.
func addrOpts(cache *sync.Map, addr string) []metric.AddOption {
	if v, ok := cache.Load(addr); ok {
		return v.([]metric.AddOption)
	}
	opts := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(addressKey.String(addr)))}
	v, _ := cache.LoadOrStore(addr, opts)
	return v.([]metric.AddOption)
}

// acquireOutcome classifies the error of a failed TryLock or Lock: the
// caller's context ended (or the Client was closed), the key is held on
// too many nodes, or anything else.
func acquireOutcome(err error) int {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pool.ErrClosed) {
		return outcomeCanceled
	}
	qe, ok := err.(*redlock.QuorumError)
	if !ok && !errors.As(err, &qe) {
		return outcomeUnreachable
	}
	if qe.Busy() {
		return outcomeBusy
	}
	return outcomeUnreachable
}

// lostCause classifies the cause a lost lock's context ended with.
func lostCause(err error) int {
	switch {
	case errors.Is(err, redlock.ErrExpired):
		return causeExpired
	case errors.Is(err, redlock.ErrLockLost):
		return causeLost
	}
	return causeOther
}
