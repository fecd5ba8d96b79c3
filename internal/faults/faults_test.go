package faults

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func dial(t *testing.T, addr string, timeout time.Duration) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(timeout),
		redis.DialReadTimeout(timeout), redis.DialWriteTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target, 1)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxy_refusesATargetOffLoopback(t *testing.T) {
	_, err := NewProxy("10.0.0.1:6379", 1)
	require.ErrorContains(t, err, "not on 127.0.0.1")
}

func TestProxy_modes(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	p := newProxy(t, s.Addr())

	c := dial(t, p.Addr(), time.Second)
	pong, err := redis.String(c.Do("PING"))
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)

	t.Run("latency both ways", func(t *testing.T) {
		p.Set(Fault{Mode: Latency, Delay: 60 * time.Millisecond})
		defer p.Heal()
		start := time.Now()
		_, err := c.Do("PING")
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 120*time.Millisecond)
	})
	t.Run("replies delayed, requests delivered", func(t *testing.T) {
		p.Set(Fault{Mode: DelayReplies, Delay: 300 * time.Millisecond})
		defer p.Heal()
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := c.Do("SET", "delayed", "1"); done <- err }()
		require.Eventually(t, func() bool {
			v, _ := redis.String(s.Do("GET", "delayed"))
			return v == "1"
		}, 5*time.Second, 5*time.Millisecond, "the SET runs although its reply is held back")
		require.NoError(t, <-done)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the reply was held back")
	})
	t.Run("trickle", func(t *testing.T) {
		p.Set(Fault{Mode: Trickle, Delay: 5 * time.Millisecond})
		defer p.Heal()
		start := time.Now()
		pong, err := redis.String(c.Do("PING")) // "+PONG\r\n": 7 bytes, 6 gaps
		require.NoError(t, err)
		require.Equal(t, "PONG", pong)
		require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	})
	t.Run("reset mid-reply", func(t *testing.T) {
		c := dial(t, p.Addr(), time.Second)
		p.Set(Fault{Mode: Reset})
		defer p.Heal()
		_, err := c.Do("SET", "reset", "1")
		require.Error(t, err)
		require.False(t, isTimeout(err), "a reset, not a timeout: %v", err)
		v, err := redis.String(s.Do("GET", "reset"))
		require.NoError(t, err)
		require.Equal(t, "1", v, "the request was delivered")
	})
	t.Run("black hole", func(t *testing.T) {
		c := dial(t, p.Addr(), 200*time.Millisecond)
		p.Set(Fault{Mode: BlackHole})
		_, err := c.Do("SET", "hole", "1")
		require.True(t, isTimeout(err), "want a timeout, got %v", err)
		fresh := dial(t, p.Addr(), 200*time.Millisecond) // accepted, never answered
		_, err = fresh.Do("PING")
		require.True(t, isTimeout(err), "want a timeout, got %v", err)
		_, err = redis.String(s.Do("GET", "hole"))
		require.ErrorIs(t, err, redis.ErrNil, "nothing was delivered")
		p.Heal()
		// The swallowed connections are closed, not resumed with bytes missing.
		require.Eventually(t, func() bool { return p.Conns() <= 1 }, time.Second, 5*time.Millisecond)
		c2 := dial(t, p.Addr(), time.Second)
		_, err = c2.Do("PING")
		require.NoError(t, err)
	})
	t.Run("node down", func(t *testing.T) {
		require.NoError(t, s.Kill())
		// The proxy drops the connection it cannot carry on: the dial
		// itself may see the reset, or the first command.
		c, err := redis.Dial("tcp", p.Addr(), redis.DialConnectTimeout(time.Second),
			redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
		if err == nil {
			_, err = c.Do("PING")
			c.Close()
		}
		require.Error(t, err)
		require.NoError(t, s.Restart())
	})
}

