package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/internal/redistest"
)

// The safety suite (docs/safety.md): workers on several Clients, and one
// worker subprocess, contend on a few keys while faults hit the nodes;
// every hold is recorded on the system-wide monotonic clock and checked
// for overlaps, the read-modify-write counters for lost updates, and the
// fenced register for stale writes.

// seedEnv names the environment variable that replays a run's schedule.
const seedEnv = "REDLOCK_FAULT_SEED"

// restartSafetyEnforced says whether the library already keeps a node
// that restarted empty out of its quorums for the longest TTL. Until it
// does, the test that relies on it is skipped.
const restartSafetyEnforced = true

// faultSeed returns the seed of a run: $REDLOCK_FAULT_SEED, or a new one.
// A failing test prints it.
func faultSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "$%s", seedEnv)
		seed = v
	}
	t.Logf("fault seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay the schedule with %s=%d", seedEnv, seed)
		}
	})
	return seed
}

// safetyCluster is five lock nodes, each behind a faults.Proxy, and a
// sixth node for the protected resource, which no fault touches.
type safetyCluster struct {
	nodes   []*redistest.Server
	proxies []*faults.Proxy
	addrs   []string // the proxies: what the clients use
	fnodes  []faults.Node
	store   *redistest.Server
}

func newSafetyCluster(t *testing.T, durable bool, seed int64) *safetyCluster {
	t.Helper()
	c := redistest.StartT(t, 5, redistest.Options{Durable: durable})
	sc := &safetyCluster{nodes: c.Nodes(), store: redistest.StartT(t, 1).Node(0)}
	for i, s := range sc.nodes {
		p, err := faults.NewProxy(s.Addr(), seed+int64(i))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close()) })
		sc.proxies = append(sc.proxies, p)
		sc.addrs = append(sc.addrs, p.Addr())
		sc.fnodes = append(sc.fnodes, faults.Node{Server: s, Proxy: p})
	}
	return sc
}

// scenario is one run of the safety suite.
type scenario struct {
	durable  bool          // nodes persist every write (AOF, fsync always)
	duration time.Duration // how long the workers run
	ttl      time.Duration
	hold     faults.Span   // between a holder's read and its write
	margin   time.Duration // validity a holder needs left to write
	keys     int           // key i is fenced when i is odd
	// The other kinds of lock, next to the keys' mutexes: a semaphore per
	// entry of sems (its permits), rws read-write locks, elections
	// elections. A worker's turn picks a kind, then a name of that kind.
	sems        []int
	rws         int
	elections   int
	clients     int       // in-process Clients
	workers     int       // workers per Client
	clockRates  []float64 // per Client; missing: the real clock
	nodeTimeout time.Duration
	unsafe      bool // WithRestartSafety(false)
	faults      []faults.Config
	subprocess  bool        // also run a worker subprocess
	subPauses   faults.Span // in the model: stop the subprocess this long now and then
	// pastValidity stops the subprocess right after its validity check,
	// for 1.5 TTLs: a holder paused past its validity (out of the model).
	pastValidity bool
	tryOnly      bool // workers use TryLock only
	foreign      bool // plant foreign keys and probe a key a foreign owner holds
	quiesce      bool // check the nodes for leftovers at the end
	// enough, when set, ends the run before its duration once it returns
	// true for the holds checked so far (checked every 250ms).
	enough func(c *faults.Checker) bool
	// progress, when set, logs the run's counts that often.
	progress time.Duration
}

// safetyReport is what a run found.
type safetyReport struct {
	seed            int64
	elapsed         time.Duration
	attempts        int
	acquired        int
	faults          faults.Stats
	overlaps        []faults.Overlap
	lateWrites      []faults.Overlap
	fenceInversions []faults.Overlap
	crowds          []faults.Crowd   // more holders of a semaphore than its permits
	termsTwice      []faults.Overlap // two holds of one key with one fence: two leaders of a term
	kinds           map[string]*kindReport
	increments      int64
	lostUpdates     int64
	fencedWrites    [3]int64
	staleAccepted   int64
	errKinds        map[string]int
	errSample       map[string]string
	foreignWon      int
	subPauses       int
	leftovers       []string
}

