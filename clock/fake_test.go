package clock_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/clock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start is an arbitrary fixed instant, so that failures print readable times.
var start = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// waitLimit bounds every wait for a goroutine (an AfterFunc callback or a
// real timer). It is far above what any of them needs.
const waitLimit = 5 * time.Second

// fired reports whether a value is waiting on c, without blocking.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

// recv waits up to waitLimit for a value on c.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s: nothing after %v", what, waitLimit)
		panic("unreachable")
	}
}

func TestFake_Now_movesOnlyOnAdvanceAndSet(t *testing.T) {
	f := clock.NewFake(start)
	require.Equal(t, start, f.Now())
	for range 3 {
		require.Equal(t, start, f.Now(), "Now must not move by itself")
	}

	f.Advance(3 * time.Second)
	require.Equal(t, start.Add(3*time.Second), f.Now())

	f.Advance(0)
	require.Equal(t, start.Add(3*time.Second), f.Now())

	f.Set(start.Add(time.Minute))
	require.Equal(t, start.Add(time.Minute), f.Now())
}

func TestFake_Set_neverMovesBackwards(t *testing.T) {
	f := clock.NewFake(start)
	f.Set(start.Add(time.Hour))
	f.Set(start.Add(time.Minute))
	require.Equal(t, start.Add(time.Hour), f.Now())
	f.Set(start)
	require.Equal(t, start.Add(time.Hour), f.Now())

	// Advance with a negative duration is a Set into the past: no-op.
	f.Advance(-time.Second)
	require.Equal(t, start.Add(time.Hour), f.Now())
}

func TestFake_Since_measuresFakeTime(t *testing.T) {
	f := clock.NewFake(start)
	require.Equal(t, time.Duration(0), f.Since(start))
	f.Advance(90 * time.Second)
	require.Equal(t, 90*time.Second, f.Since(start))
	require.Equal(t, 30*time.Second, f.Since(start.Add(time.Minute)))
	require.Equal(t, -10*time.Second, f.Since(start.Add(100*time.Second)))
}

func TestFake_NewTimer_firesExactlyAtItsDeadline(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(5 * time.Second)
	require.Equal(t, 1, f.Timers())

	f.Advance(5*time.Second - time.Nanosecond)
	_, ok := fired(tm.C())
	require.False(t, ok, "fired 1ns before its deadline")
	require.Equal(t, 1, f.Timers())

	f.Advance(time.Nanosecond)
	v, ok := fired(tm.C())
	require.True(t, ok, "did not fire at its deadline")
	require.Equal(t, start.Add(5*time.Second), v, "the timer sends the fake time")
	require.Equal(t, 0, f.Timers())

	// It fires once only.
	f.Advance(time.Hour)
	_, ok = fired(tm.C())
	require.False(t, ok, "fired twice")
}

func TestFake_NewTimer_firesWhenSetPastItsDeadline(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Set(start.Add(time.Minute))
	v, ok := fired(tm.C())
	require.True(t, ok)
	require.Equal(t, start.Add(time.Second), v, "the time sent is the deadline the clock passed through")
	require.Equal(t, start.Add(time.Minute), f.Now())
}

func TestFake_Advance_stepsThroughTimerDeadlinesInOrder(t *testing.T) {
	f := clock.NewFake(start)
	deadlines := []time.Duration{3 * time.Second, time.Second, 5 * time.Second, 2 * time.Second, 4 * time.Second}
	timers := make([]clock.Timer, len(deadlines))
	for i, d := range deadlines {
		timers[i] = f.NewTimer(d)
	}
	late := f.NewTimer(11 * time.Second)

	f.Advance(10 * time.Second)

	for i, d := range deadlines {
		v, ok := fired(timers[i].C())
		require.True(t, ok, "timer %v did not fire", d)
		// Each timer receives its own deadline: the clock stood at each
		// deadline in turn while firing, instead of jumping to the end.
		require.Equal(t, start.Add(d), v, "timer %v", d)
	}
	_, ok := fired(late.C())
	require.False(t, ok, "a timer due after the target fired")
	require.Equal(t, start.Add(10*time.Second), f.Now())
	require.Equal(t, 1, f.Timers())
}

