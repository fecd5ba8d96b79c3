package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// The workload of the safety suite: workers that take a few keys in turn,
// do a read-modify-write under each lock, and record every hold. The same
// code runs in goroutines of the test and in worker subprocesses (the test
// binary run again with workerEnv set), which the schedule can stop with
// SIGSTOP as a GC pause or a swapped-out process would.

// workerEnv names the environment variable that makes the test binary a
// worker subprocess; its value is the workerSpec as JSON.
const workerEnv = "REDLOCK_SAFETY_WORKER"

// workerSpec is what a worker needs, in-process or in a subprocess.
type workerSpec struct {
	Name   string   `json:"name"`
	Addrs  []string `json:"addrs"` // the nodes (their proxies)
	Store  string   `json:"store"` // the resource's node
	Keys   []string `json:"keys"`
	Fenced []bool   `json:"fenced"` // per key: acquire WithFencing and write to the fenced register
	// The other kinds of lock the worker takes besides the keys' mutexes:
	// each turn picks a kind, then a name of that kind.
	Sems        []string      `json:"sems"`      // semaphore names
	Permits     []int         `json:"permits"`   // per semaphore
	RWs         []string      `json:"rws"`       // read-write lock names
	Elections   []string      `json:"elections"` // election names
	TTL         time.Duration `json:"ttl"`
	Hold        faults.Span   `json:"hold"`   // time between the read and the write
	Margin      time.Duration `json:"margin"` // validity needed left to write
	Wait        time.Duration `json:"wait"`   // how long one Lock may wait
	Seed        int64         `json:"seed"`
	ClockRate   float64       `json:"clockRate"` // 0 or 1: the real clock
	NodeTimeout time.Duration `json:"nodeTimeout"`
	MaxTTL      time.Duration `json:"maxTTL"`
	Unsafe      bool          `json:"unsafe"`  // WithRestartSafety(false)
	Durable     bool          `json:"durable"` // WithDurableNodes
	TryOnly     bool          `json:"tryOnly"` // TryLock only, no waiting Lock
	Duration    time.Duration `json:"duration"`
	MaxHolds    int           `json:"maxHolds"`
	// Announce makes the worker report "checked" after its validity check
	// and wait a moment before writing, so that the parent can stop it
	// right there: a holder paused past its validity.
	Announce bool `json:"announce"`
	// HoldOnce makes the worker take Keys[0] once and keep it until it is
	// killed: the holder that dies.
	HoldOnce bool `json:"holdOnce"`
}

// workerEvent is one line a worker subprocess writes to its parent.
type workerEvent struct {
	Type  string        `json:"t"` // "hold", "err", "checked", "holding"
	Key   string        `json:"k,omitempty"`
	Start time.Duration `json:"s,omitempty"`
	End   time.Duration `json:"e,omitempty"`
	Fence uint64        `json:"f,omitempty"`
	Write time.Duration `json:"w,omitempty"` // last write, 0 when none
	Incr  int           `json:"i,omitempty"` // counter increments made
	Res   int           `json:"r,omitempty"` // fenced write result + 1, 0 when none
	Token string        `json:"tok,omitempty"`
	Kind  string        `json:"kind,omitempty"` // error kind
	Msg   string        `json:"msg,omitempty"`  // error text
	Lock  string        `json:"lk,omitempty"`   // the kind of lock: mutex (empty), semaphore, rwlock, election
	Store string        `json:"st,omitempty"`   // the resource's key written, when not Key
	Read  bool          `json:"rd,omitempty"`   // a reader's hold
	Perm  int           `json:"p,omitempty"`    // the semaphore's permits
}

// lockKind is the kind of lock of ev, for reports.
func (ev workerEvent) lockKind() string {
	if ev.Lock == "" {
		return kindMutex
	}
	return ev.Lock
}

// storeKey is the resource's key ev's hold wrote to.
func (ev workerEvent) storeKey() string {
	if ev.Store != "" {
		return ev.Store
	}
	return ev.Key
}

// The kinds of lock, as reports name them.
const (
	kindMutex     = "mutex"
	kindSemaphore = "semaphore"
	kindRW        = "rwlock"
	kindElection  = "election"
)

var lockKinds = []string{kindMutex, kindSemaphore, kindRW, kindElection}

// tally is what the workers of a run counted.
type tally struct {
	mu         sync.Mutex
	attempts   int
	acquired   int
	byKind     map[string]*kindTally
	increments map[string]int64 // by the resource's key
	fenced     [3]int64         // by faults.WriteResult
	errKinds   map[string]int
	errSample  map[string]string // an error of each kind, with its worker
	tokens     map[string]bool
	foreignWon int // acquisitions of a key a foreign owner holds
}