func TestClock_runsAtItsRate(t *testing.T) {
	fast, slow := NewClock(2), NewClock(0.5)
	a := time.Now()
	t0f, t0s := fast.Now(), slow.Now()
	b := time.Now()
	time.Sleep(50 * time.Millisecond)
	c := time.Now()
	elf, els := fast.Since(t0f), slow.Since(t0s)
	d := time.Now()
	// The real time between the readings is at least c-b and at most d-a.
	require.GreaterOrEqual(t, elf, 2*c.Sub(b))
	require.LessOrEqual(t, elf, 2*d.Sub(a))
	require.GreaterOrEqual(t, els, c.Sub(b)/2)
	require.LessOrEqual(t, els, d.Sub(a)/2)
	require.Equal(t, 50*time.Millisecond, fast.RealDuration(100*time.Millisecond))

	start := time.Now()
	tm := fast.NewTimer(100 * time.Millisecond) // 50ms of real time
	ref := time.NewTimer(150 * time.Millisecond)
	defer ref.Stop()
	select {
	case <-tm.C():
	case <-ref.C:
		t.Fatal("a timer on a clock running twice as fast fired after a real one of 1.5 times its duration")
	}
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	start = time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	slow.AfterFunc(10*time.Millisecond, wg.Done) // 20ms of real time
	wg.Wait()
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.Panics(t, func() { NewClock(0) })
}

func TestMono_increases(t *testing.T) {
	a := Mono()
	time.Sleep(time.Millisecond)
	require.Greater(t, Mono(), a)
}

func TestChecker_findsOverlapsLateWritesAndFenceInversions(t *testing.T) {
	c := NewChecker()
	ms := time.Millisecond
	c.Add(Hold{Key: "a", Worker: "w1", Start: 0, End: 10 * ms, Fence: 1})
	c.Add(Hold{Key: "a", Worker: "w2", Start: 10 * ms, End: 20 * ms, Fence: 2}) // touches, no overlap
	c.Add(Hold{Key: "a", Worker: "w3", Start: 15 * ms, End: 25 * ms, Fence: 2}) // overlaps w2, same fence
	c.Add(Hold{Key: "b", Worker: "w1", Start: 0, End: 10 * ms, LastWrite: 30 * ms})
	c.Add(Hold{Key: "b", Worker: "w2", Start: 20 * ms, End: 40 * ms, LastWrite: 25 * ms})
	c.Add(Hold{Key: "b", Worker: "w3", Start: 50 * ms, End: 50 * ms}) // empty window
	require.Equal(t, 6, c.Len())

	ov := c.Overlaps()
	require.Len(t, ov, 1)
	require.Equal(t, "w2", ov[0].A.Worker)
	require.Equal(t, "w3", ov[0].B.Worker)
	require.True(t, strings.Contains(ov[0].String(), "overlap 5ms"), ov[0].String())

	late := c.LateWrites()
	require.Len(t, late, 1)
	require.Equal(t, "w1", late[0].A.Worker)
	require.Equal(t, "w2", late[0].B.Worker)

	inv := c.FenceInversions()
	require.Len(t, inv, 1)
	require.Equal(t, "w3", inv[0].B.Worker)
}

