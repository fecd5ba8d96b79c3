package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// The five nodes of docker-compose.yml.
var addrs = []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"}

func Example() {
	var pools []pool.Pool
	for _, addr := range addrs {
		p, err := pool.New(addr)
		if err != nil {
			log.Fatal(err)
		}
		defer p.Close()
		pools = append(pools, p)
	}
	client, err := redlock.New(pools)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := client.Lock(ctx, "lock:orders:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())

	// Work that must not run twice at once, finished well within
	// lock.Validity().
	fmt.Println("holding", lock.Key(), "for", lock.Validity().Round(time.Second))
}

func ExampleClient_TryLock() {
	var client *redlock.Client // built as in the package example

	lock, err := client.TryLock(context.Background(), "lock:report", 30*time.Second)
	var qe *redlock.QuorumError
	switch {
	case err == nil:
		defer lock.Unlock(context.Background())
		fmt.Println("got it")
	case errors.As(err, &qe) && qe.Busy():
		fmt.Println("someone else is making the report")
	case errors.Is(err, redlock.ErrNotAcquired):
		fmt.Println("the lock nodes are unreachable:", err)
	default:
		fmt.Println("bad call:", err)
	}
}

func ExampleLock_Extend() {
	var lock *redlock.Lock // from Client.Lock

	ctx := context.Background()
	for step := 0; step < 3; step++ {
		// ... one step of long work ...
		if err := lock.Extend(ctx, 10*time.Second); errors.Is(err, redlock.ErrLockLost) {
			fmt.Println("lock lost: stop working")
			return
		}
	}
}

func ExampleClient_Restore() {
	var client *redlock.Client
	// A web request took the lock and handed key and token to a job.
	key, token := "lock:import:7", "token-from-the-request"

	lock := client.Restore(key, token)
	if err := lock.Unlock(context.Background()); err != nil {
		fmt.Println("the lock had already expired:", err)
	}
}

func ExampleClient_Do() {
	var client *redlock.Client // built as in the package example
	orders := []int{41, 42, 43}

	// Do waits for the lock, extends it in the background while the
	// function runs, and releases it when the function returns (or panics).
	err := client.Do(context.Background(), "lock:invoices", 10*time.Second, func(ctx context.Context) error {
		for _, id := range orders {
			// ctx ends as soon as the lock may be gone: check it before
			// each step, and pass it to every call the step makes.
			if err := ctx.Err(); err != nil {
				return err
			}
			fmt.Println("invoicing order", id)
		}
		return nil
	}, redlock.WithMaxHold(time.Minute)) // a hung function does not keep the lock past a minute

	switch {
	case errors.Is(err, redlock.ErrNotAcquired):
		fmt.Println("not our turn:", err)
	case errors.Is(err, redlock.ErrLockLost), errors.Is(err, redlock.ErrExpired):
		fmt.Println("stopped part-way, the lock ended:", err)
	case err != nil:
		fmt.Println("the work failed:", err)
	}
}

func ExampleLock_Context() {
	var client *redlock.Client // built as in the package example

	// Extended every 10s until Unlock; the context ends 2s before the
	// validity would, to leave time to wind down.
	lock, err := client.Lock(context.Background(), "lock:report", 30*time.Second,
		redlock.WithAutoExtend(0), redlock.WithSafetyMargin(2*time.Second))
	if err != nil {
		return
	}
	defer lock.Unlock(context.Background())

	ctx := lock.Context()
	deadline, _ := ctx.Deadline() // the validity end less the margin; moves with each extension
	fmt.Println("held until at least", deadline)

	select {
	case <-time.After(time.Minute): // the work
		fmt.Println("report written")
	case <-ctx.Done():
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, redlock.ErrLockLost):
			fmt.Println("another owner may hold the lock now:", cause)
		case errors.Is(cause, redlock.ErrExpired):
			fmt.Println("the lock ran out before it could be extended")
		}
	}
}

// waitLog is an Observer that logs long waits and lost locks; a metrics
// library would record the same figures.
type waitLog struct{}

func (waitLog) Round(info *redlock.RoundInfo) {
	for _, n := range info.Nodes {
		if n.Status == redlock.NodeFailed {
			log.Printf("%s round on %s: node %s failed: %v", info.Op, info.Key, n.Addr, n.Err)
		}
	}
}

func (waitLog) Event(e redlock.Event) {
	switch e.Kind {
	case redlock.EventAcquired:
		if e.Wait > time.Second {
			// e.Lock says which kind of lock: a semaphore's callers
			// waiting for permits are not a contended mutex.
			log.Printf("waited %v for %s %s", e.Wait, e.Lock, e.Key)
		}
	case redlock.EventLost:
		log.Printf("lost %s %s after %v: %v", e.Lock, e.Key, e.Duration, e.Err)
	}
}