// With one big Advance, AfterFunc callbacks must run in the order of their
// deadlines, as they would on the real clock. The scenario is repeated
// because a wrong order can come out right by chance.
func TestFake_Advance_runsAfterFuncCallbacksInDeadlineOrder(t *testing.T) {
	for round := range 20 {
		f := clock.NewFake(start)
		order := make(chan int, 5)
		for _, k := range []int{3, 1, 5, 2, 4} {
			f.AfterFunc(time.Duration(k)*time.Second, func() { order <- k })
		}
		f.Advance(10 * time.Second)
		got := make([]int, 0, 5)
		for range 5 {
			got = append(got, recv(t, order, "AfterFunc callback"))
		}
		require.Equal(t, []int{1, 2, 3, 4, 5}, got, "round %d: callbacks ran out of deadline order", round)
	}
}

func TestFake_AfterFunc_runsTheCallbackOnceWhenDue(t *testing.T) {
	f := clock.NewFake(start)
	ran := make(chan time.Time, 2)
	tm := f.AfterFunc(time.Second, func() { ran <- f.Now() })
	require.Nil(t, tm.C(), "AfterFunc timers have no channel")
	require.Equal(t, 1, f.Timers())

	f.Advance(time.Second - time.Nanosecond)
	require.Empty(t, ran)
	require.Equal(t, 1, f.Timers())

	f.Advance(time.Nanosecond)
	at := recv(t, ran, "AfterFunc callback")
	require.False(t, at.Before(start.Add(time.Second)), "callback saw %v, before its deadline", at)
	require.Equal(t, 0, f.Timers())

	f.Advance(time.Hour)
	require.False(t, tm.Stop(), "Stop after firing")
	require.Empty(t, ran, "callback ran twice")
}

func TestFake_Timer_Stop_beforeFiringPreventsIt(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	var calls atomic.Int32
	fn := f.AfterFunc(time.Second, func() { calls.Add(1) })
	sentinel := make(chan struct{})
	f.AfterFunc(2*time.Second, func() { close(sentinel) })
	require.Equal(t, 3, f.Timers())

	require.True(t, tm.Stop())
	require.True(t, fn.Stop())
	require.Equal(t, 1, f.Timers())
	require.False(t, tm.Stop(), "second Stop")
	require.False(t, fn.Stop(), "second Stop")

	f.Advance(time.Minute)
	_, ok := fired(tm.C())
	require.False(t, ok, "stopped timer fired")
	recv(t, sentinel, "sentinel callback")
	time.Sleep(10 * time.Millisecond) // let a wrongly started callback run
	require.Zero(t, calls.Load(), "stopped AfterFunc ran")
	require.Equal(t, 0, f.Timers())
}

func TestFake_Timer_Stop_afterFiringReturnsFalse(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second)
	require.False(t, tm.Stop())
	_, ok := fired(tm.C())
	require.True(t, ok, "Stop after firing must not take the value back")
}

func TestFake_Timer_Reset_reArmsAFiredTimer(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second)
	_, ok := fired(tm.C())
	require.True(t, ok)

	require.False(t, tm.Reset(2*time.Second), "the timer had fired: not active")
	require.Equal(t, 1, f.Timers())
	f.Advance(2*time.Second - time.Nanosecond)
	_, ok = fired(tm.C())
	require.False(t, ok)
	f.Advance(time.Nanosecond)
	v, ok := fired(tm.C())
	require.True(t, ok, "re-armed timer did not fire")
	require.Equal(t, start.Add(3*time.Second), v)
}

func TestFake_Timer_Reset_movesThePendingDeadline(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	require.True(t, tm.Reset(10*time.Second), "the timer was active")
	require.Equal(t, 1, f.Timers(), "Reset must not duplicate the timer")

	f.Advance(5 * time.Second)
	_, ok := fired(tm.C())
	require.False(t, ok, "fired at its old deadline")
	f.Advance(5 * time.Second)
	v, ok := fired(tm.C())
	require.True(t, ok)
	require.Equal(t, start.Add(10*time.Second), v)

	// Stopped, then Reset: re-armed, and Reset reports it was not active.
	tm2 := f.NewTimer(time.Second)
	require.True(t, tm2.Stop())
	require.False(t, tm2.Reset(time.Second))
	f.Advance(time.Second)
	_, ok = fired(tm2.C())
	require.True(t, ok)
}