// kindReport is what a run found for one kind of lock.
type kindReport struct {
	attempts, acquired int
	reads              int // a read-write lock's shared holds
	permits            []int
	peak               []int // per semaphore: the most holders at once
	overlaps           int   // holds that overlapped an exclusive hold of their key
	lateWrites         int
	fenceInversions    int // fences (terms) not increasing in the order of the holds
	crowds             int // holds that began while every permit was held
	termsTwice         int
	shared             int // pairs of readers that held together
}

// String is the kind's line of the summary: what it did, then what its
// checkers found.
func (k *kindReport) String(kind string) string {
	did := fmt.Sprintf("%d of %d attempts", k.acquired, k.attempts)
	var found string
	switch kind {
	case kindSemaphore:
		did += fmt.Sprintf(" (permits %v, most held at once %v)", k.permits, k.peak)
		found = fmt.Sprintf("%d over the permits", k.crowds)
	case kindRW:
		did += fmt.Sprintf(" (%d reads, %d pairs of readers together)", k.reads, k.shared)
		found = fmt.Sprintf("%d overlapping a writer, %d late writes", k.overlaps, k.lateWrites)
	case kindElection:
		found = fmt.Sprintf("%d overlapping leaders, %d terms held twice, %d terms out of order, %d late writes",
			k.overlaps, k.termsTwice, k.fenceInversions, k.lateWrites)
	default:
		found = fmt.Sprintf("%d overlapping holds, %d late writes, %d fence inversions, %d fences held twice",
			k.overlaps, k.lateWrites, k.fenceInversions, k.termsTwice)
	}
	return fmt.Sprintf("%-10s %s; %s", kind, did, found)
}

// String is the run's summary, as make soak prints it.
func (r *safetyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v\n", r.seed, r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "  acquisitions:           %d of %d attempts (%.1f/s)\n", r.acquired, r.attempts, float64(r.acquired)/r.elapsed.Seconds())
	fmt.Fprintf(&b, "  faults injected:        %d (%v); worker process paused %d times\n", r.faults.Total(), r.faults, r.subPauses)
	fmt.Fprintf(&b, "  violations:             %d overlapping holds, %d late writes, %d fence inversions, %d over a semaphore's permits, %d fences (terms) held twice\n",
		len(r.overlaps), len(r.lateWrites), len(r.fenceInversions), len(r.crowds), len(r.termsTwice))
	for _, k := range lockKinds {
		if kr := r.kinds[k]; kr != nil && kr.attempts > 0 {
			fmt.Fprintf(&b, "    %s\n", kr.String(k))
		}
	}
	fmt.Fprintf(&b, "  lost updates:           %d of %d increments\n", r.lostUpdates, r.increments)
	fmt.Fprintf(&b, "  fenced writes:          %d accepted, %d refused, %d stale accepted\n",
		r.fencedWrites[faults.Accepted]+r.fencedWrites[faults.AcceptedStale], r.fencedWrites[faults.Refused], r.staleAccepted)
	fmt.Fprintf(&b, "  foreign lock taken:     %d; leftover keys: %d\n", r.foreignWon, len(r.leftovers))
	kinds := make([]string, 0, len(r.errKinds))
	for k := range r.errKinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	b.WriteString("  errors:")
	if len(kinds) == 0 {
		b.WriteString(" none")
	}
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n    %-34s %d", k, r.errKinds[k])
	}
	return b.String()
}

// foreignHeld is a lock key a foreign owner holds on every node for the
// whole run; foreignPlain are keys of other applications.
const foreignHeld = "lock:safety:foreign"

var foreignPlain = []string{"app:session:1", "app:cache:2", "lock:other-app:3"}

// plantForeign sets the foreign keys on node s, to expire at deadline.
func plantForeign(s *redistest.Server, deadline time.Time) error {
	if time.Until(deadline) < time.Millisecond {
		return errors.New("foreign keys ran out")
	}
	for _, k := range append([]string{foreignHeld}, foreignPlain...) {
		// An absolute expiry: however late the command runs, the key
		// expires at the deadline.
		if _, err := s.Do("SET", k, foreignToken, "PXAT", deadline.UnixMilli()); err != nil {
			return err
		}
	}
	return nil
}