func TestChecker_readersMayShareAndSemaphoresHoldUpToTheirPermits(t *testing.T) {
	c := NewChecker()
	ms := time.Millisecond
	// A read-write lock: r1 and r2 share, w1 overlaps r2, w2 follows.
	c.Add(Hold{Key: "rw", Worker: "r1", Shared: true, Start: 0, End: 10 * ms})
	c.Add(Hold{Key: "rw", Worker: "r2", Shared: true, Start: 5 * ms, End: 20 * ms})
	c.Add(Hold{Key: "rw", Worker: "w1", Start: 15 * ms, End: 25 * ms})
	c.Add(Hold{Key: "rw", Worker: "w2", Start: 25 * ms, End: 30 * ms})
	// A semaphore of two permits: three holders at once from 12ms to 14ms.
	c.Add(Hold{Key: "sem", Worker: "s1", Permits: 2, Start: 0, End: 14 * ms})
	c.Add(Hold{Key: "sem", Worker: "s2", Permits: 2, Start: 5 * ms, End: 20 * ms})
	c.Add(Hold{Key: "sem", Worker: "s3", Permits: 2, Start: 10 * ms, End: 12 * ms}) // s1, s2 and s3: too many
	c.Add(Hold{Key: "sem", Worker: "s4", Permits: 2, Start: 14 * ms, End: 30 * ms}) // s1 ended: two
	c.Add(Hold{Key: "sem", Worker: "s5", Permits: 2, Start: 25 * ms, End: 25 * ms}) // empty window
	// An election: two leaders of term 3.
	c.Add(Hold{Key: "e", Worker: "l1", Start: 0, End: 10 * ms, Fence: 3})
	c.Add(Hold{Key: "e", Worker: "l2", Start: 10 * ms, End: 20 * ms, Fence: 3})

	ov := c.Overlaps()
	require.Len(t, ov, 1, "%v", ov)
	require.Equal(t, "r2", ov[0].A.Worker)
	require.Equal(t, "w1", ov[0].B.Worker)
	require.Equal(t, 1, c.SharedOverlaps())

	cr := c.Crowds()
	require.Len(t, cr, 1, "%v", cr)
	require.Equal(t, 10*ms, cr[0].At)
	require.Len(t, cr[0].Holds, 3)
	require.Contains(t, cr[0].String(), "3 holders of 2 permits")
	require.Equal(t, 3, c.Peak("sem"))
	require.Equal(t, 2, c.Peak("rw"))

	twice := c.TermsHeldTwice()
	require.Len(t, twice, 1)
	require.Equal(t, "l2", twice[0].B.Worker)
	require.Len(t, c.FenceInversions(), 1)
}

func TestStore_fencedRegisterRefusesLowerFencesAndCountsStaleWrites(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	st := NewStore(s.Addr())
	defer st.Close()
	ms := time.Millisecond
	for _, tc := range []struct {
		fence uint64
		start time.Duration
		want  WriteResult
	}{
		{5, 10 * ms, Accepted},
		{5, 10 * ms, Accepted}, // the same holder again
		{4, 5 * ms, Refused},
		{7, 20 * ms, Accepted},
		{8, 15 * ms, AcceptedStale}, // a higher fence from an earlier acquisition
	} {
		got, err := st.FencedWrite("k", tc.fence, tc.start, 1)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "fence %d", tc.fence)
	}
	r, err := st.Register("k")
	require.NoError(t, err)
	require.Equal(t, Register{Fence: 8, Writes: 4, Refused: 1, Stale: 1}, r)

	n, err := st.Read("k")
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, st.Write("k", 41))
	n, err = st.Read("k")
	require.NoError(t, err)
	require.Equal(t, int64(41), n)
	empty, err := st.Register("none")
	require.NoError(t, err)
	require.Zero(t, empty)
}

