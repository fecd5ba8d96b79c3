package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	if spinFromEnv() {
		return // a helper of -busy, started by a test
	}
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
	ratioLine  = regexp.MustCompile(`(?m)^ratio +pipelined/redigo: rounds/s ([0-9.]+)x, acquire p50 ([0-9.]+)x$`)
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
	case modeSemaphore:
		cfg.permits, cfg.workers, cfg.hold = 2, 4, 2*time.Millisecond
		cfg.duration = 500 * time.Millisecond // per phase
	case modeRWLock:
		cfg.readers, cfg.writers, cfg.hold = 2, 1, 2*time.Millisecond
		cfg.duration = 500 * time.Millisecond
	case modeFresh:
		// Runs bursts, not -duration; a small one, with short pauses.
		cfg.duration, cfg.clients, cfg.bursts = byMode, 10, 1
		cfg.tries, cfg.pause = 2, 10*time.Millisecond
	case modeElection:
		// Two deaths, each some 600ms; the duration only bounds the run.
		// A TTL well above a slow round keeps the leaders' extensions
		// from being due while Campaign still returns.
		cfg.terms, cfg.hold, cfg.ttl = 4, 2*time.Millisecond, 600*time.Millisecond
		cfg.duration, cfg.nodeTimeout = 20*time.Second, 100*time.Millisecond
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
		require.Regexp(t, `(?m)^ +wait \(acquire row\) .*; 0 overlapping holds$`, out)
		require.Regexp(t, `(?m)^idle gap +p50 [0-9.]+(µs|ms|s), p90 [0-9.]+(µs|ms|s), p99 [0-9.]+(µs|ms|s) \(idle row: from a holder's Unlock starting to the next holder's Lock returning`, out)
		require.Regexp(t, `(?m)^ +hand-off row: from that Unlock returning to the next Lock returning`, out)
		require.Regexp(t, `(?m)^clients +4 clients, each with connections of its own to every node`, out)
		require.NotRegexp(t, `(?m)^ *takeover `, out)
	case modeTakeover:
		require.Regexp(t, `(?m)^mode +takeover: 4 workers on 4 clients, keys one, ttl 20ms, hold 2ms$`, out)
		require.Regexp(t, `(?m)^idle gap +the takeover row`, out)
	}
	op := "lock\\+unlock"
	if (config{mode: mode}).sharedKey() {
		op = "acquisition"
	}
	require.Regexp(t, `(?m)^cpu +per `+op+`: client [0-9.]+(µs|ms|s) \(this process: getrusage user\+sys`, out)
}