// runSafety runs sc and returns what it found; it fails the test on a
// harness error, not on a violation (the caller decides).
func runSafety(t *testing.T, sc scenario) *safetyReport {
	t.Helper()
	seed := faultSeed(t)
	cl := newSafetyCluster(t, sc.durable, seed)
	rep := &safetyReport{seed: seed, errKinds: map[string]int{}}
	keys := make([]string, sc.keys)
	fenced := make([]bool, sc.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("lock:safety:%d:%d", seed, i)
		fenced[i] = i%2 == 1
	}
	var sems, rws, elections []string
	for i := range sc.sems {
		sems = append(sems, fmt.Sprintf("sem:safety:%d:%d", seed, i))
	}
	for i := range sc.rws {
		rws = append(rws, fmt.Sprintf("rw:safety:%d:%d", seed, i))
	}
	for i := range sc.elections {
		elections = append(elections, fmt.Sprintf("election:safety:%d:%d", seed, i))
	}
	foreignUntil := time.Now().Add(sc.duration + foreignTTL)
	var plantErr error
	var plantMu sync.Mutex
	if sc.foreign {
		for _, s := range cl.nodes {
			require.NoError(t, plantForeign(s, foreignUntil))
		}
	}
	checker := faults.NewChecker()
	tl := newTally()
	emit := func(worker string) func(workerEvent) {
		return func(ev workerEvent) {
			tl.event(worker, ev)
			if ev.Type == "hold" {
				who := worker
				switch {
				case ev.Perm > 0:
					who += " (" + ev.Store[strings.LastIndex(ev.Store, "}")+1:] + ")" // the permit's slot
				case ev.Lock == kindRW && ev.Read:
					who += " (reader)"
				case ev.Lock == kindRW:
					who += " (writer)"
				}
				checker.Add(faults.Hold{Key: ev.Key, Kind: ev.lockKind(), Worker: who, Shared: ev.Read, Permits: ev.Perm,
					Start: ev.Start, End: ev.End, Fence: ev.Fence, LastWrite: ev.Write})
			}
		}
	}
	spec := workerSpec{
		Addrs: cl.addrs, Store: cl.store.Addr(), Keys: keys, Fenced: fenced, TTL: sc.ttl,
		Sems: sems, Permits: sc.sems, RWs: rws, Elections: elections,
		Hold: sc.hold, Margin: sc.margin, Wait: 2 * time.Second, NodeTimeout: sc.nodeTimeout,
		MaxTTL: sc.ttl, Unsafe: sc.unsafe, TryOnly: sc.tryOnly, Durable: sc.durable, Duration: sc.duration, MaxHolds: 1_000_000,
	}

	// Faults.
	var injectors []*faults.Injector
	for i, fc := range sc.faults {
		fc.Seed = seed*31 + int64(i)
		if sc.foreign {
			fc.OnRestartEmpty = func(n int) {
				if err := plantForeign(cl.nodes[n], foreignUntil); err != nil {
					plantMu.Lock()
					plantErr = errors.Join(plantErr, err)
					plantMu.Unlock()
				}
			}
		}
		if fc.Kinds[0] == faults.ShrinkTTL {
			fc.Keys = keys
		}
		if os.Getenv("REDLOCK_FAULT_LOG") == "1" {
			fc.Logf = t.Logf
		}
		in, err := faults.Start(cl.fnodes, fc)
		require.NoError(t, err)
		injectors = append(injectors, in)
	}
	var harnessErr error
	stopFaults := func() {
		for _, in := range injectors {
			st, err := in.Stop()
			harnessErr = errors.Join(harnessErr, err)
			if rep.faults.Injected == nil {
				rep.faults.Injected = map[faults.Kind]int{}
			}
			for k, v := range st.Injected {
				rep.faults.Injected[k] += v
			}
		}
		injectors = nil
	}
	t.Cleanup(func() {
		if injectors != nil {
			stopFaults()
		}
	})

	start := time.Now()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// In-process workers.
	for c := range sc.clients {
		s := spec
		s.Name = fmt.Sprintf("client%d", c)
		if c < len(sc.clockRates) {
			s.ClockRate = sc.clockRates[c]
		}
		client, clk, closeClient, err := newWorkerClient(s)
		require.NoError(t, err)
		store := faults.NewStore(s.Store)
		for w := range sc.workers {
			wk := &worker{spec: s, client: client, clk: clk, store: store,
				rng: rand.New(rand.NewSource(seed + int64(100*c+w))), emit: emit(fmt.Sprintf("%s/w%d", s.Name, w))}
			wg.Add(1)
			go func() {
				defer wg.Done()
				wk.run(ctx)
			}()
		}
		defer func() { closeClient(); store.Close() }()
	}

	// The worker subprocess, and what stops it.
	var sub *subprocess
	var subWG sync.WaitGroup
	if sc.subprocess {
		s := spec
		s.Name, s.Seed, s.Announce = "process", seed+7, sc.pastValidity
		sub = startWorkerProcess(t, s)
		pauses := make(chan struct{}, 1)
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			var last time.Time
			lastFenced := -1 // the pauses alternate between fenced and plain keys
			rec := emit("process")
			for ev := range sub.events {
				rec(ev)
				f := 0
				if i := slices.Index(keys, ev.Key); i >= 0 && fenced[i] {
					f = 1
				}
				if ev.Type == "checked" && sc.pastValidity && time.Since(last) > 2*sc.ttl && f != lastFenced {
					// Stop it between its validity check and its write,
					// for longer than the lock's whole TTL.
					last, lastFenced = time.Now(), f
					sub.pause()
					rep.subPauses++
					time.AfterFunc(sc.ttl*3/2, func() { sub.resume(); pauses <- struct{}{} })
					<-pauses
				}
			}
		}()
		if sc.subPauses != (faults.Span{}) {
			rng := rand.New(rand.NewSource(seed + 11))
			subWG.Add(1)
			go func() {
				defer subWG.Done()
				for n := 0; n < 100_000 && ctx.Err() == nil && time.Since(start) < sc.duration; n++ {
					sleepCtx(ctx, time.Duration(50+rng.Intn(150))*time.Millisecond)
					sub.pause()
					rep.subPauses++
					time.Sleep(sc.subPauses.Draw(rng))
					sub.resume()
				}
			}()
		}
	}

	// A client that now and then tries the key a foreign owner holds.
	if sc.foreign {
		s := spec
		client, _, closeClient, err := newWorkerClient(s)
		require.NoError(t, err)
		defer closeClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100_000 && ctx.Err() == nil && time.Since(start) < sc.duration; n++ {
				if l, err := client.TryLock(ctx, foreignHeld, sc.ttl); err == nil {
					tl.mu.Lock()
					tl.foreignWon++
					tl.mu.Unlock()
					_ = l.Unlock(context.Background())
				}
				sleepCtx(ctx, 20*time.Millisecond)
			}
		}()
	}

	if sc.progress > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100_000 && ctx.Err() == nil && time.Since(start) < sc.duration; n++ {
				sleepCtx(ctx, min(sc.progress, time.Until(start.Add(sc.duration))))
				tl.mu.Lock()
				acquired, attempts := tl.acquired, tl.attempts
				tl.mu.Unlock()
				t.Logf("%v: %d acquisitions of %d attempts, %d overlapping holds and %d over a semaphore's permits so far",
					time.Since(start).Round(time.Second), acquired, attempts, len(checker.Overlaps()), len(checker.Crowds()))
			}
		}()
	}
	if sc.enough != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100_000 && ctx.Err() == nil && time.Since(start) < sc.duration; n++ {
				sleepCtx(ctx, 250*time.Millisecond)
				if sc.enough(checker) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	stopFaults()
	if sub != nil {
		harnessErr = errors.Join(harnessErr, sub.stop())
		subWG.Wait()
	}
	rep.elapsed = time.Since(start)
	plantMu.Lock()
	require.NoError(t, plantErr)
	plantMu.Unlock()

	// What the run did.
	store := faults.NewStore(cl.store.Addr())
	defer store.Close()
	tl.mu.Lock()
	rep.attempts, rep.acquired, rep.foreignWon = tl.attempts, tl.acquired, tl.foreignWon
	rep.fencedWrites = tl.fenced
	for k, v := range tl.errKinds {
		rep.errKinds[k] = v
	}
	rep.errSample = tl.errSample
	// The resource's keys: the mutexes' keys, and the keys the other
	// kinds wrote to (semaphore slots, writer keys, election keys).
	storeKeys := slices.Clone(keys)
	for k := range tl.increments {
		if !slices.Contains(storeKeys, k) {
			storeKeys = append(storeKeys, k)
		}
	}
	for _, k := range storeKeys {
		rep.increments += tl.increments[k]
		n, err := store.Read(k)
		require.NoError(t, err)
		rep.lostUpdates += tl.increments[k] - n
		if reg, err := store.Register(k); err == nil {
			rep.staleAccepted += reg.Stale
		}
	}
	tokens := tl.tokens
	rep.kinds = map[string]*kindReport{}
	for k, kt := range tl.byKind {
		rep.kinds[k] = &kindReport{attempts: kt.attempts, acquired: kt.acquired, reads: kt.reads}
	}
	rep.kinds[kindSemaphore].permits = sc.sems
	tl.mu.Unlock()
	rep.check(checker)
	for _, name := range sems {
		rep.kinds[kindSemaphore].peak = append(rep.kinds[kindSemaphore].peak, checker.Peak(name))
	}
	require.Equal(t, rep.acquired, checker.Len())

	if sc.quiesce {
		// Every lock has run out or been released by now, whatever the
		// faults did to its Unlock.
		time.Sleep(sc.ttl + 200*time.Millisecond)
		rep.leftovers = leftovers(t, cl.nodes, keys, tokens, sc.foreign, foreignUntil)
	}
	t.Logf("%s", rep)
	for k, v := range rep.errSample {
		t.Logf("%s, e.g. %s", k, v)
	}
	// After the summary, so that a long run's figures are not lost.
	require.NoError(t, harnessErr, "the harness failed")
	logSome(t, "overlap", rep.overlaps)
	logSome(t, "over the permits", rep.crowds)
	logSome(t, "term held twice", rep.termsTwice)
	logSome(t, "fence inversion", rep.fenceInversions)
	return rep
}

