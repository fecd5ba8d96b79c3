package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
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