func ExampleWithObserver() {
	var pools []pool.Pool // built as in the package example

	client, err := redlock.New(pools, redlock.WithObserver(waitLog{}))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
}

func ExampleClient_Inspect() {
	var client *redlock.Client // built as in the package example

	in, err := client.Inspect(context.Background(), "lock:orders:42")
	if err != nil {
		log.Fatal(err) // a bad argument or a closed Client; node failures are per node
	}
	for _, h := range in.Holders() {
		fmt.Println("held by client", h.Holder, "mine:", h.Holder == client.ID(), "for", h.TTL)
	}
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Println(n.Addr, "did not answer:", n.Err)
			continue
		}
		fmt.Println(n.Addr, "held:", n.Held, "ttl:", n.TTL, "queued:", n.Queued, "fence:", n.Fence)
	}
}

func ExampleClient_ForceRelease() {
	var client *redlock.Client // built as in the package example

	// Only for a holder known to be gone or stuck: a holder that is still
	// running learns of it at its next extension, and may run beside the
	// next holder until then.
	if err := client.ForceRelease(context.Background(), "lock:orders:42"); err != nil {
		log.Printf("some nodes did not answer, the key may stay held there until its TTL: %v", err)
	}
}

func ExampleClient_LockMulti() {
	var client *redlock.Client // built as in the package example

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Both accounts or neither; the order of the keys does not matter.
	lock, err := client.LockMulti(ctx, []string{"lock:account:7", "lock:account:3"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())
	fmt.Println("holding", lock.Keys())
}

func ExampleWithLogger() {
	var pools []pool.Pool // built as in the package example

	// Lost locks and failing nodes are logged at Warn; tokens and
	// passwords never are.
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := redlock.New(pools, redlock.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
}

func ExampleSemaphore_Acquire() {
	var client *redlock.Client // built as in the package example

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// At most three encoders at once, across every process that uses the
	// name with three permits.
	permit, err := client.Semaphore("jobs:encoder", 3).Acquire(ctx, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Unlock(context.Background())
	fmt.Println("holding a permit until", permit.Until())
}

func ExampleRWLock_RDo() {
	var client *redlock.Client // built as in the package example

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	doc := client.RWLock("doc:42")
	// Readers share the document; a writer (doc.Do) has it alone.
	err := doc.RDo(ctx, 10*time.Second, func(ctx context.Context) error {
		fmt.Println("reading")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleElection_Run() {
	var client *redlock.Client // built as in the package example

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// Every scheduler process runs this; one at a time leads. The term
	// goes with every write, so that a store can refuse a stalled former
	// leader's (see ExampleWithFencing).
	err := client.Election("scheduler").Run(ctx, "host-a:8080", 10*time.Second,
		func(ctx context.Context, term uint64) error {
			fmt.Println("leading in term", term)
			<-ctx.Done() // lead until the leadership or ctx ends
			return nil
		})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func ExampleSemaphore_Inspect() {
	var client *redlock.Client // built as in the package example

	in, err := client.Semaphore("jobs:encoder", 3).Inspect(context.Background())
	if err != nil {
		log.Fatal(err) // a bad semaphore or a closed Client; node failures are per node
	}
	for _, p := range in.Holders() {
		fmt.Println("permit", p.Slot, "held by client", p.Holder, "for", p.TTL)
	}
	for _, n := range in.Nodes {
		fmt.Println(n.Addr, "size:", n.Size, "held slots:", len(n.Permits), "queued:", n.Queued, "error:", n.Err)
	}
}

func ExampleRWLock_Inspect() {
	var client *redlock.Client // built as in the package example

	in, err := client.RWLock("doc:42").Inspect(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	mode, holds := in.Mode(), in.Holders()
	fmt.Println("doc:42 is", mode, "by", len(holds), "holders")
	for _, n := range in.Nodes {
		fmt.Println(n.Addr, n.Mode, "readers:", len(n.Readers), "writer waiting:", n.Intent != nil, "error:", n.Err)
	}
}

func ExampleElection_Inspect() {
	var client *redlock.Client // built as in the package example

	in, err := client.Election("scheduler").Inspect(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	if l, ttl, ok := in.Leader(); ok {
		fmt.Println("leader", l.Value, "in term", l.Term, "for at least", ttl)
	}
	for _, n := range in.Nodes {
		fmt.Println(n.Addr, "latest term minted:", n.Fence, "campaigns queued:", n.Queued, "error:", n.Err)
	}
}

func ExampleElection_Leader() {
	var client *redlock.Client // built as in the package example

	leader, err := client.Election("scheduler").Leader(context.Background())
	switch {
	case errors.Is(err, redlock.ErrNoLeader):
		fmt.Println("no leader now")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("send work to", leader.Value, "term", leader.Term)
	}
}