// logSome logs the first five of what, one a line.
func logSome[T fmt.Stringer](t *testing.T, what string, vs []T) {
	t.Helper()
	for i, v := range vs {
		if i == 5 {
			t.Logf("... %d more (%s)", len(vs)-i, what)
			break
		}
		t.Logf("%s: %v", what, v)
	}
}

// check runs the checkers on the run's holds and counts what they found
// per kind of lock (the kind of the later hold of a pair).
func (r *safetyReport) check(c *faults.Checker) {
	r.overlaps = c.Overlaps()
	r.lateWrites = c.LateWrites()
	r.fenceInversions = c.FenceInversions()
	r.crowds = c.Crowds()
	r.termsTwice = c.TermsHeldTwice()
	for _, o := range r.overlaps {
		r.kinds[o.B.Kind].overlaps++
	}
	for _, o := range r.lateWrites {
		r.kinds[o.A.Kind].lateWrites++
	}
	for _, o := range r.fenceInversions {
		r.kinds[o.B.Kind].fenceInversions++
	}
	for _, cr := range r.crowds {
		r.kinds[cr.Holds[0].Kind].crowds++
	}
	for _, o := range r.termsTwice {
		r.kinds[o.B.Kind].termsTwice++
	}
	r.kinds[kindRW].shared = c.SharedOverlaps()
}