func newTally() *tally {
	t := &tally{byKind: map[string]*kindTally{}, increments: map[string]int64{}, errKinds: map[string]int{}, errSample: map[string]string{}, tokens: map[string]bool{}}
	for _, k := range lockKinds {
		t.byKind[k] = &kindTally{}
	}
	return t
}

// kindTally is what the workers counted for one kind of lock.
type kindTally struct {
	attempts, acquired int
	reads              int // a read-write lock's shared holds
}

func (t *tally) event(worker string, ev workerEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kt := t.byKind[ev.lockKind()]
	switch ev.Type {
	case "hold":
		t.acquired++
		t.attempts++
		kt.acquired++
		kt.attempts++
		if ev.Read {
			kt.reads++
		}
		t.increments[ev.storeKey()] += int64(ev.Incr)
		if ev.Res > 0 {
			t.fenced[ev.Res-1]++
		}
		if ev.Token != "" {
			t.tokens[ev.Token] = true
		}
	case "err":
		if strings.HasPrefix(ev.Kind, "acquire") {
			t.attempts++
			kt.attempts++
		}
		t.errKinds[ev.Kind]++
		if _, ok := t.errSample[ev.Kind]; !ok {
			t.errSample[ev.Kind] = worker + ": " + ev.Msg
		}
	}
}

// errKind names the kind of a failed call for the run's report.
func errKind(op string, err error) string {
	var qe *redlock.QuorumError
	switch {
	case errors.As(err, &qe):
		switch {
		case qe.Cause != nil:
			return op + ": waited too long"
		case qe.Busy():
			return op + ": busy"
		case qe.Count(redlock.NodeOK) >= qe.Quorum:
			return op + ": too little validity"
		case qe.Op == "fence":
			return op + ": fence write-back"
		case errors.Is(err, redlock.ErrLockLost):
			return op + ": lost"
		}
		return op + ": nodes failed"
	case errors.Is(err, context.DeadlineExceeded):
		return op + ": waited too long"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return op + ": " + s
}

// worker runs one workerSpec until ctx ends, the spec's duration passes or
// it made MaxHolds holds. emit receives every event.
type worker struct {
	spec   workerSpec
	client *redlock.Client
	clk    *faults.Clock
	store  *faults.Store
	rng    *rand.Rand
	emit   func(workerEvent)
}

// newWorkerClient makes the pools and the Client of spec; close releases them.
func newWorkerClient(spec workerSpec) (c *redlock.Client, clk *faults.Clock, close func(), err error) {
	var nodes []*pool.Node
	var pools []pool.Pool
	closePools := func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}
	for _, a := range spec.Addrs {
		p, err := pool.New(a, pool.WithIOTimeout(testReadTimeout))
		if err != nil {
			closePools()
			return nil, nil, nil, err
		}
		nodes, pools = append(nodes, p), append(pools, p)
	}
	rate := spec.ClockRate
	if rate == 0 {
		rate = 1
	}
	clk = faults.NewClock(rate)
	opts := []redlock.Option{
		redlock.WithNodeTimeout(spec.NodeTimeout),
		redlock.WithClock(clk),
	}
	switch {
	case spec.Unsafe:
		opts = append(opts, redlock.WithRestartSafety(0))
	case spec.MaxTTL > 0:
		opts = append(opts, redlock.WithRestartSafety(spec.MaxTTL))
	}
	if spec.Durable {
		opts = append(opts, redlock.WithDurableNodes())
	}
	c, err = redlock.New(pools, opts...)
	if err != nil {
		closePools()
		return nil, nil, nil, err
	}
	return c, clk, func() { _ = c.Close(); closePools() }, nil
}

// run is the worker's loop.
func (w *worker) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.spec.Duration)
	defer cancel()
	for n := 0; n < w.spec.MaxHolds && ctx.Err() == nil; n++ {
		w.once(ctx)
	}
}

// realValidity is the validity left on l, in real time.
func (w *worker) realValidity(l *redlock.Lock) time.Duration {
	return w.clk.RealDuration(l.Validity())
}

// turn is one hold a worker takes: the kind of lock, the checker's key,
// and how the hold is taken and used.
type turn struct {
	kind    string
	key     string // the checker's key: the mutex's key, or the kind's name
	fenced  bool   // write the fenced register with the lock's fence (an election's term)
	read    bool   // a reader's hold: it reads the counter and writes nothing
	permits int    // a semaphore's permits
	take    func(ctx context.Context) (*redlock.Lock, error)
}

// kinds returns the kinds of lock the worker's spec has names for.
func (w *worker) kinds() []string {
	var out []string
	for _, k := range []struct {
		kind string
		n    int
	}{{kindMutex, len(w.spec.Keys)}, {kindSemaphore, len(w.spec.Sems)}, {kindRW, len(w.spec.RWs)}, {kindElection, len(w.spec.Elections)}} {
		if k.n > 0 {
			out = append(out, k.kind)
		}
	}
	return out
}

