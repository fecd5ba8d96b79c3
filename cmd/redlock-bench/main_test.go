package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runTool runs the tool as main does, without a process of its own, and
// returns what it wrote to stdout and stderr.
func runTool(t *testing.T, ctx context.Context, cfg config) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(ctx, cfg, &out, &errOut)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	return out.String(), errOut.String()
}

var (
	roundsLine = regexp.MustCompile(`(?m)^rounds +(\d+) lock\+unlock \((\d+)/s\)$`)
	headerLine = regexp.MustCompile(`(?m)^ *latency +count +p50 +p90 +p99 +max *$`)
	ratioLine  = regexp.MustCompile(`(?m)^ratio +pipelined/plain: rounds/s ([0-9.]+)x, acquire p50 ([0-9.]+)x$`)
)

// latencyRow matches a table row: a name, a nonzero count and four
// durations.
func latencyRowRE(name string) *regexp.Regexp {
	d := `[0-9.]+(µs|ms|s)`
	return regexp.MustCompile(`(?m)^ *` + name + ` +[1-9][0-9]* +` + d + ` +` + d + ` +` + d + ` +` + d + ` *$`)
}

// requireReport checks that out is a report whose every run has some
// rounds and both latency rows, and returns the rounds of each run.
func requireReport(t *testing.T, out string) []int {
	t.Helper()
	all := roundsLine.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, all, "no rounds line")
	var rounds []int
	for _, m := range all {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.Positive(t, n)
		rounds = append(rounds, n)
	}
	require.Regexp(t, headerLine, out)
	require.Regexp(t, latencyRowRE("acquire"), out)
	require.Regexp(t, latencyRowRE("release"), out)
	require.Regexp(t, `(?m)^nodes +5 \(quorum 3\)`, out)
	return rounds
}

// testConfig is a short run. Its node timeout is generous, so that a
// machine loaded by other tests (and the race detector) causes no lock
// errors.
func testConfig(backend, mode string) config {
	cfg := defaultConfig()
	cfg.backend, cfg.mode = backend, mode
	cfg.duration = 300 * time.Millisecond
	cfg.nodeTimeout = 500 * time.Millisecond
	switch mode {
	case modeThroughput:
		cfg.workers = 4
	case modeContended:
		cfg.workers, cfg.hold = 4, 2*time.Millisecond
	case modeTakeover:
		// Some 20ms a takeover when nothing stalls: up to a few dozen in
		// the run. With a 500ms node timeout, runs this short stalled
		// more often (the key kept for a waiting Lock call that did not
		// take it), leaving too few takeovers to check; beside the other
		// packages' -race tests, a 600ms run once made a single takeover.
		cfg.workers, cfg.hold, cfg.ttl = 4, 2*time.Millisecond, 20*time.Millisecond
		cfg.duration, cfg.nodeTimeout = 1200*time.Millisecond, 100*time.Millisecond
	}
	return cfg
}

// requireRedis skips the test without redis-server, or fails it when
// REDLOCK_REQUIRE_REDIS=1.
func requireRedis(t *testing.T) {
	t.Helper()
	if _, err := redistest.Path(); err != nil {
		if os.Getenv("REDLOCK_REQUIRE_REDIS") == "1" {
			t.Fatalf("%v (REDLOCK_REQUIRE_REDIS=1)", err)
		}
		t.Skipf("%v (set REDLOCK_REQUIRE_REDIS=1 to fail instead of skipping)", err)
	}
}

// requireMode checks what each mode adds to the report.
func requireMode(t *testing.T, mode, out string) {
	t.Helper()
	switch mode {
	case modeLatency:
		require.Regexp(t, `(?m)^mode +latency: 1 worker on 1 client, keys distinct, ttl 10s, hold 0s$`, out)
		require.Regexp(t, latencyRowRE("floor"), out)
		require.Regexp(t, `(?m)^floor +lock p50 / floor p50 = [0-9.]+x `, out)
	case modeThroughput:
		require.Regexp(t, `(?m)^mode +throughput: 4 workers on 1 client, keys distinct,`, out)
		require.NotRegexp(t, `(?m)^ *floor `, out)
	case modeContended:
		require.Regexp(t, `(?m)^mode +contended: 4 workers on 4 clients, keys one, ttl 10s, hold 2ms$`, out)
		require.Regexp(t, latencyRowRE("handoff"), out)
		require.Regexp(t, latencyRowRE("idle"), out)
		require.Regexp(t, latencyRowRE("held"), out)
		require.Regexp(t, `(?m)^contended [1-9][0-9]* acquisitions \([0-9.]+/s\), efficiency [0-9.]+ `, out)
		require.Regexp(t, `(?m)^ +wait \(acquire row\) p99 [0-9.]+(µs|ms|s), max `, out)
		require.Regexp(t, `(?m)^ +hand-off p50 / uncontended lock p50 = [0-9.]+x, idle p50 / it = [0-9.]+x \(reference: 1 worker`, out)
		require.NotRegexp(t, `(?m)^ *takeover `, out)
	case modeTakeover:
		require.Regexp(t, `(?m)^mode +takeover: 4 workers on 4 clients, keys one, ttl 20ms, hold 2ms$`, out)
	}
}