// soakEnv names the environment variable that sets the duration of the
// soak run (make soak), e.g. REDLOCK_SOAK=30m; without it the soak test
// is skipped.
const soakEnv = "REDLOCK_SOAK"

// The soak: the in-model run, for as long as $REDLOCK_SOAK says, on more
// keys and workers. It prints the run's summary (acquisitions, faults by
// kind, violations, lost updates, stale writes, error kinds) and fails on
// any violation.
func TestSafety_soak(t *testing.T) {
	v := os.Getenv(soakEnv)
	if v == "" {
		t.Skipf("set %s to a duration (make soak) to run the soak", soakEnv)
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "$%s", soakEnv)
	sc := inModel(d)
	sc.keys, sc.sems, sc.rws, sc.elections, sc.clients, sc.workers = 8, []int{2, 3}, 2, 2, 4, 4
	sc.progress = time.Minute
	rep := runSafety(t, sc)
	fmt.Printf("soak summary:\n%s\n", rep)
	requireNoViolations(t, rep)
}

// leftovers scans every node for our lock keys, keys that hold one of our
// tokens, and foreign keys that were changed; it returns what it found.
func leftovers(t *testing.T, nodes []*redistest.Server, keys []string, tokens map[string]bool, foreign bool, foreignUntil time.Time) []string {
	t.Helper()
	var out []string
	for i, s := range nodes {
		cursor := "0"
		for n := 0; n < 10_000; n++ { // bounded; the cursor comes back to 0 first
			vs, err := redis.Values(s.Do("SCAN", cursor, "COUNT", 1000))
			require.NoError(t, err)
			cursor, _ = redis.String(vs[0], nil)
			names, _ := redis.Strings(vs[1], nil)
			for _, k := range names {
				typ, err := redis.String(s.Do("TYPE", k))
				require.NoError(t, err)
				if typ != "string" {
					continue
				}
				v, err := redis.String(s.Do("GET", k))
				if errors.Is(err, redis.ErrNil) {
					continue // expired meanwhile
				}
				require.NoError(t, err)
				switch {
				case tokens[v]:
					out = append(out, fmt.Sprintf("node %d: %s holds one of our tokens", i, k))
				case slices.Contains(keys, k):
					out = append(out, fmt.Sprintf("node %d: lock key %s left with %q", i, k, v))
				}
			}
			if cursor == "0" {
				break
			}
		}
		if !foreign {
			continue
		}
		for _, k := range append([]string{foreignHeld}, foreignPlain...) {
			v, err := redis.String(s.Do("GET", k))
			ttl, _ := redis.Int64(s.Do("PTTL", k))
			left := time.Until(foreignUntil).Milliseconds()
			if err != nil || v != foreignToken || ttl <= 0 || ttl > left+50 {
				out = append(out, fmt.Sprintf("node %d: foreign key %s changed: %q (%v), ttl %dms of %dms", i, k, v, err, ttl, left))
			}
		}
	}
	return out
}

