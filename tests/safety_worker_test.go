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
	Name        string        `json:"name"`
	Addrs       []string      `json:"addrs"` // the nodes (their proxies)
	Store       string        `json:"store"` // the resource's node
	Keys        []string      `json:"keys"`
	Fenced      []bool        `json:"fenced"` // per key: acquire WithFencing and write to the fenced register
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
}

// tally is what the workers of a run counted.
type tally struct {
	mu         sync.Mutex
	attempts   int
	acquired   int
	increments map[string]int64
	fenced     [3]int64 // by faults.WriteResult
	errKinds   map[string]int
	errSample  map[string]string // an error of each kind, with its worker
	tokens     map[string]bool
	foreignWon int // acquisitions of a key a foreign owner holds
}

func newTally() *tally {
	return &tally{increments: map[string]int64{}, errKinds: map[string]int{}, errSample: map[string]string{}, tokens: map[string]bool{}}
}

func (t *tally) event(worker string, ev workerEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Type {
	case "hold":
		t.acquired++
		t.attempts++
		t.increments[ev.Key] += int64(ev.Incr)
		if ev.Res > 0 {
			t.fenced[ev.Res-1]++
		}
		if ev.Token != "" {
			t.tokens[ev.Token] = true
		}
	case "err":
		if strings.HasPrefix(ev.Kind, "acquire") {
			t.attempts++
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

// once takes a random key, reads its counter, waits, writes it plus one
// if the lock still has Margin of validity, and releases.
func (w *worker) once(ctx context.Context) {
	i := w.rng.Intn(len(w.spec.Keys))
	key, fenced := w.spec.Keys[i], w.spec.Fenced[i]
	var opts []redlock.LockOption
	if fenced {
		opts = append(opts, redlock.WithFencing())
	}
	try := w.rng.Intn(4) == 0 || w.spec.TryOnly
	hold := w.spec.Hold.Draw(w.rng)
	extend := w.rng.Intn(5) == 0
	lctx, cancel := context.WithTimeout(ctx, w.spec.Wait)
	defer cancel()
	var l *redlock.Lock
	var err error
	if try {
		l, err = w.client.TryLock(lctx, key, w.spec.TTL, opts...)
	} else {
		l, err = w.client.Lock(lctx, key, w.spec.TTL, opts...)
	}
	if err != nil {
		if ctx.Err() == nil { // the end of the run is no error
			w.emit(workerEvent{Type: "err", Kind: errKind("acquire", err), Msg: err.Error()})
			// A TryLock that found the key busy tries again a little later.
			sleepCtx(ctx, time.Duration(1+w.rng.Intn(5))*time.Millisecond)
		}
		return
	}
	start := faults.Mono()
	end := start + w.realValidity(l)
	ev := workerEvent{Type: "hold", Key: key, Start: start, Fence: l.Fence(), Token: l.Token()}

	bg := context.WithoutCancel(ctx)
	v, rerr := w.store.Read(key)
	sleepCtx(bg, hold)
	if extend {
		if err := l.Extend(bg, w.spec.TTL); err != nil {
			w.emit(workerEvent{Type: "err", Kind: errKind("extend", err), Msg: err.Error()})
		} else {
			end = max(end, faults.Mono()+w.realValidity(l))
		}
	}
	if rerr == nil && w.realValidity(l) > w.spec.Margin {
		if w.spec.Announce {
			w.emit(workerEvent{Type: "checked", Key: key})
			time.Sleep(20 * time.Millisecond) // the parent may stop us here
		}
		if err := w.store.Write(key, v+1); err == nil {
			ev.Incr = 1
			ev.Write = faults.Mono()
		}
		if fenced {
			res, err := w.store.FencedWrite(key, l.Fence(), start, v+1)
			if err == nil {
				ev.Res = int(res) + 1
			}
		}
	}
	release := faults.Mono()
	ev.End = min(end, release)
	if err := l.Unlock(bg); err != nil {
		w.emit(workerEvent{Type: "err", Kind: errKind("unlock", err), Msg: err.Error()})
	}
	w.emit(ev)
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
