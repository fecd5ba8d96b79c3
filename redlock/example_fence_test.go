package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// fencedStore is a resource that protects itself with fencing tokens: it
// refuses a write whose fence is lower than the highest it has accepted.
// A holder that stalled (GC pause, lost network) past its lock's validity
// still has its old fence, so its late write is refused once a newer
// holder has written. The check and the write must be one atomic step on
// the resource's side (here a mutex; in a database, a conditional UPDATE
// ... WHERE fence <= $1).
type fencedStore struct {
	mu    sync.Mutex
	fence uint64 // the highest fence accepted
	value string
}

var errStaleFence = errors.New("stale fencing token")

func (s *fencedStore) Write(fence uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence {
		return fmt.Errorf("%w: %d < %d", errStaleFence, fence, s.fence)
	}
	s.fence, s.value = fence, value
	return nil
}

// A stalled holder's write is refused after a newer holder wrote. With
// redlock the fences come from Lock.Fence of locks taken WithFencing.
func Example_fencedStore() {
	var store fencedStore
	const stalled, newer = 11, 12 // the fences of two successive locks

	fmt.Println(store.Write(newer, "written by the newer holder"))
	err := store.Write(stalled, "written by the holder that stalled")
	fmt.Println(errors.Is(err, errStaleFence), err)
	fmt.Println(store.value)
	// Output:
	// <nil>
	// true stale fencing token: 11 < 12
	// written by the newer holder
}

func ExampleWithFencing() {
	var client *redlock.Client // built as in the package example
	var store fencedStore

	lock, err := client.Lock(context.Background(), "lock:orders:42", 10*time.Second, redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())
	// Every write carries the fence; the store refuses it if a later lock
	// holder has already written.
	if err := store.Write(lock.Fence(), "order 42 snapshot"); err != nil {
		log.Println("lost the lock before writing:", err)
	}
}