// inModel is the in-model scenario of duration d: the four kinds of lock
// (4 mutex keys, a semaphore of 2 permits, a read-write lock and an
// election); at most 2 of 5 nodes faulty at once, with every in-model
// kind of fault, on durable nodes; a
// client clock 0.5% fast and one 0.5% slow (the drift allowance is 1%);
// the worker subprocess paused for up to 40ms now and then.
func inModel(d time.Duration) scenario {
	ttl := time.Second
	return scenario{
		durable: true, duration: d, ttl: ttl,
		hold: faults.Span{Min: time.Millisecond, Max: 15 * time.Millisecond}, margin: 300 * time.Millisecond,
		keys: 4, sems: []int{2}, rws: 1, elections: 1, clients: 3, workers: 3, clockRates: []float64{1.005, 0.995},
		nodeTimeout: 150 * time.Millisecond,
		faults: []faults.Config{{
			Kinds: faults.InModel(), MaxFaulty: 2, MaxTTL: ttl, Exclusion: ttl + 100*time.Millisecond,
			Gap:     faults.Span{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond},
			Hold:    faults.Span{Min: 50 * time.Millisecond, Max: 400 * time.Millisecond},
			Latency: faults.Span{Min: 20 * time.Millisecond, Max: 400 * time.Millisecond},
		}},
		subprocess: true, subPauses: faults.Span{Min: 5 * time.Millisecond, Max: 40 * time.Millisecond},
		foreign: true, quiesce: true,
	}
}

// requireNoViolations fails the test on any violation in rep.
func requireNoViolations(t *testing.T, rep *safetyReport) {
	t.Helper()
	require.Empty(t, rep.overlaps, "overlapping holds")
	require.Empty(t, rep.lateWrites, "late writes")
	require.Empty(t, rep.fenceInversions, "fences (terms) out of acquisition order")
	require.Empty(t, rep.crowds, "more holders of a semaphore than its permits")
	require.Empty(t, rep.termsTwice, "two holds of one fence (two leaders of one term)")
	require.Zero(t, rep.lostUpdates, "lost updates")
	require.Zero(t, rep.staleAccepted, "stale writes accepted")
	require.Zero(t, rep.foreignWon, "a foreign owner's lock was taken")
	require.Empty(t, rep.leftovers, "leftovers after quiescing")
}