func TestFake_Timer_Reset_reArmsAnAfterFunc(t *testing.T) {
	f := clock.NewFake(start)
	ran := make(chan struct{}, 2)
	tm := f.AfterFunc(time.Second, func() { ran <- struct{}{} })
	f.Advance(time.Second)
	recv(t, ran, "first run")
	require.False(t, tm.Reset(time.Second))
	f.Advance(time.Second)
	recv(t, ran, "second run")
}

func TestFake_NewTimer_withZeroOrNegativeDurationFiresAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		f := clock.NewFake(start)
		tm := f.NewTimer(d)
		v, ok := fired(tm.C())
		require.True(t, ok, "NewTimer(%v) did not fire at once", d)
		require.Equal(t, start, v, "NewTimer(%v) sends the current time; the clock never goes back", d)
		require.Equal(t, start, f.Now())
		require.Equal(t, 0, f.Timers())
	}
}

func TestFake_Timer_Reset_withZeroDurationFiresAtOnce(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Hour)
	require.True(t, tm.Reset(0))
	v, ok := fired(tm.C())
	require.True(t, ok)
	require.Equal(t, start, v)
	require.Equal(t, 0, f.Timers())
}

func TestFake_AfterFunc_withZeroOrNegativeDurationRunsAtOnce(t *testing.T) {
	f := clock.NewFake(start)
	ran := make(chan struct{}, 2)
	f.AfterFunc(0, func() { ran <- struct{}{} })
	f.AfterFunc(-time.Minute, func() { ran <- struct{}{} })
	recv(t, ran, "AfterFunc(0)")
	recv(t, ran, "AfterFunc(-1m)")
	require.Equal(t, 0, f.Timers())
	require.Equal(t, start, f.Now())
}

func TestFake_Timers_countsWaitingTimers(t *testing.T) {
	f := clock.NewFake(start)
	require.Equal(t, 0, f.Timers())
	a := f.NewTimer(time.Second)
	f.NewTimer(2 * time.Second)
	done := make(chan struct{})
	f.AfterFunc(3*time.Second, func() { close(done) })
	require.Equal(t, 3, f.Timers())
	a.Stop()
	require.Equal(t, 2, f.Timers())
	f.Advance(2 * time.Second)
	require.Equal(t, 1, f.Timers())
	f.Advance(time.Second)
	require.Equal(t, 0, f.Timers())
	recv(t, done, "AfterFunc callback")
}

func TestFake_WaitTimers_returnsTrueOnceEnoughTimersWait(t *testing.T) {
	f := clock.NewFake(start)
	require.True(t, f.WaitTimers(0, nil), "zero timers are always there")

	result := make(chan bool, 1)
	go func() { result <- f.WaitTimers(2, nil) }()

	f.NewTimer(time.Second)
	select {
	case r := <-result:
		t.Fatalf("WaitTimers(2) returned %v with one timer", r)
	default:
	}
	f.AfterFunc(time.Second, func() {})
	require.True(t, recv(t, result, "WaitTimers(2)"))

	// Already enough: returns at once.
	require.True(t, f.WaitTimers(2, nil))
	require.True(t, f.WaitTimers(1, nil))

	f.Advance(time.Second) // fire the no-op AfterFunc
}

func TestFake_WaitTimers_returnsFalseWhenDoneCloses(t *testing.T) {
	f := clock.NewFake(start)
	f.NewTimer(time.Second)
	done := make(chan struct{})
	result := make(chan bool, 1)
	go func() { result <- f.WaitTimers(3, done) }()
	f.NewTimer(time.Second) // wakes the waiter, still short of 3
	close(done)
	require.False(t, recv(t, result, "WaitTimers with done closed"))

	closed := make(chan struct{})
	close(closed)
	require.False(t, f.WaitTimers(5, closed))
}

func TestFake_WaitTimers_seesTimersAddedByOtherGoroutines(t *testing.T) {
	f := clock.NewFake(start)
	const n = 8
	var wg sync.WaitGroup
	timers := make(chan clock.Timer, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timers <- f.NewTimer(time.Minute)
		}()
	}
	done := make(chan struct{})
	timeout := time.AfterFunc(waitLimit, func() { close(done) })
	defer timeout.Stop()
	require.True(t, f.WaitTimers(n, done))
	wg.Wait()
	require.Equal(t, n, f.Timers())
	f.Advance(time.Minute)
	close(timers)
	for tm := range timers {
		v, ok := fired(tm.C())
		require.True(t, ok)
		require.Equal(t, start.Add(time.Minute), v)
	}
}