// pick draws the worker's next turn: a kind, a name of that kind, and
// whether it waits (Lock) or tries once (TryLock). A spec with only keys
// draws what it drew before there were other kinds.
func (w *worker) pick() turn {
	kind := kindMutex
	switch ks := w.kinds(); {
	case len(ks) == 1:
		kind = ks[0]
	case len(ks) > 1:
		kind = ks[w.rng.Intn(len(ks))]
	}
	switch kind {
	case kindSemaphore:
		i := w.rng.Intn(len(w.spec.Sems))
		sem := w.client.Semaphore(w.spec.Sems[i], w.spec.Permits[i])
		take := sem.Acquire
		if w.rng.Intn(4) == 0 || w.spec.TryOnly {
			take = sem.TryAcquire
		}
		return turn{kind: kind, key: sem.Name(), permits: sem.Permits(),
			take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, w.spec.TTL) }}
	case kindRW:
		rw := w.client.RWLock(w.spec.RWs[w.rng.Intn(len(w.spec.RWs))])
		read, try := w.rng.Intn(2) == 0, w.rng.Intn(4) == 0 || w.spec.TryOnly
		take := rw.Lock
		switch {
		case read && try:
			take = rw.TryRLock
		case read:
			take = rw.RLock
		case try:
			take = rw.TryLock
		}
		return turn{kind: kind, key: rw.Name(), read: read,
			take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, w.spec.TTL) }}
	case kindElection:
		e := w.client.Election(w.spec.Elections[w.rng.Intn(len(w.spec.Elections))])
		return turn{kind: kind, key: e.Name(), fenced: true,
			take: func(ctx context.Context) (*redlock.Lock, error) { return e.Campaign(ctx, w.spec.Name, w.spec.TTL) }}
	}
	i := w.rng.Intn(len(w.spec.Keys))
	key, fenced := w.spec.Keys[i], w.spec.Fenced[i]
	var opts []redlock.LockOption
	if fenced {
		opts = append(opts, redlock.WithFencing())
	}
	take := w.client.Lock
	if w.rng.Intn(4) == 0 || w.spec.TryOnly {
		take = w.client.TryLock
	}
	return turn{kind: kindMutex, key: key, fenced: fenced,
		take: func(ctx context.Context) (*redlock.Lock, error) { return take(ctx, key, w.spec.TTL, opts...) }}
}

// once takes a lock of a random kind and name; unless it is a reader's,
// it reads the resource's counter, waits, and writes it plus one if the
// lock still has Margin of validity; then it releases. The counter is the
// lock key's (a semaphore's: its permit's slot, each a mutex; a
// read-write lock's: its writer key).
func (w *worker) once(ctx context.Context) {
	t := w.pick()
	hold := w.spec.Hold.Draw(w.rng)
	extend := w.rng.Intn(5) == 0 && t.kind != kindElection // a leader extends itself
	lctx, cancel := context.WithTimeout(ctx, w.spec.Wait)
	defer cancel()
	l, err := t.take(lctx)
	lk := t.kind
	if lk == kindMutex {
		lk = ""
	}
	if err != nil {
		if ctx.Err() == nil { // the end of the run is no error
			w.emit(workerEvent{Type: "err", Lock: lk, Kind: errKind(strings.TrimSpace("acquire "+lk), err), Msg: err.Error()})
			// A TryLock that found the key busy tries again a little later.
			sleepCtx(ctx, time.Duration(1+w.rng.Intn(5))*time.Millisecond)
		}
		return
	}
	start := faults.Mono()
	end := start + w.realValidity(l)
	ev := workerEvent{Type: "hold", Key: t.key, Start: start, Fence: l.Fence(), Token: l.Token(), Lock: lk, Read: t.read, Perm: t.permits}
	if l.Key() != t.key {
		ev.Store = l.Key()
	}
	bg := context.WithoutCancel(ctx)
	v, rerr := w.store.Read(ev.storeKey())
	sleepCtx(bg, hold)
	if extend {
		if err := l.Extend(bg, w.spec.TTL); err != nil {
			w.emit(workerEvent{Type: "err", Lock: lk, Kind: errKind("extend", err), Msg: err.Error()})
		} else {
			end = max(end, faults.Mono()+w.realValidity(l))
		}
	}
	if rerr == nil && !t.read && w.realValidity(l) > w.spec.Margin {
		w.write(&ev, l, t.fenced, v+1)
	}
	release := faults.Mono()
	if t.kind == kindElection {
		// What the leader's extensions gave it.
		end = max(end, release+w.realValidity(l))
	}
	ev.End = min(end, release)
	if err := l.Unlock(bg); err != nil {
		w.emit(workerEvent{Type: "err", Lock: lk, Kind: errKind("unlock", err), Msg: err.Error()})
	}
	w.emit(ev)
}