// In the model, nothing goes wrong.
func TestSafety_inModelFaultsCauseNoViolation(t *testing.T) {
	rep := runSafety(t, inModel(15*time.Second))
	requireNoViolations(t, rep)
	// Far below a run on an idle machine (900-1200 acquisitions under
	// -race; 137 on a machine running a soak and two other suites): the
	// run did work, even on a busy machine.
	require.Greater(t, rep.acquired, 50, "the run did work")
	require.Greater(t, rep.increments, int64(40))
	require.Greater(t, rep.fencedWrites[faults.Accepted], int64(15))
	require.Greater(t, rep.faults.Total(), 30)
	require.Greater(t, rep.subPauses, 10)
}

// outOfModelRestarts restarts one or two nodes empty at once, about twice
// a second, while holds of 3 mutex keys last 100-400ms.
func outOfModelRestarts(unsafe bool) scenario {
	ttl := time.Second
	return scenario{
		duration: 6 * time.Second, ttl: ttl,
		hold: faults.Span{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond}, margin: 50 * time.Millisecond,
		keys: 3, clients: 3, workers: 2, nodeTimeout: 150 * time.Millisecond, unsafe: unsafe, tryOnly: true,
		faults: []faults.Config{{
			Kinds: []faults.Kind{faults.RestartEmpty}, MaxFaulty: 2,
			Gap: faults.Span{Min: 150 * time.Millisecond, Max: 350 * time.Millisecond},
		}},
	}
}

// Out of the model: nodes that forget the locks they granted. The checker
// sees holds overlap; the fenced register accepts no stale write.
func TestSafety_nodesRestartedEmptyAtOnceBreakExclusionWithoutRestartSafety(t *testing.T) {
	sc := outOfModelRestarts(true)
	sc.duration = 20 * time.Second // at most; usually a few seconds
	sc.enough = func(c *faults.Checker) bool { return len(c.Overlaps()) >= 5 }
	rep := runSafety(t, sc)
	require.NotEmpty(t, rep.overlaps, "the checker must see the overlaps of nodes that forget")
	require.Zero(t, rep.staleAccepted, "stale writes accepted")
	require.Greater(t, rep.fencedWrites[faults.Accepted], int64(0))
}

// The same faults with restart safety on: a node that came back empty is
// not counted until the longest TTL has passed, and nothing overlaps: no
// mutex, no writer, no semaphore over its permits.
// Fences may go backwards, though: a fence counter has no TTL to wait
// out, and once every node of some quorum has come back empty since the
// last fenced acquisition of a key, its counter is gone (each node here
// restarts every 1-2s). The fenced register then refuses the lower
// fences: it still accepts no stale write.
func TestSafety_nodesRestartedEmptyAtOnceAreWaitedOutWithRestartSafety(t *testing.T) {
	if !restartSafetyEnforced {
		t.Skip("restart safety not enforced yet")
	}
	sc := outOfModelRestarts(false)
	sc.sems, sc.rws = []int{2}, 1
	rep := runSafety(t, sc)
	require.Empty(t, rep.overlaps, "overlapping holds")
	require.Empty(t, rep.crowds, "more holders of a semaphore than its permits")
	require.Zero(t, rep.lostUpdates, "lost updates")
	require.Zero(t, rep.staleAccepted, "stale writes accepted")
	require.Greater(t, rep.acquired, 5, "the run did work")
	t.Logf("%d fence inversions after nodes lost their counters", len(rep.fenceInversions))
}

// Out of the model: one node's clock runs fast (its lock keys expire at a
// tenth of their TTL) while nodes 1 and 2, or 3 and 4, are black-holed in
// turn, so that a lock is granted by that node and one pair, and the
// other pair answers later. The checker sees holds overlap; the fenced register
// accepts no stale write.
func TestSafety_aNodeWhoseKeysExpireEarlyBreaksExclusion(t *testing.T) {
	ttl := 500 * time.Millisecond
	d := 25 * time.Second // at most; usually a few seconds
	rep := runSafety(t, scenario{
		duration: d, ttl: ttl,
		hold: faults.Span{Min: 100 * time.Millisecond, Max: 300 * time.Millisecond}, margin: 50 * time.Millisecond,
		keys: 4, clients: 3, workers: 2, nodeTimeout: 150 * time.Millisecond, tryOnly: true,
		faults: []faults.Config{
			{Kinds: []faults.Kind{faults.ShrinkTTL}, Nodes: []int{0}, Hold: faults.Span{Min: 2 * d, Max: 2 * d}, Gap: faults.Span{Min: time.Millisecond}},
			{Kinds: []faults.Kind{faults.Hole}, Groups: [][]int{{1, 2}, {3, 4}}, MaxFaulty: 2,
				Gap:  faults.Span{Min: time.Millisecond, Max: 10 * time.Millisecond},
				Hold: faults.Span{Min: 50 * time.Millisecond, Max: 150 * time.Millisecond}},
		},
		enough: func(c *faults.Checker) bool { return len(c.Overlaps()) >= 3 },
	})
	require.NotEmpty(t, rep.overlaps, "the checker must see the overlaps of a node whose keys expire early")
	require.Zero(t, rep.staleAccepted, "stale writes accepted")
}

