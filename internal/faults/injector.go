package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/redistest"
)

// Kind is a kind of fault the Injector puts on one node.
type Kind int

const (
	// KillRestart SIGKILLs the node and restarts it with its data after a
	// while (the cluster must be durable for the data to survive).
	KillRestart Kind = iota
	// KillRestartAfterTTL SIGKILLs the node, keeps it down for longer
	// than the longest TTL, and restarts it empty.
	KillRestartAfterTTL
	// RestartEmpty SIGKILLs the node and restarts it empty at once: the
	// node forgets the locks it granted while they are still valid
	// elsewhere. Outside the model unless the client waits out the
	// longest TTL before counting the node again (restart safety).
	RestartEmpty
	// Pause stops the node with SIGSTOP for a while, then SIGCONT.
	Pause
	// ScriptFlush empties the node's script cache (SCRIPT FLUSH).
	ScriptFlush
	// ClientKill closes every client connection of the node, normal and
	// pub/sub, from the admin connection.
	ClientKill
	// Slow adds a fixed latency to the node's traffic (its proxy).
	Slow
	// Jitter adds a small fixed latency and a large random one per chunk.
	Jitter
	// Hole makes the node's proxy a black hole.
	Hole
	// ResetReply makes the node's proxy reset connections mid-reply.
	ResetReply
	// DelayReply makes the node's proxy deliver requests and hold replies
	// back for longer than a node timeout.
	DelayReply
	// TrickleReply makes the node's proxy write replies byte by byte.
	TrickleReply
	// ShrinkTTL makes the lock keys (Config.Keys) on the node expire
	// early: each new value of a key gets its TTL cut to
	// Config.ShrinkFactor of what is left. Outside the model: the node's
	// clock runs fast.
	ShrinkTTL
	numKinds
)

var kindNames = [numKinds]string{"kill-restart", "kill-restart-after-ttl", "restart-empty", "pause",
	"script-flush", "client-kill", "slow", "jitter", "black-hole", "reset-reply", "delay-reply", "trickle-reply", "shrink-ttl"}

// String names the kind.
func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Kinds returns every kind of fault, in order.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// InModel returns the kinds that keep the cluster within the model as long
// as fewer nodes than a quorum can lose (2 of 5) have them at once, and
// the nodes are durable (KillRestart keeps the data): all but RestartEmpty
// and ShrinkTTL.
func InModel() []Kind {
	return slices.DeleteFunc(Kinds(), func(k Kind) bool { return k == RestartEmpty || k == ShrinkTTL })
}

// needsProxy reports whether the kind acts through the node's proxy.
func (k Kind) needsProxy() bool { return k >= Slow && k <= TrickleReply }

// Node is one node under the Injector: the server and, for network
// faults, the proxy in front of it (nil when there is none).
type Node struct {
	Server *redistest.Server
	Proxy  *Proxy
}

// Span is a range of durations [Min, Max] drawn from uniformly.
type Span struct{ Min, Max time.Duration }

// Draw returns a duration in the span, drawn with rng.
func (s Span) Draw(rng *rand.Rand) time.Duration {
	if s.Max <= s.Min {
		return s.Min
	}
	return s.Min + time.Duration(rng.Int63n(int64(s.Max-s.Min)+1))
}