// requireTakeoverReport checks a takeover-mode table: some takeovers,
// and nothing of what applies only to locks that are released.
func requireTakeoverReport(t *testing.T, out string) {
	t.Helper()
	require.Regexp(t, headerLine, out)
	require.Regexp(t, latencyRowRE("acquire"), out)
	require.Regexp(t, latencyRowRE("takeover"), out)
	require.Regexp(t, `(?m)^nodes +5 \(quorum 3\)`, out)
	require.Regexp(t, `(?m)^rounds +[1-9][0-9]* lock, hold 2ms, die without Unlock \([0-9.]+/s\)$`, out)
	require.Regexp(t, `(?m)^takeover +[1-9][0-9]* takeovers of a dead holder's lock: p50 [0-9.]+(µs|ms|s), p99 `, out)
	require.Regexp(t, `(?m)^ +wait \(acquire row\) includes the TTL; [0-9]+ of [1-9][0-9]* taken over by the worker that had died .*; [0-9]+ before the expiry, counted as 0$`, out)
	require.Regexp(t, `(?m)^leftover +(no other lock key|[0-9]+ other lock keys?) on the nodes after the clients closed; [0-9]+ keys? of holders that died \(told apart by their tokens, not counted: they expire with the TTL\)$`, out)
	for _, gone := range []string{"release", "handoff"} {
		require.NotRegexp(t, `(?m)^ *`+gone+` `, out)
	}
	require.NotContains(t, out, "efficiency")
	require.NotContains(t, out, "lock+unlock")
}

// requireModeReport checks the report of a run in the given mode.
func requireModeReport(t *testing.T, mode, out string) {
	t.Helper()
	if mode == modeTakeover {
		requireTakeoverReport(t, out)
	} else {
		requireReport(t, out)
	}
	requireMode(t, mode, out)
}

func TestModesMiniredis(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out, errOut := runTool(t, context.Background(), testConfig(backendMiniredis, mode))
			requireModeReport(t, mode, out)
			require.Regexp(t, `(?m)^backend +miniredis`, out)
			require.Regexp(t, `(?m)^errors +(none|[0-9]+)$`, out)
			require.Contains(t, errOut, "NOT representative")
			require.Contains(t, errOut, "apt-get install redis-server")
		})
	}
}

func TestModesRedisServer(t *testing.T) {
	requireRedis(t)
	before := childProcesses(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out, errOut := runTool(t, context.Background(), testConfig(backendRedis, mode))
			requireModeReport(t, mode, out)
			require.Regexp(t, `(?m)^backend +redis-server [0-9]+\.[0-9]+\.[0-9]+, 5 local nodes started by the tool$`, out)
			require.Contains(t, out, "errors    none")
			require.NotContains(t, errOut, "NOT representative")
		})
	}
	require.Equal(t, before, childProcesses(t), "redis-server processes left behind")
}

func TestJSON(t *testing.T) {
	for _, mode := range []string{modeLatency, modeContended} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(backendMiniredis, mode)
			cfg.json = true
			out, _ := runTool(t, context.Background(), cfg)
			var rep map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout must be only JSON")
			for _, k := range []string{"mode", "backend", "nodes", "quorum", "workers", "clients", "ttl_us", "hold_us", "duration_us", "runs"} {
				require.Contains(t, rep, k)
			}
			require.Equal(t, mode, rep["mode"])
			require.Equal(t, rep["workers"], rep["clients"], "one client per worker by default")
			require.EqualValues(t, 5, rep["nodes"])
			require.EqualValues(t, 3, rep["quorum"])
			runs := rep["runs"].([]any)
			require.Len(t, runs, 1)
			r := runs[0].(map[string]any)
			require.Equal(t, poolPipelined, r["pool"])
			require.Positive(t, r["rounds"])
			require.Positive(t, r["rounds_per_s"])
			require.Contains(t, r, "allocs_per_round")
			require.Contains(t, r, "errors")
			for _, k := range []string{"acquire", "release"} {
				requireSummary(t, r[k])
			}
			require.Equal(t, true, r["leftover_checked"])
			require.NotContains(t, r, "takeover")
			if mode == modeLatency {
				floor := r["floor"].(map[string]any)
				requireSummary(t, floor["latency"])
				require.Positive(t, floor["lock_p50_ratio"])
			} else {
				c := r["contended"].(map[string]any)
				require.Positive(t, c["acquisitions"])
				require.Positive(t, c["acquisitions_per_s"])
				require.Positive(t, c["efficiency"])
				requireSummary(t, c["handoff"])
				requireSummary(t, c["idle"])
				requireSummary(t, c["held"])
				requireSummary(t, c["reference"])
				requireSummary(t, c["reference_unlock"])
				require.Contains(t, c, "handoff_ratio") // 0 when the next Lock returns before the Unlock
				require.Positive(t, c["idle_ratio"])
				held := c["held"].(map[string]any)
				require.GreaterOrEqual(t, held["p50_us"], float64(2000), "a hold lasts at least -hold")
			}
		})
	}
}

