package redlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlocktest"
)

// slack gives each round a node timeout of a second: in-process nodes
// answer in microseconds, but a test machine busy with other tests (or
// the race detector) can hold a round up for longer than the default
// 50ms.
var slack = redlock.WithNodeTimeout(time.Second)

func Example() {
	nodes := redlocktest.New(5)
	defer nodes.Close() // after the Clients' Close, deferred below

	// Two processes, each with its own pools to the same five nodes.
	a, err := redlock.New(nodes.Pools(), slack)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.New(nodes.Pools(), slack)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	lock, err := a.TryLock(ctx, "lock:report", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryLock(ctx, "lock:report", time.Second)
	var qe *redlock.QuorumError
	fmt.Println("b while a holds it: busy:", errors.As(err, &qe) && qe.Busy())

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	lock, err = b.TryLock(ctx, "lock:report", time.Second)
	fmt.Println("b once a released it:", err)
	if err == nil {
		_ = lock.Unlock(ctx)
	}
	// Output:
	// b while a holds it: busy: true
	// b once a released it: <nil>
}

// A node down: three of five still make a quorum.
func ExampleNode_Kill() {
	nodes := redlocktest.New(5)
	defer nodes.Close()
	client, err := redlock.New(nodes.Pools(), slack)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	nodes.Node(4).Kill()
	ctx := context.Background()
	lock, err := client.TryLock(ctx, "lock:orders:42", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked with", nodes.Node(4).Addr(), "down")
	fmt.Println("unlock:", lock.Unlock(ctx))
	// Output:
	// locked with redlocktest-5:6379 down
	// unlock: <nil>
}

// A job under Client.Do whose lock is lost part-way: its context ends with
// ErrLockLost, and so does Do.
func ExampleNode_Expire() {
	nodes := redlocktest.New(5)
	defer nodes.Close()
	client, err := redlock.New(nodes.Pools(), slack)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	const key = "lock:invoices"
	err = client.Do(context.Background(), key, 300*time.Millisecond, func(ctx context.Context) error {
		// The key runs out on every node, as if the extensions had not
		// reached them in time: the next automatic extension (every
		// 100ms) finds it gone.
		for _, n := range nodes.Nodes() {
			n.Expire(key)
		}
		<-ctx.Done() // the job, which watches its context
		fmt.Println("job stopped, lock lost:", errors.Is(context.Cause(ctx), redlock.ErrLockLost))
		return ctx.Err()
	})
	fmt.Println("Do: lock lost:", errors.Is(err, redlock.ErrLockLost))
	// Output:
	// job stopped, lock lost: true
	// Do: lock lost: true
}

// A leader cut off from a quorum of nodes steps down when its lease can
// no longer be extended, and another candidate takes over.
func ExampleNode_Partition() {
	nodes := redlocktest.New(5)
	defer nodes.Close()
	poolsA, poolsB := nodes.Pools(), nodes.Pools() // two processes
	a, err := redlock.New(poolsA, slack)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.New(poolsB, slack)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	lease := 300 * time.Millisecond
	leaderA, err := a.Election("scheduler").Campaign(ctx, "a", lease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a leads")

	for i := range 3 {
		nodes.Node(i).Partition(poolsA)
	}
	<-leaderA.Context().Done()
	// Lost (an extension found the quorum gone) or expired (the extension
	// was still waiting for the nodes cut off when the lease ran out).
	cause := context.Cause(leaderA.Context())
	fmt.Println("a stepped down, lease lost:", errors.Is(cause, redlock.ErrLockLost) || errors.Is(cause, redlock.ErrExpired))

	// b wins once a's lease ran out on the nodes a can no longer reach.
	ctxB, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = b.Election("scheduler").Run(ctxB, "b", lease, func(ctx context.Context, term uint64) error {
		fmt.Println("b leads, newer term:", term > leaderA.Fence())
		cancel() // done with the example: resign
		return nil
	})
	fmt.Println("b's Run:", err)

	// Heal, so that a's Close need not wait for its calls held by the
	// partition to time out.
	for i := range 3 {
		nodes.Node(i).Heal()
	}
	// Output:
	// a leads
	// a stepped down, lease lost: true
	// b leads, newer term: true
	// b's Run: context canceled
}

// At most two workers of five hold a permit at once.
func ExampleCluster_Pools() {
	nodes := redlocktest.New(5)
	defer nodes.Close()
	client, err := redlock.New(nodes.Pools(), slack)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	encoders := client.Semaphore("jobs:encoder", 2)

	var (
		running, peak, ran atomic.Int32
		wg                 sync.WaitGroup
	)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = encoders.Do(ctx, 500*time.Millisecond, func(ctx context.Context) error {
				n := running.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(20 * time.Millisecond) // the job
				running.Add(-1)
				ran.Add(1)
				return nil
			})
		}()
	}
	wg.Wait()
	fmt.Println("jobs run:", ran.Load(), "at most 2 at once:", peak.Load() <= 2)
	// Output:
	// jobs run: 5 at most 2 at once: true
}