// Config is an Injector's schedule. Zero values are documented per field.
type Config struct {
	// Seed seeds every random choice of the schedule (kinds, nodes,
	// durations). The same seed replays the same sequence of choices; the
	// timing of the run around it differs.
	Seed int64
	// Kinds are drawn from uniformly at each step; repeat a kind to make
	// it more likely. Kinds that need a proxy are skipped on nodes
	// without one. Required.
	Kinds []Kind
	// Nodes are the indexes of the nodes faults may hit; nil means all.
	Nodes []int
	// Groups, when set, makes each fault hit a whole group of nodes at
	// once, with the same kind and durations (for example {1,2} and {3,4},
	// so that the nodes that miss a lock's writes are later the ones that
	// answer). Nodes is then ignored.
	Groups [][]int
	// MaxFaulty is how many nodes may be faulty at once. Default 1.
	MaxFaulty int
	// MaxTTL is the longest lock TTL in use: KillRestartAfterTTL keeps its
	// node down for longer (MaxTTL plus a quarter). Required for that kind.
	MaxTTL time.Duration
	// Exclusion is how long a node that restarted empty still counts as
	// faulty after it answers again: with restart safety, the client does
	// not count it toward a quorum for the longest TTL. Default 0.
	Exclusion time.Duration
	// Gap is the wait between two steps of the schedule. Default 50-150ms.
	Gap Span
	// Hold is how long a lasting fault (down, paused, proxy fault, TTLs
	// shrunk) lasts. Default 50-300ms.
	Hold Span
	// Latency is the delay of Slow and DelayReply, and the jitter of
	// Jitter. Default 50-400ms.
	Latency Span
	// Keys are the lock keys ShrinkTTL acts on.
	Keys []string
	// ShrinkFactor is the share of its TTL a lock key keeps under
	// ShrinkTTL. Default 0.1.
	ShrinkFactor float64
	// Max bounds the number of faults injected. Default 100,000.
	Max int
	// OnRestartEmpty, when set, is called with the node's index after a
	// node came back empty (before it stops counting as faulty), e.g. to
	// plant keys again.
	OnRestartEmpty func(i int)
	// Logf, when set, receives a line per fault.
	Logf func(format string, args ...any)
}

// Stats is what an Injector did.
type Stats struct {
	// Injected counts the faults by kind.
	Injected map[Kind]int
	// MostFaulty is the largest number of nodes faulty at once.
	MostFaulty int
}

// Total returns the number of faults injected.
func (s Stats) Total() int {
	n := 0
	for _, v := range s.Injected {
		n += v
	}
	return n
}