// requireServerCost checks the table's server figures from nodes that
// answer INFO (redis-server).
func requireServerCost(t *testing.T, mode, out string) {
	t.Helper()
	op := "lock\\+unlock"
	if (config{mode: mode}).sharedKey() {
		op = "acquisition"
	}
	require.Regexp(t, `(?m)^cpu +per `+op+`: client .*; Redis [0-9.]+(µs|ms|s) = user [0-9.]+(µs|ms|s) \+ sys [0-9.]+(µs|ms|s) \(used_cpu_user, used_cpu_sys, summed over 5 nodes\)(; context switches [0-9.]+ per node)?$`, out)
	require.Regexp(t, `(?m)^commands +per `+op+` and node: [0-9.]+ commands, [0-9.]+ script calls \(EVALSHA\+EVAL\)`, out)
	require.Regexp(t, `(?m)^ +node +cpu/op +user +sys +switches/op +commands/op +scripts/op +top commands per `+op+`$`, out)
	require.Len(t, regexp.MustCompile(`(?m)^ +127\.0\.0\.1:[0-9]+ +[0-9.]+(µs|ms) +[0-9.]+(µs|ms) +[0-9.]+(µs|ms) +([0-9.]+|-) +[0-9.]+ +[0-9.]+ +[a-z|_]+ [0-9.]+`).FindAllString(out, -1), 5)
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
	tookOver := regexp.MustCompile(`(?m)^ *takeover +[1-9]`)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out, errOut := runTool(t, context.Background(), testConfig(backendMiniredis, mode))
			// A loaded machine can starve the in-process servers of a
			// takeover run (20ms TTL): such a run is made again, up to
			// four in all (see TestTakeoverJSON).
			for attempt := 2; mode == modeTakeover && !tookOver.MatchString(out) && attempt <= 4; attempt++ {
				t.Logf("run %d made no takeover: running again", attempt-1)
				out, errOut = runTool(t, context.Background(), testConfig(backendMiniredis, mode))
			}
			requireModeReport(t, mode, out)
			require.Regexp(t, `(?m)^backend +miniredis`, out)
			require.Regexp(t, `(?m)^errors +(none|[0-9]+)$`, out)
			require.Regexp(t, `(?m)^cpu +per .*the in-process servers included\); Redis not measured: `, out)
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
			requireServerCost(t, mode, out)
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
			require.Regexp(t, `(?m)^pool +redigo, `, out)
			require.Regexp(t, ratioLine, out)

			b, err := os.ReadFile(cfg.plot)
			require.NoError(t, err)
			require.NotEmpty(t, b)
			if strings.HasSuffix(name, ".svg") {
				require.Contains(t, string(b[:min(len(b), 200)]), "<svg")
				require.Contains(t, string(b), "pipelined")
				require.Contains(t, string(b), "redigo")
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
	for pool, kinds := range map[string][]string{
		poolPolling: {poolPolling},
		poolBoth:    {poolPipelined, poolPlain},
		poolAll:     {poolPipelined, poolPlain, poolGoredis, poolRueidis, poolPolling},
		"plain":     {poolPlain},
		poolGoredis: {poolGoredis},
	} {
		for _, flag := range []string{"-pool", "-client"} {
			cfg, err := parseFlags([]string{"-mode", "contended", flag, pool}, &bytes.Buffer{})
			require.NoError(t, err, pool)
			require.Equal(t, kinds, cfg.withDefaults().poolKinds(), pool)
		}
	}
	_, err = parseFlags([]string{"-client", "jedis"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-client")

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
	require.Contains(t, usage.String(), `"polling"`)
	require.Contains(t, usage.String(), `"all"`)
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
	var rep map[string]any
	// On a loaded machine (a CPU hog beside go test -race -count=3, or the
	// soak and the integration tests under -race beside it) a run made no
	// takeover at all, twice in a row: the in-process servers run their
	// scripts in this process, and a 20ms TTL leaves them little time.
	// Such a run is made again, up to four in all; what is checked does
	// not change.
	for attempt := 1; ; attempt++ {
		out, _ := runTool(t, context.Background(), cfg)
		rep = nil
		require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout must be only JSON")
		n := takeovers(rep)
		if n >= 2 || attempt == 4 {
			break
		}
		t.Logf("run %d made %v takeovers: running again", attempt, n)
	}
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

// takeovers returns how many takeovers a takeover-mode JSON report's
// first run counted, or -1 when it has none.
func takeovers(rep map[string]any) float64 {
	runs, _ := rep["runs"].([]any)
	if len(runs) == 0 {
		return -1
	}
	r, _ := runs[0].(map[string]any)
	tk, _ := r["takeover"].(map[string]any)
	l, _ := tk["latency"].(map[string]any)
	n, ok := l["count"].(float64)
	if !ok {
		return -1
	}
	return n
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
	for _, kind := range []string{poolPipelined, poolPlain, poolPolling} {
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
			if kind == poolPolling {
				// Each polling client has a redigo pool of its own per node.
				require.Len(t, cs.polling, 2)
				for i, c := range cs.polling {
					require.Same(t, cs.clients[i], locker(c))
					require.Nil(t, cs.pools[i])
					require.Equal(t, ns.addrs, c.addrs)
					require.Len(t, c.pools, 3)
				}
				for j := range ns.addrs {
					require.NotSame(t, cs.polling[0].pools[j], cs.polling[1].pools[j], "pools shared")
				}
			} else {
				require.Empty(t, cs.polling)
				for i := range cs.pools {
					require.Len(t, cs.pools[i], 3)
					for j := range cs.pools[i] {
						require.Equal(t, ns.addrs[j], cs.pools[i][j].Addr())
					}
				}
				for j := range ns.addrs {
					require.NotEqual(t, fmt.Sprintf("%p", cs.pools[0][j]), fmt.Sprintf("%p", cs.pools[1][j]), "pools shared")
				}
			}
			require.NotSame(t, cs.clients[0], cs.clients[1])
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
			if kind == poolPolling {
				require.EqualValues(t, 2, cs.pollStats().acquisitions)
			}
			cs.close()
			closed = true
			cs.close() // again: no panic
			for i, c := range cs.clients {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := c.Lock(ctx, "redlock-bench:test:"+kind, time.Second)
				cancel()
				require.ErrorIs(t, err, pool.ErrClosed, "client %d", i)
				require.Equal(t, "acquire: client closed", errKind("acquire", err))
				for _, p := range cs.pools[i] {
					_, err := p.Do(ctx, "PING")
					require.ErrorIs(t, err, pool.ErrClosed, "client %d, pool %s", i, p.Addr())
				}
			}
			for i, c := range cs.polling {
				for _, p := range c.pools {
					_, err := p.Get().Do("PING")
					require.Error(t, err, "polling client %d: its pools are closed", i)
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

// requireCost checks a run's cost figures against nodes that answer INFO
// (redis-server): every figure non-negative, and with operations, some
// CPU and commands on every node.
func requireCost(t *testing.T, r runReport, nodes int) {
	t.Helper()
	c := r.Cost
	require.Positive(t, c.Ops, r.Pool)
	require.True(t, c.ClientCPUKnown, r.Pool)
	require.False(t, c.ClientIncludesServers, r.Pool)
	require.Positive(t, c.ClientCPU, r.Pool)
	require.Positive(t, c.ClientCPUPerOp, r.Pool)
	require.GreaterOrEqual(t, c.HoldSpinPerOp, duration(0), r.Pool)
	require.True(t, c.RedisKnown, "%s: %+v", r.Pool, c.Nodes)
	require.Equal(t, nodes, c.RedisNodes, r.Pool)
	require.Positive(t, c.RedisCPU, r.Pool)
	require.Positive(t, c.RedisCPUPerOp, r.Pool)
	require.Positive(t, c.CommandsPerOpPerNode, r.Pool)
	require.Positive(t, c.ScriptCallsPerOpPerNode, r.Pool)
	require.LessOrEqual(t, c.ScriptCallsPerOpPerNode, c.CommandsPerOpPerNode, r.Pool)
	require.Len(t, c.Nodes, nodes, r.Pool)
	var sum duration
	for _, n := range c.Nodes {
		require.True(t, n.Known, "%s: %s", r.Pool, n.Error)
		require.Empty(t, n.Error)
		require.GreaterOrEqual(t, n.CPU, duration(0))
		require.Positive(t, n.Commands, "%s: node %s", r.Pool, n.Addr)
		require.Positive(t, n.CommandsPerOp)
		require.GreaterOrEqual(t, n.ScriptCalls, int64(0))
		require.LessOrEqual(t, n.ScriptCalls, n.Commands)
		require.NotEmpty(t, n.Top)
		require.LessOrEqual(t, len(n.Top), topCommands)
		total := int64(0)
		for _, calls := range n.ByCommand {
			require.Positive(t, calls)
			total += calls
		}
		require.Equal(t, n.Commands, total)
		for i, top := range n.Top {
			require.Positive(t, top.Calls, top.Command)
			require.Positive(t, top.PerOp, top.Command)
			if i > 0 {
				require.LessOrEqual(t, top.Calls, n.Top[i-1].Calls, "most called first")
			}
		}
		sum += n.CPU
	}
	require.Equal(t, c.RedisCPU, sum, "Redis CPU is summed over the nodes")
}

// perOp returns a command's calls per operation on a node.
func perOp(c costReport, n nodeCostReport, cmd string) float64 {
	return float64(n.ByCommand[cmd]) / float64(c.Ops)
}

// TestCostRedisServer runs every kind, the polling one included, in
// contended mode against redis-server and checks the server and client
// figures, the idle gap, the polling client and the ratios against it.
func TestCostRedisServer(t *testing.T) {
	requireRedis(t)
	before := childProcesses(t)
	cfg := testConfig(backendRedis, modeContended)
	cfg.pool, cfg.json = poolAll, true
	out, _ := runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 4, rep.Clients)
	kinds := []string{poolPipelined, poolPlain, poolGoredis, poolRueidis, poolPolling}
	require.Len(t, rep.Runs, len(kinds))
	require.Len(t, rep.VsPipelined, 3, "redigo, goredis and rueidis against pipelined")
	for _, v := range rep.VsPipelined {
		require.Positive(t, v.RoundsPerSec, v.Pool)
		require.Positive(t, v.RedisCPUPerOp, v.Pool)
	}
	for i, kind := range kinds {
		r := rep.Runs[i]
		require.Equal(t, kind, r.Pool)
		require.Empty(t, r.Errors, kind)
		c := r.Contended
		require.NotNil(t, c, kind)
		require.Positive(t, c.Acquisitions, kind)
		require.Zero(t, c.Overlaps, "%s: two holders at once", kind)
		require.Equal(t, "acquisition", r.Cost.Op)
		require.Equal(t, c.Acquisitions, r.Cost.Ops, kind)
		requireCost(t, r, 5)
		require.NotNil(t, r.IdleGap, kind)
		require.Equal(t, "unlock called", r.IdleGap.From)
		require.Equal(t, c.Acquisitions-1, r.IdleGap.Latency.Count, "every acquisition but the first follows an Unlock")
		require.Equal(t, c.Idle, r.IdleGap.Latency)
		for _, n := range r.Cost.Nodes {
			// Every acquisition's Unlock runs a script on every node.
			require.GreaterOrEqual(t, n.ScriptCallsPerOp, 1.0, "%s: node %s: %v", kind, n.Addr, n.ByCommand)
			require.Equal(t, n.ScriptCalls, n.ByCommand["evalsha"]+n.ByCommand["eval"])
		}
		if kind != poolPolling {
			require.Nil(t, r.Polling)
			continue
		}
		p := r.Polling
		require.NotNil(t, p)
		require.GreaterOrEqual(t, p.Attempts, c.Acquisitions)
		require.GreaterOrEqual(t, p.AttemptsPerAcquisition, 1.0)
		require.GreaterOrEqual(t, p.MaxAttempts, int64(1))
		require.GreaterOrEqual(t, p.OverTries, int64(0))
		require.Equal(t, 32, p.RedsyncTries)
		require.Equal(t, duration(50*time.Millisecond), p.DelayMin)
		require.Equal(t, duration(249*time.Millisecond), p.DelayMax)
		require.Equal(t, 0.01, p.DriftFactor)
		for _, n := range r.Cost.Nodes {
			require.GreaterOrEqual(t, perOp(r.Cost, n, "set"), 1.0, "node %s: an attempt sets every node", n.Addr)
		}
	}
	require.NotNil(t, rep.Ratio, "pipelined and plain ran")
	require.Len(t, rep.VsPolling, len(kinds)-1)
	for i, v := range rep.VsPolling {
		require.Equal(t, rep.Runs[i].Pool, v.Pool)
		require.Equal(t, rep.Runs[len(kinds)-1].Contended.Acquisitions, v.PollingAcquisitions)
		require.Positive(t, v.AcquisitionsPerSec)
		require.Positive(t, v.RedisCPUPerAcq)
		require.Positive(t, v.CommandsPerAcq)
		require.Positive(t, v.ScriptCallsPerAcq)
		require.Positive(t, v.ClientCPUPerAcq)
		require.Positive(t, v.WaitP99)
		require.GreaterOrEqual(t, v.IdleGapP50, 0.0)
	}
	require.Equal(t, before, childProcesses(t), "redis-server processes left behind")
}

// TestCostLatencyRedisServer checks that the floor, which runs in the
// window in latency mode, is left out of the command counts: a
// lock+unlock sends one SET per node, the floor another.
func TestCostLatencyRedisServer(t *testing.T) {
	requireRedis(t)
	cfg := testConfig(backendRedis, modeLatency)
	cfg.json = true
	out, _ := runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Runs, 1)
	r := rep.Runs[0]
	require.NotNil(t, r.Floor)
	require.Positive(t, r.Floor.Latency.Count)
	requireCost(t, r, 5)
	c := r.Cost
	require.Equal(t, "lock+unlock", c.Op)
	require.EqualValues(t, r.Rounds, c.Ops)
	require.True(t, c.FloorExcluded)
	require.Nil(t, r.IdleGap)
	for _, n := range c.Nodes {
		// Rounds cut short by the end of the run add a little.
		set := perOp(c, n, "set")
		require.GreaterOrEqual(t, set, 1.0, "node %s: %v", n.Addr, n.ByCommand)
		require.Less(t, set, 1.5, "node %s: the floor's SETs counted? %v", n.Addr, n.ByCommand)
	}
}

// TestPollingMiniredis runs the polling kind alone, in contended mode as
// a table and in throughput mode, on in-process servers, which answer no
// INFO all: the report says the servers were not measured.
func TestPollingMiniredis(t *testing.T) {
	cfg := testConfig(backendMiniredis, modeContended)
	cfg.pool = poolPolling
	out, _ := runTool(t, context.Background(), cfg)
	requireModeReport(t, modeContended, out)
	require.Regexp(t, `(?m)^pool +polling, .*redsync-style polling client`, out)
	require.Regexp(t, `(?m)^polling +[0-9.]+ attempts per acquisition \(max [1-9][0-9]*\); [0-9]+ acquisitions needed more than redsync's 32 tries`, out)
	require.Regexp(t, `(?m)^ +wait \(acquire row\) .*; 0 overlapping holds$`, out)
	require.Regexp(t, `(?m)^cpu +per acquisition: client [0-9.]+(µs|ms) \(this process: .*the in-process servers included\); Redis not measured: node .*INFO all`, out)
	require.NotContains(t, out, "vs polling", "no other kind to compare")

	cfg = testConfig(backendMiniredis, modeThroughput)
	cfg.pool, cfg.json = poolPolling, true
	out, _ = runTool(t, context.Background(), cfg)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Runs, 1)
	r := rep.Runs[0]
	require.Positive(t, r.Rounds)
	require.Empty(t, r.Errors)
	require.NotNil(t, r.Polling)
	require.Equal(t, "lock+unlock", r.Cost.Op)
	require.True(t, r.Cost.ClientIncludesServers)
	require.False(t, r.Cost.RedisKnown)
	require.Zero(t, r.Cost.RedisNodes)
	require.Len(t, r.Cost.Nodes, 5)
	for _, n := range r.Cost.Nodes {
		require.False(t, n.Known)
		require.Contains(t, n.Error, "INFO all")
	}
	require.Nil(t, r.IdleGap)
	require.Nil(t, r.Contended)
	require.True(t, r.LeftoverKnown)
	require.Zero(t, r.Leftover)
}

func TestParseSnapshot(t *testing.T) {
	text := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n\r\n# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250001\r\n" +
		"used_cpu_sys_children:9.000000\r\n# Commandstats\r\n" +
		"cmdstat_set:calls=10,usec=20,usec_per_call=2.00,rejected_calls=1,failed_calls=2\r\n" +
		"cmdstat_evalsha:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_client|setname:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=4,usec=4,usec_per_call=1.00\r\n" // older versions: no rejected_calls
	s, err := parseSnapshot(text)
	require.NoError(t, err)
	require.Equal(t, "abc", s.runID)
	require.Equal(t, cpuSplit{user: 250001 * time.Microsecond, sys: 1500 * time.Millisecond}, s.cpu)
	require.Equal(t, 1750001*time.Microsecond, s.cpu.total())
	require.Equal(t, map[string]int64{"set": 11, "evalsha": 3, "client|setname": 2, "get": 4}, s.cmds)

	_, err = parseSnapshot("# Clients\r\nconnected_clients:1\r\n")
	require.ErrorContains(t, err, "used_cpu_sys")
	_, err = parseSnapshot("used_cpu_sys:1\r\nused_cpu_user:x\r\n")
	require.Error(t, err)
	_, err = commandCalls("usec=1")
	require.Error(t, err)
}

func TestServerCosts(t *testing.T) {
	p := &serverProbe{addrs: []string{"a:1", "b:2", "c:3", "d:4", "e:5"}, errs: make([]error, 5)}
	p.errs[3] = errors.New("node d:4: connection refused")
	snap := func(run string, cpu time.Duration, own int64, cmds map[string]int64) *nodeSnapshot {
		return &nodeSnapshot{runID: run, cpu: cpuSplit{user: cpu / 4, sys: cpu - cpu/4}, own: own, cmds: cmds, switches: -1}
	}
	before := []*nodeSnapshot{
		snap("r0", time.Second, 0, map[string]int64{"info": 7, "set": 100, "evalsha": 50, "get": 50}),
		snap("r1", time.Second, 0, map[string]int64{"set": 5}),
		snap("r2", time.Second, 0, map[string]int64{"set": 5}),
		nil,
		snap("r4", time.Second, 0, map[string]int64{"set": 5}),
	}
	after := []*nodeSnapshot{
		// The tool's INFO before the window is counted in the after
		// snapshot; the library's own INFO (from a script) counts.
		snap("r0", time.Second+300*time.Microsecond, 1, map[string]int64{"info": 9, "set": 130, "evalsha": 60, "eval": 1, "get": 61, "del": 10}),
		snap("r1-restarted", 2*time.Second, 1, map[string]int64{"set": 6}),
		snap("r2", time.Second, 1, map[string]int64{"set": 4}),
		snap("r3", time.Second, 1, map[string]int64{}),
		snap("r4", time.Second+time.Millisecond, 1, map[string]int64{"set": 25, "info": 1}),
	}
	floor := []map[string]int64{{"set": 10, "del": 10}, nil, nil, nil, {"set": 0}}
	costs := p.costs(before, after, floor)
	require.Len(t, costs, 5)

	n := costs[0]
	require.True(t, n.known, "%v", n.err)
	require.Equal(t, 300*time.Microsecond, n.cpu.total())
	require.Equal(t, 75*time.Microsecond, n.cpu.user)
	require.EqualValues(t, -1, n.switches, "no process here")
	require.Equal(t, map[string]int64{"info": 1, "set": 20, "evalsha": 10, "eval": 1, "get": 11}, n.cmds, "the tool's INFO and the floor's SET and DEL left out")
	require.EqualValues(t, 43, n.total())
	require.EqualValues(t, 11, n.scripts())
	require.Equal(t, []string{"set", "get", "evalsha"}, n.top(3))
	require.Equal(t, []string{"set", "get", "evalsha", "eval", "info"}, n.top(10), "ties by name")

	require.False(t, costs[1].known)
	require.ErrorContains(t, costs[1].err, "restarted")
	require.False(t, costs[2].known)
	require.ErrorContains(t, costs[2].err, "went down")
	require.False(t, costs[3].known)
	require.ErrorContains(t, costs[3].err, "connection refused")
	require.True(t, costs[4].known)
	require.Equal(t, map[string]int64{"set": 20}, costs[4].cmds)

	// The report: per operation, summed and averaged over the known nodes.
	cfg := testConfig(backendRedis, modeContended).withDefaults()
	res := &runResult{acquire: newHist(), servers: costs, clientCPU: 10 * time.Millisecond, clientCPUKnown: true, spin: time.Millisecond}
	for range 10 {
		res.acquire.record(time.Millisecond)
	}
	c := newCostReport(cfg, &nodes{}, res)
	require.Equal(t, "acquisition", c.Op)
	require.EqualValues(t, 10, c.Ops)
	require.Equal(t, duration(time.Millisecond), c.ClientCPUPerOp)
	require.Equal(t, duration(100*time.Microsecond), c.HoldSpinPerOp)
	require.False(t, c.RedisKnown)
	require.Equal(t, 2, c.RedisNodes)
	require.Equal(t, duration(1300*time.Microsecond), c.RedisCPU)
	require.Equal(t, duration(130*time.Microsecond), c.RedisCPUPerOp)
	require.InDelta(t, (43.0+20)/10/2, c.CommandsPerOpPerNode, 0.001)
	require.InDelta(t, 11.0/10/2, c.ScriptCallsPerOpPerNode, 0.001)
	require.Len(t, c.Nodes, 5)
	require.InDelta(t, 2.0, c.Nodes[0].Top[0].PerOp, 0.001)
	require.Equal(t, "set", c.Nodes[0].Top[0].Command)
	require.Contains(t, c.Nodes[3].Error, "connection refused")

	var out bytes.Buffer
	writeCost(&out, &report{}, c)
	require.Regexp(t, `(?m)^cpu +per acquisition: client 1.00ms .*; Redis 130µs = user 32µs \+ sys 97µs \(used_cpu_user, used_cpu_sys, summed over the 2 of 5 nodes that answered\)$`, out.String())
	require.Regexp(t, `(?m)^commands +per acquisition and node: 3.15 commands, 0.55 script calls`, out.String())
	require.Regexp(t, `(?m)^ +a:1 +30µs +7.5µs +22µs +- +4.30 +1.10 +set 2.00, get 1.10, evalsha 1.00, eval 0.10, info 0.10$`, out.String())
	require.Regexp(t, `(?m)^ +d:4 +- +- +- +- +- +- +node d:4: connection refused$`, out.String())

	// Without operations, nothing per operation.
	res = &runResult{acquire: newHist(), servers: costs}
	c = newCostReport(cfg, &nodes{}, res)
	require.Zero(t, c.RedisCPUPerOp)
	require.Zero(t, c.CommandsPerOpPerNode)
}

func TestVsPolling(t *testing.T) {
	run := func(pool string, perSec float64, cpu time.Duration, cmds float64, p99, idle time.Duration) runReport {
		return runReport{
			Pool:      pool,
			Acquire:   summary{Count: 10, P99: duration(p99)},
			Contended: &contendedReport{PerSec: perSec, Acquisitions: 10},
			Cost: costReport{RedisKnown: true, RedisCPUPerOp: duration(cpu), CommandsPerOpPerNode: cmds,
				ScriptCallsPerOpPerNode: cmds / 4, ClientCPUKnown: true, ClientCPUPerOp: duration(cpu)},
			IdleGap: &idleGapReport{Latency: summary{Count: 9, P50: duration(idle)}},
		}
	}
	v := vsPolling(run(poolPipelined, 800, 300*time.Microsecond, 20, 10*time.Millisecond, 200*time.Microsecond),
		run(poolPolling, 400, 100*time.Microsecond, 4, 400*time.Millisecond, 400*time.Microsecond))
	require.Equal(t, vsPollingReport{Pool: poolPipelined, AcquisitionsPerSec: 2, RedisCPUPerAcq: 3, CommandsPerAcq: 5,
		ScriptCallsPerAcq: 5, ClientCPUPerAcq: 3, WaitP99: 0.025, IdleGapP50: 0.5, PollingAcquisitions: 10}, v)

	// A side whose servers are not all known gives no server ratios.
	poll := run(poolPolling, 400, 100*time.Microsecond, 4, 400*time.Millisecond, 400*time.Microsecond)
	poll.Cost.RedisKnown = false
	v = vsPolling(run(poolPlain, 800, 300*time.Microsecond, 20, 10*time.Millisecond, 200*time.Microsecond), poll)
	require.Zero(t, v.RedisCPUPerAcq)
	require.Zero(t, v.CommandsPerAcq)
	require.Equal(t, 2.0, v.AcquisitionsPerSec)
}

func TestPollDelayAndErrors(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 2000 {
		d := pollDelay()
		require.GreaterOrEqual(t, d, 50*time.Millisecond)
		require.LessOrEqual(t, d, 249*time.Millisecond)
		require.Zero(t, d%time.Millisecond, "whole milliseconds")
		seen[d] = true
	}
	require.Greater(t, len(seen), 100, "spread over the range")

	v, err := pollValue()
	require.NoError(t, err)
	require.Len(t, v, 24, "16 bytes in base64")

	kind := func(op string, r pollResult) string {
		r.nodes = 5
		return errKind(op, r.err(op, 3))
	}
	require.Equal(t, "acquire: held by another owner", kind("acquire", pollResult{refused: 3, ok: 2}))
	require.Equal(t, "acquire: too little validity left", kind("acquire", pollResult{ok: 5}))
	require.Equal(t, "acquire: node errors", kind("acquire", pollResult{ok: 2, refused: 1, failed: 2, first: errors.New("boom")}))
	require.Equal(t, "acquire: split vote", kind("acquire", pollResult{ok: 2, refused: 2, missing: 1}))
	require.Equal(t, "release: not held any more (expired or taken)", kind("release", pollResult{missing: 2, refused: 1, ok: 2}))
	require.Equal(t, "release: node errors", kind("release", pollResult{ok: 2, failed: 3}))
	e := pollResult{nodes: 5, ok: 1, failed: 4, first: errors.New("boom")}.err("release", 3)
	require.ErrorContains(t, e, "1 of 5 nodes succeeded (quorum 3)")
	require.ErrorContains(t, e, "boom")

	c := newPollClient([]string{"127.0.0.1:1"}, 1)
	defer c.Close()
	_, err = c.Lock(context.Background(), "k", time.Microsecond)
	require.ErrorContains(t, err, "at least 1ms")
}

// requireKindReport checks the table of a semaphore, rwlock or election
// run made with testConfig: what the mode measured, and that the kind
// kept its rule.
func requireKindReport(t *testing.T, mode, out string) {
	t.Helper()
	require.Regexp(t, headerLine, out)
	require.Regexp(t, `(?m)^nodes +5 \(quorum 3\)`, out)
	switch mode {
	case modeSemaphore:
		require.Regexp(t, `(?m)^mode +semaphore: 4 workers on 4 clients, keys one, ttl 10s, hold 2ms$`, out)
		require.Regexp(t, `(?m)^uncontended 1 worker, 1 client, .*: semaphore \(2 permits\) TryAcquire\+Unlock and mutex TryLock\+Unlock rounds in turn$`, out)
		require.Regexp(t, latencyRowRE("semaphore"), out)
		require.Regexp(t, latencyRowRE("mutex"), out)
		require.Regexp(t, `(?m)^ratio +semaphore/mutex round: p50 [0-9.]+x, mean [0-9.]+x, p99 [0-9.]+x$`, out)
		require.Regexp(t, `(?m)^contended 4 workers on 4 clients, Acquire \(waiting\) with 2 permits, hold 2ms$`, out)
		require.Regexp(t, latencyRowRE("wait"), out)
		require.Regexp(t, `(?m)^ +[1-9][0-9]* acquisitions \([0-9.]+/s\), efficiency [0-9.]+ .*; wait p99 [0-9.]+(µs|ms|s); 0 times more holders than permits$`, out)
	case modeRWLock:
		require.Regexp(t, `(?m)^rwlock +2 readers \(RLock\) and 1 writer \(Lock\) on one read-write lock, a client each, hold 2ms$`, out)
		require.Regexp(t, latencyRowRE("reader wait"), out)
		require.Regexp(t, latencyRowRE("writer wait"), out)
		require.Regexp(t, latencyRowRE("to readers"), out)
		require.Regexp(t, latencyRowRE("to a writer"), out)
		require.Regexp(t, `(?m)^ +hand-off rows \(to readers, to a writer\): from the Unlock call that left the lock to no one`, out)
		require.Regexp(t, `(?m)^readers +[1-9][0-9]* acquisitions \([0-9.]+/s, [0-9.]+ a reader\), wait p99 [0-9.]+(µs|ms|s)$`, out)
		require.Regexp(t, `(?m)^writers +[1-9][0-9]* acquisitions \([0-9.]+/s, [0-9.]+ a writer\), wait p99 [0-9.]+(µs|ms|s)$`, out)
		require.Regexp(t, `(?m)^ +0 holds that broke the lock's rule`, out)
	case modeElection:
		require.Regexp(t, `(?m)^election +3 candidates, a client each; each leader leads for 2ms, then resigns \(Unlock\) or dies .*; ttl 600ms$`, out)
		require.Regexp(t, latencyRowRE("death"), out)
		require.Regexp(t, latencyRowRE("resign"), out)
		require.Regexp(t, `(?m)^succession from a leader's end to the next leader's Campaign returning: 4 of 4 measured, [4-9] leaders$`, out)
		require.Regexp(t, `(?m)^ +death beyond the TTL: p50 [-+][0-9.]+(µs|ms|s), p99 [-+][0-9.]+(µs|ms|s)$`, out)
		require.Regexp(t, `(?m)^ +[0-9]+ terms lost by themselves first \(not measured\), 0 terms not above the one before$`, out)
	}
	require.Regexp(t, `(?m)^cpu +per acquisition: client [0-9.]+(µs|ms|s) \(this process`, out)
	for _, gone := range []string{"release", "handoff", "takeover", "floor"} {
		require.NotRegexp(t, `(?m)^ *`+gone+` `, out)
	}
}

func TestKindModesRedisServer(t *testing.T) {
	requireRedis(t)
	before := childProcesses(t)
	for _, mode := range kindModes {
		t.Run(mode, func(t *testing.T) {
			out, errOut := runTool(t, context.Background(), testConfig(backendRedis, mode))
			requireKindReport(t, mode, out)
			require.NotContains(t, errOut, "NOT representative")
			requireServerCost(t, mode, out)
		})
	}
	require.Equal(t, before, childProcesses(t), "redis-server processes left behind")
}

// TestKindModesMiniredis runs the semaphore and rwlock modes on the
// in-process fallback (election mode, which waits out TTLs, runs on
// redis-server). Its rounds are slow (a Go Lua interpreter on the test's
// CPU), more so under -race, so a short run may take few locks: only the
// report's shape and the kinds' rules are checked.
func TestKindModesMiniredis(t *testing.T) {
	lines := map[string][]string{
		modeSemaphore: {`(?m)^ratio +semaphore/mutex round: `, `(?m); 0 times more holders than permits$`},
		modeRWLock:    {`(?m)^readers +[0-9]+ acquisitions`, `(?m)^writers +[0-9]+ acquisitions`, `(?m)^ +0 holds that broke the lock's rule`},
	}
	for _, mode := range []string{modeSemaphore, modeRWLock} {
		t.Run(mode, func(t *testing.T) {
			out, _ := runTool(t, context.Background(), testConfig(backendMiniredis, mode))
			require.Regexp(t, `(?m)^backend +miniredis`, out)
			require.Regexp(t, `(?m)^mode +`+mode+`: `, out)
			for _, re := range lines[mode] {
				require.Regexp(t, re, out)
			}
			require.Regexp(t, `(?m)^errors +(none|[0-9]+)$`, out)
		})
	}
}

func TestKindModesJSON(t *testing.T) {
	requireRedis(t)
	want := map[string][]string{
		modeSemaphore: {"permits", "uncontended", "acquisitions", "acquisitions_per_s", "efficiency", "wait", "overlaps"},
		modeRWLock:    {"readers", "writers", "reader", "writer", "handoff_to_readers", "handoff_to_writer", "overlaps"},
		modeElection:  {"candidates", "successions_wanted", "leaders", "death", "resign", "death_p99_beyond_ttl_us", "lost", "term_regressions"},
	}
	for _, mode := range kindModes {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(backendRedis, mode)
			cfg.json = true
			out, _ := runTool(t, context.Background(), cfg)
			var rep struct{ Runs []runReport }
			require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout must be only JSON")
			require.Len(t, rep.Runs, 1)
			r := rep.Runs[0]
			var raw map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &raw))
			kind := raw["runs"].([]any)[0].(map[string]any)[mode].(map[string]any)
			for _, k := range want[mode] {
				require.Contains(t, kind, k)
			}
			requireKindJSON(t, mode, r)
		})
	}
}

// requireKindJSON checks the figures of a kind run's JSON.
func requireKindJSON(t *testing.T, mode string, r runReport) {
	t.Helper()
	require.Positive(t, r.Cost.Ops)
	require.True(t, r.Cost.RedisKnown)
	switch mode {
	case modeSemaphore:
		s := r.Semaphore
		require.Positive(t, s.Uncontended.Semaphore.Count)
		require.Positive(t, s.Uncontended.Mutex.Count)
		require.Positive(t, s.Uncontended.P50Ratio)
		require.Positive(t, s.Acquisitions)
		require.Equal(t, s.Acquisitions, s.Wait.Count)
		require.Zero(t, s.Overlaps)
	case modeRWLock:
		w := r.RWLock
		require.Positive(t, w.Reader.Acquisitions)
		require.Positive(t, w.Writer.Acquisitions)
		require.Equal(t, r.Cost.Ops, w.Reader.Acquisitions+w.Writer.Acquisitions)
		require.Zero(t, w.Overlaps)
	case modeElection:
		e := r.Election
		require.EqualValues(t, 4, e.Death.Count+e.Resign.Count)
		require.EqualValues(t, 2, e.Death.Count, "every other leader dies")
		require.Greater(t, time.Duration(e.Death.P50), time.Duration(e.Resign.P50), "a death waits for the TTL, a resignation does not")
		require.Zero(t, e.TermRegressions)
	}
}

func TestParseFlagsKinds(t *testing.T) {
	cfg, err := parseFlags([]string{"-mode", "semaphore"}, &bytes.Buffer{})
	require.NoError(t, err)
	d := cfg.withDefaults()
	require.Equal(t, defaultPermits, d.permits)
	require.Equal(t, 2*defaultPermits, d.workers)
	require.Equal(t, d.workers, d.clients, "one client per worker")
	require.Equal(t, defaultContendedHold, d.hold)
	require.Equal(t, 3*time.Second, d.duration)

	cfg, err = parseFlags([]string{"-mode", "rwlock", "-readers", "0", "-writers", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	d = cfg.withDefaults()
	require.Equal(t, 0, d.readers)
	require.Equal(t, 3, d.workers)

	cfg, err = parseFlags([]string{"-mode", "election"}, &bytes.Buffer{})
	require.NoError(t, err)
	d = cfg.withDefaults()
	require.Equal(t, defaultCandidates, d.workers)
	require.Equal(t, defaultTerms, d.terms)
	require.Equal(t, defaultElectionTTL, d.ttl)
	require.Equal(t, defaultElectionDuration, d.duration)

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "semaphore", "-permits", "65"}, "-permits 65: a semaphore has at most 64"},
		{[]string{"-mode", "semaphore", "-permits", "0"}, "must be at least 1"},
		{[]string{"-mode", "semaphore", "-permits", "4", "-workers", "4"}, "-workers 4 must be more than -permits 4"},
		{[]string{"-mode", "semaphore", "-client", "polling"}, "-client polling runs the polling client"},
		{[]string{"-mode", "rwlock", "-client", "all"}, "-client all"},
		{[]string{"-mode", "rwlock", "-workers", "3"}, "takes -readers and -writers, not -workers"},
		{[]string{"-mode", "rwlock", "-readers", "0", "-writers", "0"}, "needs a reader or a writer"},
		{[]string{"-mode", "rwlock", "-readers", "-1"}, "must not be negative"},
		{[]string{"-mode", "election", "-workers", "1"}, "at least 2 candidates"},
		{[]string{"-mode", "election", "-workers", "4", "-clients", "2"}, "a Client of its own"},
		{[]string{"-mode", "election", "-terms", "0"}, "must be at least 1"},
		{[]string{"-mode", "election", "-hold", "500ms"}, "shorter than -ttl 500ms"},
		{[]string{"-mode", "election", "-kill-node", "1"}, "takes no -pause-node, -kill-node"},
		{[]string{"-mode", "semaphore", "-plot", "x.svg"}, "-plot"},
		{[]string{"-permits", "3"}, "-permits is for -mode semaphore (not latency)"},
		{[]string{"-mode", "semaphore", "-writers", "1"}, "-readers and -writers are for -mode rwlock"},
		{[]string{"-mode", "contended", "-terms", "5"}, "-terms is for -mode election"},
		{[]string{"-mode", "mutex"}, "want one of latency, throughput, contended, takeover, semaphore, rwlock, election"},
		{[]string{"-duration", "0s"}, "-duration 0s must be positive"},
	} {
		_, err := parseFlags(bad.args, &bytes.Buffer{})
		require.ErrorContains(t, err, bad.want, "%q", bad.args)
	}

	var usage bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &usage)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"-permits", "-readers", "-writers", "-terms", `"semaphore"`, `"rwlock"`, `"election"`} {
		require.Contains(t, usage.String(), f)
	}
}

func TestParseSwitches(t *testing.T) {
	status := "Name:\tredis-server\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n"
	require.EqualValues(t, 127, parseSwitches(status))
	require.EqualValues(t, -1, parseSwitches("Name:\tredis-server\nvoluntary_ctxt_switches:\t120\n"))
	require.EqualValues(t, -1, contextSwitches(0))
	require.EqualValues(t, -1, contextSwitches(os.Getpid()), "this process is no redis-server")
}

func TestServerVersion(t *testing.T) {
	v, ok := serverVersion(map[string]string{"redis_version": "7.0.15"})
	require.True(t, ok)
	require.Equal(t, "redis-server 7.0.15", v)
	v, ok = serverVersion(map[string]string{"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.0.1"})
	require.True(t, ok)
	require.Equal(t, "valkey-server 8.0.1", v)
	_, ok = serverVersion(map[string]string{})
	require.False(t, ok)
}