// Out of the model: the worker subprocess is stopped between its validity
// check and its write, for longer than the TTL, while the others take the
// key. Its windows stay within its validity, but its writes land in
// others' holds: the checker sees late writes and the counter lost
// updates; the fenced register refuses the stale writes.
func TestSafety_aHolderPausedPastItsValidityWritesLate(t *testing.T) {
	ttl := 300 * time.Millisecond
	rep := runSafety(t, scenario{
		duration: 5 * time.Second, ttl: ttl,
		hold: faults.Span{Min: time.Millisecond, Max: 10 * time.Millisecond}, margin: 50 * time.Millisecond,
		keys: 2, clients: 2, workers: 2, nodeTimeout: 150 * time.Millisecond,
		subprocess: true, pastValidity: true,
	})
	require.Greater(t, rep.subPauses, 2)
	require.Empty(t, rep.overlaps, "validity windows do not overlap: the pause came after the check")
	require.NotEmpty(t, rep.lateWrites, "the checker must see the paused holder's late writes")
	require.Greater(t, rep.lostUpdates, int64(0), "late writes lose updates")
	require.Zero(t, rep.staleAccepted, "stale writes accepted")
	require.Greater(t, rep.fencedWrites[faults.Refused], int64(0), "the register refused the late fenced writes")
}

// Out of the model: one Client's clock runs 30% slow, far beyond the 1%
// drift allowance, so it believes its locks valid for longer than the
// nodes keep them. Its workers hold until their validity is nearly gone;
// the others take the key once the nodes let it go. The checker sees
// holds overlap; the fenced register accepts no stale write.
func TestSafety_aClientClockRunningSlowBreaksExclusion(t *testing.T) {
	rep := runSafety(t, slowClock())
	require.NotEmpty(t, rep.overlaps, "the checker must see the overlaps of a client whose clock runs slow")
	require.Zero(t, rep.staleAccepted, "stale writes accepted")
}

// slowClock is the scenario of a Client whose clock runs 30% slow, on two
// mutex keys, until the checker saw 3 overlaps (at most 20s).
func slowClock() scenario {
	ttl := 400 * time.Millisecond
	return scenario{
		duration: 20 * time.Second, ttl: ttl, // at most; usually a few seconds
		hold: faults.Span{Min: 300 * time.Millisecond, Max: 500 * time.Millisecond}, margin: 10 * time.Millisecond,
		keys: 2, clients: 3, workers: 2, clockRates: []float64{0.7}, nodeTimeout: 150 * time.Millisecond,
		enough: func(c *faults.Checker) bool { return len(c.Overlaps()) >= 3 },
	}
}

// The same, on a semaphore of two permits and a read-write lock instead of
// the keys: the slow Client's holders keep their permits, and its readers
// and writers their holds, after the nodes let them go; others take them,
// and the checker sees more holders than permits, and a writer together
// with another holder.
func TestSafety_aClientClockRunningSlowOverfillsASemaphoreAndLetsWritersIn(t *testing.T) {
	sc := slowClock()
	sc.keys, sc.sems, sc.rws = 0, []int{2}, 1
	sc.enough = func(c *faults.Checker) bool { return len(c.Crowds()) > 0 && len(c.Overlaps()) > 0 }
	rep := runSafety(t, sc)
	require.NotEmpty(t, rep.crowds, "the checker must see the semaphore over its permits")
	require.NotZero(t, rep.kinds[kindRW].overlaps, "the checker must see a writer together with another holder")
}