// write writes v to the hold's counter, and to its fenced register when
// fenced, and records both in ev.
func (w *worker) write(ev *workerEvent, l *redlock.Lock, fenced bool, v int64) {
	if w.spec.Announce {
		w.emit(workerEvent{Type: "checked", Key: ev.Key})
		time.Sleep(20 * time.Millisecond) // the parent may stop us here
	}
	if err := w.store.Write(ev.storeKey(), v); err == nil {
		ev.Incr = 1
		ev.Write = faults.Mono()
	}
	if fenced {
		res, err := w.store.FencedWrite(ev.storeKey(), l.Fence(), ev.Start, v)
		if err == nil {
			ev.Res = int(res) + 1
		}
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// holdOnce takes Keys[0] (waiting up to Wait), reports it, and keeps it
// until ctx ends.
func holdOnce(ctx context.Context, spec workerSpec, c *redlock.Client, emit func(workerEvent)) {
	lctx, cancel := context.WithTimeout(ctx, spec.Wait)
	defer cancel()
	l, err := c.Lock(lctx, spec.Keys[0], spec.TTL)
	if err != nil {
		emit(workerEvent{Type: "err", Kind: errKind("acquire", err), Msg: err.Error()})
		return
	}
	emit(workerEvent{Type: "holding", Key: spec.Keys[0], Start: faults.Mono(), End: faults.Mono() + l.Validity()})
	<-ctx.Done()
	_ = l.Unlock(context.Background())
}

// TestSafety_workerProcess is the body of a worker subprocess; run
// directly, it does nothing. It ends when its spec's duration passes or
// its standard input closes (the parent is done or gone).
func TestSafety_workerProcess(t *testing.T) {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		t.Skip("only runs as a worker subprocess of the safety tests")
	}
	var spec workerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	out := os.NewFile(3, "events")
	if out == nil {
		t.Fatal("no event pipe on fd 3")
	}
	defer out.Close()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(ev workerEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	c, clk, closeClient, err := newWorkerClient(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	if spec.HoldOnce {
		holdOnce(ctx, spec, c, emit)
		return
	}
	store := faults.NewStore(spec.Store)
	defer store.Close()
	w := &worker{spec: spec, client: c, clk: clk, store: store, rng: rand.New(rand.NewSource(spec.Seed)), emit: emit}
	w.run(ctx)
}

// subprocess is a running worker subprocess.
type subprocess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan workerEvent
	out    *strings.Builder // its test output, for failures
	done   chan struct{}
	paused atomic.Bool
	wg     sync.WaitGroup
}

// startWorkerProcess runs the test binary again as a worker with spec.
// Its events arrive on the returned subprocess's events channel, which is
// closed when the worker ends.
func startWorkerProcess(t *testing.T, spec workerSpec) *subprocess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The worker's own deadline is the spec's duration; the test binary's
	// timeout must not end it first.
	timeout := fmt.Sprintf("-test.timeout=%v", spec.Duration+10*time.Minute)
	cmd := exec.Command(exe, "-test.run=^TestSafety_workerProcess$", "-test.count=1", timeout)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = workerProcAttr()
	s := &subprocess{cmd: cmd, events: make(chan workerEvent, 1024), out: &strings.Builder{}, done: make(chan struct{})}
	cmd.Stdout = &lockedWriter{b: s.out}
	cmd.Stderr = cmd.Stdout
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the child has its own copy
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.events)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var ev workerEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err == nil {
				s.events <- ev
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.kill() })
	return s
}

// lockedWriter is a strings.Builder safe for the two copying goroutines.
type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stop tells the worker to finish (it closes its stdin) and waits for it
// and its events, at most about 10s, then kills it.
func (s *subprocess) stop() error {
	_ = s.stdin.Close()
	s.resume()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.kill()
		return fmt.Errorf("worker subprocess did not stop; output:\n%s", s.output())
	}
	s.wg.Wait()
	if !s.cmd.ProcessState.Success() {
		return fmt.Errorf("worker subprocess failed (%v); output:\n%s", s.cmd.ProcessState, s.output())
	}
	return nil
}

// kill SIGKILLs the worker and waits for it.
func (s *subprocess) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
	s.wg.Wait()
}

func (s *subprocess) output() string { return s.cmd.Stdout.(*lockedWriter).String() }

// pause stops the worker with SIGSTOP.
func (s *subprocess) pause() {
	if s.signal(sigStop) {
		s.paused.Store(true)
	}
}

// resume continues a paused worker.
func (s *subprocess) resume() {
	if s.paused.Swap(false) {
		s.signal(sigCont)
	}
}

func (s *subprocess) signal(sig os.Signal) bool {
	select {
	case <-s.done:
		return false
	default:
		return s.cmd.Process.Signal(sig) == nil
	}
}