// requireSummary checks a JSON latency summary.
func requireSummary(t *testing.T, v any) {
	t.Helper()
	s, ok := v.(map[string]any)
	require.True(t, ok, "summary %v", v)
	require.Positive(t, s["count"])
	for _, k := range []string{"p50_us", "p90_us", "p99_us", "p99_9_us", "max_us", "mean_us"} {
		require.Contains(t, s, k)
	}
	require.LessOrEqual(t, s["p50_us"], s["p99_us"])
	require.LessOrEqual(t, s["p99_us"], s["max_us"])
}

func TestPoolBothAndPlot(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"latency.svg", "latency.png"} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(backendMiniredis, modeThroughput)
			cfg.pool, cfg.plot = poolBoth, filepath.Join(dir, name)
			out, _ := runTool(t, context.Background(), cfg)
			require.Len(t, requireReport(t, out), 2)
			require.Regexp(t, `(?m)^pool +pipelined, `, out)
			require.Regexp(t, `(?m)^pool +plain, `, out)
			require.Regexp(t, ratioLine, out)

			b, err := os.ReadFile(cfg.plot)
			require.NoError(t, err)
			require.NotEmpty(t, b)
			if strings.HasSuffix(name, ".svg") {
				require.Contains(t, string(b[:min(len(b), 200)]), "<svg")
				require.Contains(t, string(b), "pipelined")
				require.Contains(t, string(b), "plain")
			} else {
				require.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")), "not a PNG")
			}
		})
	}
}

func TestPoolBothJSONRatio(t *testing.T) {
	cfg := testConfig(backendMiniredis, modeLatency)
	cfg.pool, cfg.json = poolBoth, true
	out, _ := runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Runs, 2)
	require.NotNil(t, rep.Ratio)
	require.Positive(t, rep.Ratio.RoundsPerSec)
	require.Positive(t, rep.Ratio.AcquireP50)
}

func TestPauseNode(t *testing.T) {
	requireRedis(t)
	before := childProcesses(t)
	cfg := testConfig(backendRedis, modeLatency)
	// The default node timeout: how long a paused node can hold up a
	// round is what this measures.
	cfg.duration, cfg.pauseNode, cfg.nodeTimeout = 600*time.Millisecond, 1, defaultConfig().nodeTimeout
	out, _ := runTool(t, context.Background(), cfg)
	requireReport(t, out)
	require.Regexp(t, latencyRowRE("before"), out)
	require.Regexp(t, latencyRowRE("after"), out)
	require.Regexp(t, `(?m)^fault +node 1 \(127\.0\.0\.1:[0-9]+\) paused 200ms into the run: acquire p99 after/before = [0-9.]+x \(before `, out)
	require.NotContains(t, out, "fault error")
	require.Equal(t, before, childProcesses(t), "redis-server processes left behind")
}

func TestKillNodeMiniredis(t *testing.T) {
	// With -pool both the killed node is restarted for the second run.
	cfg := testConfig(backendMiniredis, modeThroughput)
	cfg.pool, cfg.killNode, cfg.faultAfter, cfg.json = poolBoth, 4, 100*time.Millisecond, true
	out, _ := runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Runs, 2)
	for _, r := range rep.Runs {
		require.NotNil(t, r.Fault, r.Pool)
		require.Equal(t, faultKill, r.Fault.Kind)
		require.True(t, r.Fault.Happened, r.Pool)
		require.Empty(t, r.Fault.Error, r.Pool)
		require.Positive(t, r.Fault.Before.Count, r.Pool)
		require.Positive(t, r.Fault.After.Count, r.Pool)
		require.Positive(t, r.Fault.P99Ratio, r.Pool)
	}
}