func TestInjector_keepsToMaxFaultyAndHealsOnStop(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{Durable: true})
	nodes := make([]Node, 5)
	for i, s := range cl.Nodes() {
		nodes[i] = Node{Server: s, Proxy: newProxy(t, s.Addr())}
	}
	var mu sync.Mutex
	emptied := 0
	in, err := Start(nodes, Config{
		Seed: 7, Kinds: append(InModel(), RestartEmpty, ShrinkTTL), MaxFaulty: 2,
		MaxTTL: 100 * time.Millisecond, Exclusion: 50 * time.Millisecond,
		Gap: Span{5 * time.Millisecond, 20 * time.Millisecond}, Hold: Span{20 * time.Millisecond, 80 * time.Millisecond},
		Latency: Span{10 * time.Millisecond, 50 * time.Millisecond}, Keys: []string{"k"},
		OnRestartEmpty: func(int) { mu.Lock(); emptied++; mu.Unlock() },
		Logf:           t.Logf,
	})
	require.NoError(t, err)
	time.Sleep(2 * time.Second)
	st, err := in.Stop()
	require.NoError(t, err)
	t.Logf("injected %d: %v", st.Total(), st)
	require.LessOrEqual(t, st.MostFaulty, 2)
	require.Equal(t, 2, st.MostFaulty, "the schedule reaches its limit")
	require.Greater(t, st.Total(), 10)
	for i, n := range nodes {
		require.True(t, n.Server.Running(), "node %d", i)
		require.False(t, n.Server.Paused(), "node %d", i)
		require.Equal(t, Pass, n.Proxy.Fault().Mode, "node %d", i)
		c := dial(t, n.Proxy.Addr(), time.Second)
		_, err := c.Do("PING")
		require.NoError(t, err, "node %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	// A kill-restart-after-ttl cut short by Stop restarts with the data.
	emptyKinds := st.Injected[RestartEmpty] + st.Injected[KillRestartAfterTTL]
	require.LessOrEqual(t, emptied, emptyKinds)
	require.GreaterOrEqual(t, emptied, emptyKinds-2)
}

func TestInjector_rejectsABadConfig(t *testing.T) {
	_, err := Start(nil, Config{})
	require.Error(t, err)
	_, err = Start(make([]Node, 1), Config{Kinds: []Kind{KillRestartAfterTTL}})
	require.ErrorContains(t, err, "MaxTTL")
	_, err = Start(make([]Node, 1), Config{Kinds: []Kind{Pause}, Nodes: []int{3}})
	require.ErrorContains(t, err, "out of range")
	require.Equal(t, "black-hole", Hole.String())
	require.Equal(t, "reset", Reset.String())
}

func TestInjector_groupsFailTogether(t *testing.T) {
	cl := redistest.StartT(t, 4)
	nodes := make([]Node, 4)
	for i, s := range cl.Nodes() {
		nodes[i] = Node{Server: s}
	}
	var mu sync.Mutex
	var lines []string
	in, err := Start(nodes, Config{
		Seed: 3, Kinds: []Kind{Pause}, Groups: [][]int{{0, 1}, {2, 3}}, MaxFaulty: 2,
		Gap: Span{Min: time.Millisecond, Max: 5 * time.Millisecond}, Hold: Span{Min: 10 * time.Millisecond, Max: 30 * time.Millisecond},
		Logf: func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, strings.TrimSpace(fmt.Sprintf(format, args...)))
		},
	})
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	st, err := in.Stop()
	require.NoError(t, err)
	require.Equal(t, 2, st.MostFaulty, "one group at a time")
	require.Greater(t, st.Injected[Pause], 4)
	require.Zero(t, st.Injected[Pause]%2, "whole groups")
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i+1 < len(lines); i += 2 {
		a, b := lines[i][strings.Index(lines[i], "node"):], lines[i+1][strings.Index(lines[i+1], "node"):]
		pair := a[:6] + b[:6]
		require.Contains(t, []string{"node 0node 1", "node 2node 3"}, pair, "%q then %q", lines[i], lines[i+1])
	}
	for _, n := range nodes {
		require.False(t, n.Server.Paused())
	}
}

// A positive duration stays positive on a fast clock: a timer for the 1ns
// left of a deadline must not fire at once (in a synctest bubble the
// simulator's extender then retried forever at one virtual instant).
func TestClock_RealDurationOfAPositiveDurationIsPositive(t *testing.T) {
	c := NewClock(1.002)
	for _, d := range []time.Duration{1, 2, 999} {
		require.Positive(t, c.RealDuration(d), "RealDuration(%v)", d)
	}
	require.Equal(t, time.Duration(0), c.RealDuration(0))
	require.Equal(t, 998*time.Millisecond, c.RealDuration(1000*time.Millisecond).Round(time.Millisecond))
}
