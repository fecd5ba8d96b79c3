package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
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
		require.Regexp(t, `(?m)^mode +latency: 1 worker, keys distinct, ttl 10s, hold 0s$`, out)
		require.Regexp(t, latencyRowRE("floor"), out)
		require.Regexp(t, `(?m)^floor +lock p50 / floor p50 = [0-9.]+x `, out)
	case modeThroughput:
		require.Regexp(t, `(?m)^mode +throughput: 4 workers, keys distinct,`, out)
		require.NotRegexp(t, `(?m)^ *floor `, out)
	case modeContended:
		require.Regexp(t, `(?m)^mode +contended: 4 workers, keys one, ttl 10s, hold 2ms$`, out)
		require.Regexp(t, latencyRowRE("handoff"), out)
		require.Regexp(t, `(?m)^contended [1-9][0-9]* acquisitions \([0-9.]+/s\), efficiency [0-9.]+ `, out)
		require.Regexp(t, `(?m)^ +wait \(acquire row\) p99 [0-9.]+(µs|ms|s), max `, out)
	}
}

func TestModesMiniredis(t *testing.T) {
	for _, mode := range []string{modeLatency, modeThroughput, modeContended} {
		t.Run(mode, func(t *testing.T) {
			out, errOut := runTool(t, context.Background(), testConfig(backendMiniredis, mode))
			requireReport(t, out)
			requireMode(t, mode, out)
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
	for _, mode := range []string{modeLatency, modeThroughput, modeContended} {
		t.Run(mode, func(t *testing.T) {
			out, errOut := runTool(t, context.Background(), testConfig(backendRedis, mode))
			requireReport(t, out)
			requireMode(t, mode, out)
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
			for _, k := range []string{"mode", "backend", "nodes", "quorum", "workers", "ttl_us", "hold_us", "duration_us", "runs"} {
				require.Contains(t, rep, k)
			}
			require.Equal(t, mode, rep["mode"])
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
	out, errOut := runTool(t, context.Background(), cfg)
	requireReport(t, out)
	require.Regexp(t, `(?m)^backend +.*existing nodes$`, out)
	require.NotContains(t, errOut, "NOT representative")
	for _, m := range servers {
		_, err := info(m.Addr(), "")
		require.NoError(t, err, "the tool must not stop nodes it did not start")
		// Every lock was unlocked, but redlock can leave a key behind when
		// a SET was still in flight at Unlock; it must at least expire.
		for _, k := range m.Keys() {
			t.Logf("%s: key %s left behind, ttl %v", m.Addr(), k, m.TTL(k))
			require.Positive(t, m.TTL(k), "key %s on %s never expires", k, m.Addr())
			require.LessOrEqual(t, m.TTL(k), cfg.ttl)
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
	require.Equal(t, time.Duration(0), d.hold)
	require.Equal(t, []string{poolPipelined}, d.poolKinds())

	cfg, err = parseFlags([]string{"-addrs", "a:1, b:2,", "-duration", "1s", "-workers", "32",
		"-ttl", "2s", "-node-timeout", "20ms", "-mode", "throughput", "-pool", "both",
		"-hold", "1ms", "-json", "-plot", "x.svg", "-floor"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2"}, cfg.addrs)
	require.Equal(t, time.Second, cfg.duration)
	require.Equal(t, 32, cfg.workers)
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
	require.Equal(t, defaultContendedHold, d.hold)

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
		{"extra"},
		{"-nosuchflag"},
	} {
		_, err := parseFlags(bad, &bytes.Buffer{})
		require.Error(t, err, "%q", bad)
	}

	var usage bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &usage)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"-mode", "-pool", "-duration", "-hold", "-pause-node", "-kill-node", "-fault-after", "-json", "-plot", "-floor", "-nodes"} {
		require.Contains(t, usage.String(), f)
	}
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
	w0 := &worker{id: 0, handoff: ho, rec: newRecorder(false, true)}
	w1 := &worker{id: 1, handoff: ho, rec: newRecorder(false, true)}
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