// Advance is documented as safe for concurrent use and as moving the clock
// forward by d, so concurrent Advance calls must add up. The scenario is
// repeated because a lost update needs an unlucky interleaving.
func TestFake_Advance_concurrentCallsAddUp(t *testing.T) {
	const goroutines, steps, rounds = 8, 1000, 60
	for round := range rounds {
		f := clock.NewFake(start)
		var wg sync.WaitGroup
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range steps {
					f.Advance(time.Millisecond)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, goroutines*steps*time.Millisecond, f.Since(start),
			"round %d: concurrent Advance calls lost updates", round)
	}
}

func TestFake_isSafeForConcurrentUse(t *testing.T) {
	f := clock.NewFake(start)
	var wg sync.WaitGroup
	var ran atomic.Int32
	const workers, each = 4, 50
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tm := f.NewTimer(time.Duration(i) * time.Millisecond)
				if i%3 == 0 {
					tm.Stop()
				}
				f.AfterFunc(time.Duration(i)*time.Millisecond, func() { ran.Add(1) })
				_ = f.Now()
				_ = f.Timers()
			}
		}()
	}
	stop := make(chan struct{})
	advancer := make(chan struct{})
	go func() {
		defer close(advancer)
		for range 1000 {
			select {
			case <-stop:
				return
			default:
			}
			f.Advance(time.Millisecond)
		}
	}()
	wg.Wait()
	close(stop)
	<-advancer
	f.Advance(time.Hour)
	require.Equal(t, 0, f.Timers())
	deadline := time.Now().Add(waitLimit)
	for ran.Load() < workers*each && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, int32(workers*each), ran.Load(), "every AfterFunc callback runs once")
}

func TestReal_Now_carriesAMonotonicReading(t *testing.T) {
	c := clock.Real()
	t1 := c.Now()
	require.Contains(t, t1.String(), "m=", "Real().Now() should carry a monotonic reading")
	t2 := c.Now()
	require.False(t, t2.Before(t1))
	require.GreaterOrEqual(t, c.Since(t1), time.Duration(0))
	require.GreaterOrEqual(t, t2.Sub(t1), time.Duration(0))
	require.False(t, strings.Contains(t1.Round(0).String(), "m="), "sanity: Round(0) strips the reading")
}

func TestReal_NewTimer_fires(t *testing.T) {
	c := clock.Real()
	before := time.Now()
	tm := c.NewTimer(time.Millisecond)
	v := recv(t, tm.C(), "real timer")
	require.False(t, v.Before(before))
	require.False(t, tm.Stop(), "Stop after firing")
}

func TestReal_AfterFunc_runsTheCallback(t *testing.T) {
	c := clock.Real()
	ran := make(chan struct{})
	tm := c.AfterFunc(time.Millisecond, func() { close(ran) })
	require.Nil(t, tm.C())
	recv(t, ran, "real AfterFunc")
}

func TestReal_Timer_Stop_preventsFiring(t *testing.T) {
	c := clock.Real()
	tm := c.NewTimer(time.Hour)
	require.True(t, tm.Stop())
	require.False(t, tm.Stop())

	fn := c.AfterFunc(time.Hour, func() { t.Error("stopped AfterFunc ran") })
	require.True(t, fn.Stop())
}

func TestReal_Timer_Reset_reArms(t *testing.T) {
	c := clock.Real()
	tm := c.NewTimer(time.Hour)
	require.True(t, tm.Reset(time.Millisecond))
	recv(t, tm.C(), "reset real timer")

	ran := make(chan struct{})
	fn := c.AfterFunc(time.Hour, func() { close(ran) })
	require.True(t, fn.Reset(time.Millisecond))
	recv(t, ran, "reset real AfterFunc")
}

func TestClock_implementations(t *testing.T) {
	var _ clock.Clock = clock.Real()
	var _ clock.Clock = clock.NewFake(start)
}
