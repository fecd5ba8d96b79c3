package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Workers on Clients of their own take one key in turn, through queues,
// hand-offs, splits and refusals, and note when they are inside: never two
// at once. The holds are short, so that hand-offs follow each other fast.
func TestLock_handOffsKeepMutualExclusion(t *testing.T) {
	e := newEnv(t, 5)
	key := newKey(t)
	const workers = 6
	var (
		inside, most atomic.Int32
		took         atomic.Int64
		wg           sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errs := make(chan error, workers)
	for range workers {
		c := newClient(t, newPools(t, e.addrs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 { // bounded; the context ends it first
				l, err := c.Lock(ctx, key, 5*time.Second)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(200 * time.Microsecond)
				inside.Add(-1)
				took.Add(1)
				if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), most.Load(), "two holders at once")
	require.Greater(t, took.Load(), int64(workers), "the key went round")
	t.Logf("%d acquisitions", took.Load())
}