// String lists the faults by kind, in kind order.
func (s Stats) String() string {
	var b []byte
	for _, k := range Kinds() {
		if n := s.Injected[k]; n > 0 {
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = fmt.Appendf(b, "%s %d", k, n)
		}
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// Injector runs a Config's schedule on a set of nodes until Stop.
type Injector struct {
	nodes  []Node
	cfg    Config
	start  time.Time
	cancel context.CancelFunc
	loop   sync.WaitGroup // the schedule
	faults sync.WaitGroup // the faults under way

	mu    sync.Mutex
	rng   *rand.Rand // guarded by mu
	busy  []bool     // per node: faulty now
	nBusy int
	stats Stats
	errs  []error
}

// Start checks cfg and starts its schedule on nodes.
func Start(nodes []Node, cfg Config) (*Injector, error) {
	if len(cfg.Kinds) == 0 {
		return nil, errors.New("faults: no kinds of fault")
	}
	if cfg.Groups == nil {
		if cfg.Nodes == nil {
			for i := range nodes {
				cfg.Nodes = append(cfg.Nodes, i)
			}
		}
		for _, i := range cfg.Nodes {
			cfg.Groups = append(cfg.Groups, []int{i})
		}
	}
	for _, g := range cfg.Groups {
		if len(g) == 0 {
			return nil, errors.New("faults: empty group")
		}
		for _, i := range g {
			if i < 0 || i >= len(nodes) {
				return nil, fmt.Errorf("faults: node %d out of range [0, %d)", i, len(nodes))
			}
		}
	}
	for _, k := range cfg.Kinds {
		if k < 0 || k >= numKinds {
			return nil, fmt.Errorf("faults: unknown kind %d", int(k))
		}
		if k == KillRestartAfterTTL && cfg.MaxTTL <= 0 {
			return nil, errors.New("faults: kill-restart-after-ttl needs MaxTTL")
		}
		if k == ShrinkTTL && len(cfg.Keys) == 0 {
			return nil, errors.New("faults: shrink-ttl needs Keys")
		}
	}
	if cfg.MaxFaulty <= 0 {
		cfg.MaxFaulty = 1
	}
	if cfg.Gap == (Span{}) {
		cfg.Gap = Span{50 * time.Millisecond, 150 * time.Millisecond}
	}
	if cfg.Hold == (Span{}) {
		cfg.Hold = Span{50 * time.Millisecond, 300 * time.Millisecond}
	}
	if cfg.Latency == (Span{}) {
		cfg.Latency = Span{50 * time.Millisecond, 400 * time.Millisecond}
	}
	if cfg.ShrinkFactor <= 0 || cfg.ShrinkFactor >= 1 {
		cfg.ShrinkFactor = 0.1
	}
	if cfg.Max <= 0 {
		cfg.Max = 100_000
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &Injector{
		nodes: nodes, cfg: cfg, start: time.Now(), cancel: cancel,
		rng:   rand.New(rand.NewSource(cfg.Seed)),
		busy:  make([]bool, len(nodes)),
		stats: Stats{Injected: map[Kind]int{}},
	}
	in.loop.Add(1)
	go in.run(ctx)
	return in, nil
}

// Stop ends the schedule, ends every fault under way (restarting killed
// nodes, resuming paused ones, healing proxies), waits for them, and
// returns what was injected and any error of the harness itself.
func (in *Injector) Stop() (Stats, error) {
	in.cancel()
	in.loop.Wait()
	in.faults.Wait()
	in.mu.Lock()
	defer in.mu.Unlock()
	st := Stats{Injected: make(map[Kind]int, len(in.stats.Injected)), MostFaulty: in.stats.MostFaulty}
	for k, v := range in.stats.Injected {
		st.Injected[k] = v
	}
	return st, errors.Join(in.errs...)
}

// run is the schedule: after each gap, one fault on a healthy node, while
// fewer than MaxFaulty are faulty.
func (in *Injector) run(ctx context.Context) {
	defer in.loop.Done()
	for n := 0; n < in.cfg.Max; {
		in.mu.Lock()
		gap := in.cfg.Gap.Draw(in.rng)
		in.mu.Unlock()
		if !Sleep(ctx, gap) {
			return
		}
		in.mu.Lock()
		g, k, ok := in.pickLocked()
		if !ok {
			in.mu.Unlock()
			continue
		}
		hold := in.cfg.Hold.Draw(in.rng)
		lat := in.cfg.Latency.Draw(in.rng)
		for _, i := range g {
			in.busy[i] = true
		}
		in.nBusy += len(g)
		in.stats.MostFaulty = max(in.stats.MostFaulty, in.nBusy)
		in.stats.Injected[k] += len(g)
		in.mu.Unlock()
		n += len(g)
		for _, i := range g {
			in.logf("node %d: %s (hold %v, latency %v)", i, k, hold, lat)
			in.faults.Add(1)
			go func() {
				defer in.faults.Done()
				err := in.inject(ctx, i, k, hold, lat)
				in.mu.Lock()
				in.busy[i] = false
				in.nBusy--
				if err != nil {
					in.errs = append(in.errs, fmt.Errorf("faults: node %d, %s: %w", i, k, err))
				}
				in.mu.Unlock()
			}()
		}
	}
}

// pickLocked draws a kind and a group of healthy nodes it applies to; ok
// is false when no group fits under MaxFaulty.
func (in *Injector) pickLocked() ([]int, Kind, bool) {
	k := in.cfg.Kinds[in.rng.Intn(len(in.cfg.Kinds))]
	var free [][]int
	for _, g := range in.cfg.Groups {
		fits := in.nBusy+len(g) <= in.cfg.MaxFaulty
		for _, i := range g {
			fits = fits && !in.busy[i] && (!k.needsProxy() || in.nodes[i].Proxy != nil)
		}
		if fits {
			free = append(free, g)
		}
	}
	if len(free) == 0 {
		return nil, 0, false
	}
	return free[in.rng.Intn(len(free))], k, true
}

// inject puts fault k on node i, keeps it for hold (or until ctx ends),
// and heals it.
func (in *Injector) inject(ctx context.Context, i int, k Kind, hold, lat time.Duration) error {
	s, p := in.nodes[i].Server, in.nodes[i].Proxy
	switch k {
	case KillRestart:
		if err := s.Kill(); err != nil {
			return err
		}
		Sleep(ctx, hold)
		return s.Restart()
	case KillRestartAfterTTL:
		if err := s.Kill(); err != nil {
			return err
		}
		if !Sleep(ctx, max(hold, in.cfg.MaxTTL+in.cfg.MaxTTL/4)) {
			// Stopped early: the node has not been down long enough to
			// come back empty within the model.
			return s.Restart()
		}
		return in.restartEmpty(ctx, i, s)
	case RestartEmpty:
		if err := s.Kill(); err != nil {
			return err
		}
		return in.restartEmpty(ctx, i, s)
	case Pause:
		if err := s.Pause(); err != nil {
			return err
		}
		Sleep(ctx, hold)
		return s.Resume()
	case ScriptFlush:
		_, err := s.Do("SCRIPT", "FLUSH")
		return err
	case ClientKill:
		_, err1 := s.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		_, err2 := s.Do("CLIENT", "KILL", "TYPE", "pubsub")
		return errors.Join(err1, err2)
	case ShrinkTTL:
		return in.shrink(ctx, s, hold)
	}
	// A proxy fault.
	f := Fault{}
	switch k {
	case Slow:
		f = Fault{Mode: Latency, Delay: lat}
	case Jitter:
		f = Fault{Mode: Latency, Delay: time.Millisecond, Jitter: lat}
	case Hole:
		f = Fault{Mode: BlackHole}
	case ResetReply:
		f = Fault{Mode: Reset}
	case DelayReply:
		f = Fault{Mode: DelayReplies, Delay: lat}
	case TrickleReply:
		f = Fault{Mode: Trickle, Delay: time.Millisecond + lat/100}
	}
	p.Set(f)
	Sleep(ctx, hold)
	p.Heal()
	if k == Slow || k == Jitter || k == DelayReply {
		// Chunks already held back still arrive late: the node is slow
		// until they are through.
		Sleep(ctx, lat)
	}
	return nil
}

// restartEmpty brings a killed node back empty, tells OnRestartEmpty, and
// keeps the node counted as faulty for the exclusion time.
func (in *Injector) restartEmpty(ctx context.Context, i int, s *redistest.Server) error {
	if err := s.RestartEmpty(); err != nil {
		return err
	}
	if in.cfg.OnRestartEmpty != nil {
		in.cfg.OnRestartEmpty(i)
	}
	Sleep(ctx, in.cfg.Exclusion)
	return nil
}

// shrinkScript cuts the TTL of a lock key to a share of what is left, once
// per value: ARGV[1] the share, ARGV[2] the value it last cut. It returns
// the key's value.
var shrinkScript = redis.NewScript(1, `
local v = redis.call("GET", KEYS[1])
if not v or v == ARGV[2] then return v end
local t = redis.call("PTTL", KEYS[1])
if t > 0 then redis.call("PEXPIRE", KEYS[1], math.max(1, math.floor(t * tonumber(ARGV[1])))) end
return v`)

// shrinkEvery is how often ShrinkTTL looks at the keys.
const shrinkEvery = 2 * time.Millisecond

// shrink cuts the TTL of every new value of the lock keys on s for d.
func (in *Injector) shrink(ctx context.Context, s *redistest.Server, d time.Duration) error {
	conn, err := redis.Dial("tcp", s.Addr(), redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
	if err != nil {
		return nil // the node is down: nothing to shrink
	}
	defer conn.Close()
	last := make(map[string]string, len(in.cfg.Keys))
	end := time.Now().Add(d)
	for n := 0; n < 1_000_000 && time.Now().Before(end); n++ {
		for _, key := range in.cfg.Keys {
			v, err := redis.String(shrinkScript.Do(conn, key, in.cfg.ShrinkFactor, last[key]))
			if errors.Is(err, redis.ErrNil) {
				continue
			}
			if err != nil {
				return nil // the node went away: the fault ends with it
			}
			last[key] = v
		}
		if !Sleep(ctx, shrinkEvery) {
			return nil
		}
	}
	return nil
}

func (in *Injector) logf(format string, args ...any) {
	if in.cfg.Logf != nil {
		in.cfg.Logf("faults %6.2fs: "+format, append([]any{time.Since(in.start).Seconds()}, args...)...)
	}
}

// Sleep waits for d or until ctx ends, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