func TestFaultRefused(t *testing.T) {
	_, err := parseFlags([]string{"-addrs", "127.0.0.1:1", "-kill-node", "0"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-addrs")

	cfg := testConfig(backendAuto, modeLatency)
	cfg.addrs, cfg.killNode = []string{"127.0.0.1:1"}, 0
	var out bytes.Buffer
	err = run(context.Background(), cfg, &out, &bytes.Buffer{})
	require.ErrorContains(t, err, "only nodes the tool starts")
	require.Empty(t, out.String())

	cfg = testConfig(backendMiniredis, modeLatency)
	cfg.pauseNode = 0
	err = run(context.Background(), cfg, &out, &bytes.Buffer{})
	require.ErrorContains(t, err, "cannot be paused")
	require.Empty(t, out.String())
}

func TestRunExistingNodes(t *testing.T) {
	var addrs []string
	var servers []*miniredis.Miniredis
	for range 5 {
		m := miniredis.NewMiniRedis()
		require.NoError(t, m.Start())
		t.Cleanup(m.Close)
		servers = append(servers, m)
		addrs = append(addrs, m.Addr())
	}
	cfg := testConfig(backendAuto, modeThroughput)
	cfg.addrs, cfg.workers = addrs, 3
	lockKey := regexp.MustCompile(`^redlock-bench:[0-9a-f]+:pipelined:w[0-9]+$`)
	out, errOut := runTool(t, context.Background(), cfg)
	requireReport(t, out)
	require.Regexp(t, `(?m)^backend +.*existing nodes$`, out)
	require.NotContains(t, errOut, "NOT representative")
	for _, m := range servers {
		_, err := info(m.Addr(), "")
		require.NoError(t, err, "the tool must not stop nodes it did not start")
		// Every lock was unlocked, but redlock can leave a key behind when
		// a SET was still in flight at Unlock; it must at least expire,
		// within the lock TTL. What the client keeps beside a lock key
		// ("<key>:...", its queue of waiting Lock calls) must expire too.
		for _, k := range m.Keys() {
			t.Logf("%s: key %s left behind, ttl %v", m.Addr(), k, m.TTL(k))
			require.Positive(t, m.TTL(k), "key %s on %s never expires", k, m.Addr())
			if lockKey.MatchString(k) {
				require.LessOrEqual(t, m.TTL(k), cfg.withDefaults().ttl)
			}
		}
	}
}

func TestRunInterrupted(t *testing.T) {
	cfg := testConfig(backendMiniredis, modeLatency)
	cfg.duration, cfg.pool = time.Minute, poolBoth
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	out, errOut := runTool(t, ctx, cfg)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Len(t, requireReport(t, out), 1, "the second pool kind must not run after an interrupt")
	require.Contains(t, out, "interrupted")
	require.Contains(t, errOut, "interrupted")
}

func TestRunBadTTL(t *testing.T) {
	cfg := testConfig(backendMiniredis, modeLatency)
	cfg.ttl = time.Millisecond // not above the drift allowance
	var out, errOut bytes.Buffer
	err := run(context.Background(), cfg, &out, &errOut)
	require.ErrorContains(t, err, "ttl")
	require.Empty(t, out.String())
}

// childProcesses returns the pids of this process's children, read from
// /proc; it skips the test where there is no /proc.
func childProcesses(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("cannot list processes: %v", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(self) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, defaultConfig(), cfg)
	d := cfg.withDefaults()
	require.Equal(t, modeLatency, d.mode)
	require.Equal(t, 1, d.workers)
	require.Equal(t, 1, d.clients)
	require.Equal(t, 10*time.Second, d.ttl)
	require.Equal(t, time.Duration(0), d.hold)
	require.Equal(t, []string{poolPipelined}, d.poolKinds())

	cfg, err = parseFlags([]string{"-addrs", "a:1, b:2,", "-duration", "1s", "-workers", "32",
		"-ttl", "2s", "-node-timeout", "20ms", "-mode", "throughput", "-pool", "both",
		"-hold", "1ms", "-json", "-plot", "x.svg", "-floor"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2"}, cfg.addrs)
	require.Equal(t, time.Second, cfg.duration)
	require.Equal(t, 32, cfg.workers)
	require.Equal(t, 1, cfg.withDefaults().clients)
	require.Equal(t, 2*time.Second, cfg.ttl)
	require.Equal(t, 20*time.Millisecond, cfg.nodeTimeout)
	require.Equal(t, modeThroughput, cfg.mode)
	require.Equal(t, []string{poolPipelined, poolPlain}, cfg.poolKinds())
	require.Equal(t, time.Millisecond, cfg.hold)
	require.True(t, cfg.json)
	require.True(t, cfg.floor)
	require.Equal(t, "x.svg", cfg.plot)

	cfg, err = parseFlags([]string{"-mode", "contended"}, &bytes.Buffer{})
	require.NoError(t, err)
	d = cfg.withDefaults()
	require.Equal(t, 8, d.workers)
	require.Equal(t, 8, d.clients, "one client per worker")
	require.Equal(t, 10*time.Second, d.ttl)
	require.Equal(t, defaultContendedHold, d.hold)

	cfg, err = parseFlags([]string{"-mode", "takeover"}, &bytes.Buffer{})
	require.NoError(t, err)
	d = cfg.withDefaults()
	require.Equal(t, 8, d.workers)
	require.Equal(t, 8, d.clients, "one client per worker")
	require.Equal(t, 100*time.Millisecond, d.ttl)
	require.Equal(t, defaultContendedHold, d.hold)
	// The default run gives at least some 20 takeovers: each one waits
	// for the TTL, plus the takeover itself.
	require.GreaterOrEqual(t, int(d.duration/(d.ttl+20*time.Millisecond)), 20)

	cfg, err = parseFlags([]string{"-mode", "takeover", "-workers", "5", "-clients", "2", "-ttl", "1s"}, &bytes.Buffer{})
	require.NoError(t, err)
	d = cfg.withDefaults()
	require.Equal(t, 5, d.workers)
	require.Equal(t, 2, d.clients)
	require.Equal(t, 3, d.workersPerClient())
	require.Equal(t, time.Second, d.ttl)

	cfg, err = parseFlags([]string{"-mode", "throughput", "-clients", "4"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 4, cfg.withDefaults().clients)
	require.Equal(t, 8, cfg.withDefaults().workersPerClient())

	cfg, err = parseFlags([]string{"-pause-node", "1", "-duration", "3s", "-nodes", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, &fault{kind: faultPause, node: 1, after: time.Second}, cfg.fault())
	require.Equal(t, 3, cfg.nodes)

	for _, bad := range [][]string{
		{"-workers", "-1"},
		{"-workers", "2"}, // latency mode is one worker
		{"-duration", "0s"},
		{"-ttl", "-1s"},
		{"-hold", "-1ms"},
		{"-hold", "10s"}, // not below the TTL
		{"-node-timeout", "0s"},
		{"-mode", "other"},
		{"-pool", "other"},
		{"-nodes", "0"},
		{"-addrs", ","},
		{"-addrs", "a:1", "-nodes", "3"},
		{"-backend", "other"},
		{"-backend", "miniredis", "-addrs", "a:1"},
		{"-pause-node", "5"},
		{"-kill-node", "-2"},
		{"-pause-node", "0", "-kill-node", "1"},
		{"-pause-node", "0", "-fault-after", "3s"},
		{"-fault-after", "1s"},
		{"-plot", "x.pdf"},
		{"-clients", "0"},
		{"-clients", "-1"},
		{"-clients", "x"},
		{"-clients", "2"}, // latency mode is one worker
		{"-mode", "contended", "-workers", "4", "-clients", "5"},
		{"-mode", "takeover", "-hold", "100ms"}, // not below the takeover TTL
		{"-mode", "takeover", "-ttl", "0s"},
		{"extra"},
		{"-nosuchflag"},
	} {
		_, err := parseFlags(bad, &bytes.Buffer{})
		require.Error(t, err, "%q", bad)
	}

	var usage bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &usage)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"-mode", "-pool", "-duration", "-hold", "-pause-node", "-kill-node", "-fault-after", "-json", "-plot", "-floor", "-nodes", "-clients", "-ttl", "takeover"} {
		require.Contains(t, usage.String(), f)
	}

	// The errors about -clients say what is wrong.
	_, err = parseFlags([]string{"-clients", "0"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-clients")
	require.ErrorContains(t, err, "at least 1")
	_, err = parseFlags([]string{"-mode", "contended", "-workers", "4", "-clients", "5"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-clients 5 is more than the 4 workers")
	cfg = testConfig(backendMiniredis, modeThroughput)
	cfg.clients = -1
	require.ErrorContains(t, cfg.validate(), "-clients -1 must be at least 1")
	require.NotContains(t, usage.String(), "backend", "-backend is for tests only")
}

func TestHist(t *testing.T) {
	h := newHist()
	require.Equal(t, summary{}, summarize(h))
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	require.Equal(t, 500*time.Microsecond, h.quantile(0.5))
	require.Equal(t, 990*time.Microsecond, h.quantile(0.99))
	h.record(2 * time.Minute) // beyond the range: kept as the maximum
	require.EqualValues(t, 1001, h.count())
	require.InDelta(t, float64(time.Minute), float64(h.max()), float64(time.Minute)/1000)

	other := newHist()
	other.record(time.Millisecond)
	other.merge(h)
	require.EqualValues(t, 1002, other.count())

	s := summarize(h)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(b), `"p50_us":501`)
}

func TestHandoff(t *testing.T) {
	start := time.Now()
	ho := &handoff{start: start}
	w0 := &worker{id: 0, handoff: ho, rec: newRecorder(false, modeContended)}
	w1 := &worker{id: 1, handoff: ho, rec: newRecorder(false, modeContended)}
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }

	w0.recordHandoff(at(1)) // no Unlock yet: no hand-off
	require.Zero(t, w0.rec.handoff.count())

	ho.holder.Store(0)
	ho.last.Store(ho.since(at(10)))
	w1.recordHandoff(at(12)) // Unlock by worker 0 at 10
	require.EqualValues(t, 1, w1.rec.handoff.count())
	require.InDelta(t, 2*time.Millisecond, w1.rec.handoff.max(), float64(5*time.Microsecond))
	require.Zero(t, w1.rec.reacquired)

	w0.recordHandoff(at(13)) // worker 0 again: a hand-off back to itself
	require.EqualValues(t, 1, w0.rec.handoff.count())
	require.InDelta(t, 3*time.Millisecond, w0.rec.handoff.max(), float64(5*time.Microsecond))
	require.Equal(t, 1, w0.rec.reacquired)

	ho.holder.Store(1)
	ho.last.Store(releasing)
	w0.recordHandoff(at(21)) // the holder's Unlock has not returned yet
	require.EqualValues(t, 2, w0.rec.handoff.count())
	require.Equal(t, 1, w0.rec.reacquired)
}

func TestTakeoverRecord(t *testing.T) {
	start := time.Now()
	to := &takeover{}
	w0 := &worker{id: 0, takeover: to, rec: newRecorder(false, modeTakeover)}
	w1 := &worker{id: 1, takeover: to, rec: newRecorder(false, modeTakeover)}
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	const ttl = 100

	w0.recordTakeover(at(0), at(ttl)) // the first acquisition: no takeover
	require.Zero(t, w0.rec.takeover.count())

	w1.recordTakeover(at(ttl+3), at(2*ttl+3)) // 3ms after worker 0's key expired
	require.EqualValues(t, 1, w1.rec.takeover.count())
	require.InDelta(t, 3*time.Millisecond, w1.rec.takeover.max(), float64(5*time.Microsecond))
	require.Zero(t, w1.rec.restarted)
	require.Zero(t, w1.rec.early)

	w1.recordTakeover(at(2*ttl+4), at(3*ttl+4)) // worker 1 again, restarted
	require.EqualValues(t, 2, w1.rec.takeover.count())
	require.Equal(t, 1, w1.rec.restarted)

	w0.recordTakeover(at(3*ttl+2), at(4*ttl+2)) // before the expiry: 0, early
	require.EqualValues(t, 1, w0.rec.takeover.count())
	require.Zero(t, w0.rec.takeover.max())
	require.Equal(t, 1, w0.rec.early)
	require.Zero(t, w0.rec.restarted)
}

func TestTakeoverJSON(t *testing.T) {
	cfg := testConfig(backendMiniredis, modeTakeover)
	cfg.json = true
	out, _ := runTool(t, context.Background(), cfg)
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout must be only JSON")
	require.Equal(t, modeTakeover, rep["mode"])
	require.Equal(t, "one", rep["keys"])
	require.EqualValues(t, 4, rep["workers"])
	require.EqualValues(t, 4, rep["clients"])
	require.EqualValues(t, 20000, rep["ttl_us"])
	require.EqualValues(t, 2000, rep["hold_us"])
	require.EqualValues(t, 1200000, rep["duration_us"])
	runs := rep["runs"].([]any)
	require.Len(t, runs, 1)
	for _, run := range runs {
		r := run.(map[string]any)
		for _, k := range []string{"release", "contended"} {
			require.NotContains(t, r, k, "%s does not apply to takeover mode", k)
		}
		requireSummary(t, r["acquire"])
		tk := r["takeover"].(map[string]any)
		requireSummary(t, tk["latency"])
		n := tk["latency"].(map[string]any)["count"].(float64)
		require.GreaterOrEqual(t, n, 2.0, "takeovers")
		// Every acquisition but the first took over from a dead holder.
		require.Equal(t, n+1, tk["acquisitions"])
		require.Equal(t, tk["acquisitions"], r["rounds"])
		require.Positive(t, tk["acquisitions_per_s"])
		for _, k := range []string{"early", "restarted", "dead_holder_keys"} {
			require.Contains(t, tk, k)
		}
		require.LessOrEqual(t, tk["restarted"], n)
		require.LessOrEqual(t, tk["early"], n)
		require.Equal(t, true, r["leftover_checked"])
		require.Contains(t, r, "leftover_keys")
	}
}

func TestTakeoverExistingNodes(t *testing.T) {
	var addrs []string
	for range 5 {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // keys expire as on Redis: takeovers need it
		require.NoError(t, m.Start())
		t.Cleanup(m.Close)
		addrs = append(addrs, m.Addr())
	}
	cfg := testConfig(backendAuto, modeTakeover)
	cfg.addrs, cfg.duration = addrs, 300*time.Millisecond
	out, _ := runTool(t, context.Background(), cfg)
	require.Regexp(t, `(?m)^mode +takeover: 4 workers on 4 clients, keys one, ttl 20ms, hold 2ms$`, out)
	require.Regexp(t, `(?m)^leftover +not checked: only nodes the tool started are`, out)

	cfg.json = true
	out, _ = runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Runs, 1)
	require.False(t, rep.Runs[0].LeftoverKnown)
	require.NotNil(t, rep.Runs[0].Takeover)
	require.Nil(t, rep.Runs[0].Release)
	require.Nil(t, rep.Runs[0].Contended)
}

// TestClientsRun checks what the report says of the clients.
func TestClientsRun(t *testing.T) {
	cfg := testConfig(backendMiniredis, modeContended)
	cfg.clients = 0 // the default: one per worker
	out, _ := runTool(t, context.Background(), cfg)
	require.Regexp(t, `(?m)^mode +contended: 4 workers on 4 clients, keys one,`, out)
	m := regexp.MustCompile(`(?m)^conns +[0-9]+ dialled while measuring, ([0-9]+) open at the end`).FindStringSubmatch(out)
	require.NotNil(t, m, "no conns line")
	open, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	// Each client has its own connection to each of the 5 nodes.
	require.GreaterOrEqual(t, open, 4*5)

	cfg.clients, cfg.json = 2, true
	out, _ = runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 2, rep.Clients)
	require.Equal(t, 4, rep.Workers)
	require.Len(t, rep.Runs, 1)
	r := rep.Runs[0]
	require.NotNil(t, r.ConnsOpen)
	require.GreaterOrEqual(t, *r.ConnsOpen, int64(2*5))
}

func TestNewClients(t *testing.T) {
	ns, err := startMiniredis(3)
	require.NoError(t, err)
	defer ns.stop()
	for _, kind := range []string{poolPipelined, poolPlain} {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(backendMiniredis, modeContended)
			cfg.workers, cfg.clients = 5, 2
			cfg = cfg.withDefaults()
			cs, err := newClients(cfg, kind, ns)
			require.NoError(t, err)
			closed := false
			defer func() {
				if !closed {
					cs.close()
				}
			}()
			require.Len(t, cs.clients, 2)
			require.Len(t, cs.pools, 2)
			for i := range cs.pools {
				require.Len(t, cs.pools[i], 3)
				for j := range cs.pools[i] {
					require.Equal(t, ns.addrs[j], cs.pools[i][j].Addr())
				}
			}
			require.NotSame(t, cs.clients[0], cs.clients[1])
			for j := range ns.addrs {
				require.NotEqual(t, fmt.Sprintf("%p", cs.pools[0][j]), fmt.Sprintf("%p", cs.pools[1][j]), "pools shared")
			}
			// Round-robin: workers 0, 2, 4 on the first, 1 and 3 on the second.
			for i := range cfg.workers {
				require.Same(t, cs.clients[i%2], cs.forWorker(i), "worker %d", i)
			}

			ctx := context.Background()
			for _, c := range cs.clients {
				l, err := c.Lock(ctx, "redlock-bench:test:"+kind, time.Second)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			}
			cs.close()
			closed = true
			cs.close() // again: no panic
			for i, c := range cs.clients {
				_, err := c.TryLock(ctx, "redlock-bench:test:"+kind, time.Second)
				require.ErrorIs(t, err, pool.ErrClosed, "client %d", i)
				for _, p := range cs.pools[i] {
					_, err := p.Do(ctx, "PING")
					require.ErrorIs(t, err, pool.ErrClosed, "client %d, pool %s", i, p.Addr())
				}
			}
		})
	}
}

func TestWarmUpOwnClients(t *testing.T) {
	ns, err := startMiniredis(3)
	require.NoError(t, err)
	defer ns.stop()
	cfg := testConfig(backendMiniredis, modeContended)
	cfg.workers, cfg.clients = 3, 3
	cfg = cfg.withDefaults()
	cs, err := newClients(cfg, poolPipelined, ns)
	require.NoError(t, err)
	defer cs.close()
	_, keys, err := workerKeys(cfg, poolPipelined)
	require.NoError(t, err)

	before, ok := queryConnStats(ns.addrs)
	require.True(t, ok)
	require.Zero(t, before.connected)
	require.NoError(t, warmUp(context.Background(), cs, cfg, keys))
	after, ok := queryConnStats(ns.addrs)
	require.True(t, ok)
	// Every worker warmed up its own client: each one has connected to
	// every node.
	require.GreaterOrEqual(t, after.connected, int64(cfg.clients*len(ns.addrs)))
}

func TestCountKeysDead(t *testing.T) {
	ns, err := startMiniredis(2)
	require.NoError(t, err)
	defer ns.stop()
	m0, m1 := ns.local[0].(miniNode).m, ns.local[1].(miniNode).m
	const prefix = "redlock-bench:x:pipelined:"
	keys := []string{prefix + "shared", prefix + "w1"}
	require.NoError(t, m0.Set(prefix+"shared", "dead-1"))
	require.NoError(t, m1.Set(prefix+"shared", "stray"))
	require.NoError(t, m1.Set(prefix+"w1", "dead-2"))
	require.NoError(t, m1.Set("other:key", "dead-1"))
	// What the client keeps beside a lock key is not a lock key.
	require.NoError(t, m0.Set(prefix+"shared:next", "waiter"))
	_, err = m0.ZAdd(prefix+"shared:waiters", 1, "waiter")
	require.NoError(t, err)
	died := map[string]bool{"dead-1": true, "dead-2": true}

	n, dead, err := countKeys(ns.addrs, keys, died)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the stray key")
	require.Equal(t, 2, dead)

	n, dead, err = countKeys(ns.addrs, keys, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n, "without tokens every lock key counts")
	require.Zero(t, dead)

	// The in-process nodes expire keys with the wall clock, as Redis does.
	m0.SetTTL(prefix+"shared", 20*time.Millisecond)
	time.Sleep(40 * time.Millisecond)
	n, dead, err = countKeys(ns.addrs, keys, died)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, dead)
}

func TestPercentileCurve(t *testing.T) {
	h := newHist()
	require.Empty(t, percentileCurve(h))
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	xys := percentileCurve(h)
	require.Greater(t, len(xys), 50)
	for i := 1; i < len(xys); i++ {
		require.GreaterOrEqual(t, xys[i].X, xys[i-1].X)
		require.GreaterOrEqual(t, xys[i].Y, xys[i-1].Y)
	}
	require.Equal(t, "0%", percentLabel(1))
	require.Equal(t, "90%", percentLabel(10))
	require.Equal(t, "99%", percentLabel(100))
	require.Equal(t, "99.9%", percentLabel(1000))
}

func TestProgress(t *testing.T) {
	require.Nil(t, startProgress(&bytes.Buffer{}, time.Second), "not a terminal")
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer f.Close()
	require.Nil(t, startProgress(f, time.Second), "a file is not a terminal")
	(*progress)(nil).finish() // draws nothing, does not panic

	var buf bytes.Buffer
	p := newProgress(&buf, 300*time.Millisecond)
	time.Sleep(2 * progressTick)
	p.finish()
	p.finish()
	require.Contains(t, buf.String(), "measuring")
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		153 * time.Microsecond:   "153µs",
		1530 * time.Microsecond:  "1.53ms",
		15300 * time.Microsecond: "15.3ms",
		153 * time.Millisecond:   "153ms",
		1530 * time.Millisecond:  "1.53s",
	} {
		require.Equal(t, want, formatDuration(d))
	}
	require.Equal(t, "-", formatRatio(0))
	require.Equal(t, "1.50x", formatRatio(1.5))
}

func TestHoldFor(t *testing.T) {
	for _, d := range []time.Duration{0, 300 * time.Microsecond, 3 * time.Millisecond} {
		start := time.Now()
		require.True(t, holdFor(context.Background(), d))
		require.GreaterOrEqual(t, time.Since(start), d, "a hold of %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, holdFor(ctx, time.Hour), "an ended context ends the hold")
}
