package main

import (
	"bytes"
	"context"
	"flag"
	"os"
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
	// A latency row: a name, a nonzero count and four durations.
	latencyRow = func(name string) *regexp.Regexp {
		d := `[0-9.]+(µs|ms|s)`
		return regexp.MustCompile(`(?m)^ *` + name + ` +[1-9][0-9]* +` + d + ` +` + d + ` +` + d + ` +` + d + ` *$`)
	}
)

// requireReport checks that out is a report with some rounds and both
// latency rows, and returns the number of rounds.
func requireReport(t *testing.T, out string) int {
	t.Helper()
	m := roundsLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no rounds line")
	rounds, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.Positive(t, rounds)
	require.Regexp(t, headerLine, out)
	require.Regexp(t, latencyRow("acquire"), out)
	require.Regexp(t, latencyRow("release"), out)
	require.Regexp(t, `(?m)^nodes +5 \(quorum 3\)`, out)
	return rounds
}

func testConfig(backend string) config {
	cfg := defaultConfig()
	cfg.backend = backend
	cfg.duration = 300 * time.Millisecond
	return cfg
}

func TestRunMiniredis(t *testing.T) {
	cfg := testConfig(backendMiniredis)
	out, errOut := runTool(t, context.Background(), cfg)
	requireReport(t, out)
	require.Regexp(t, `(?m)^backend +miniredis`, out)
	require.Regexp(t, `(?m)^workers +1, keys distinct, ttl 10s$`, out)
	require.Contains(t, out, "errors    none")
	require.Contains(t, errOut, "NOT representative")
	require.Contains(t, errOut, "apt-get install redis-server")
}

func TestRunMiniredisSharedKey(t *testing.T) {
	cfg := testConfig(backendMiniredis)
	cfg.workers, cfg.keys = 4, keysOne
	out, _ := runTool(t, context.Background(), cfg)
	requireReport(t, out)
	require.Regexp(t, `(?m)^workers +4, keys one,`, out)
	require.Contains(t, out, "errors    none")
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
	cfg := testConfig(backendAuto)
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
	cfg := testConfig(backendMiniredis)
	cfg.duration = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	out, errOut := runTool(t, ctx, cfg)
	require.Less(t, time.Since(start), 10*time.Second)
	requireReport(t, out)
	require.Contains(t, out, "interrupted")
	require.Contains(t, errOut, "interrupted")
}

func TestRunRedisServer(t *testing.T) {
	if _, err := redistest.Path(); err != nil {
		if os.Getenv("REDLOCK_REQUIRE_REDIS") == "1" {
			t.Fatalf("%v (REDLOCK_REQUIRE_REDIS=1)", err)
		}
		t.Skipf("%v (set REDLOCK_REQUIRE_REDIS=1 to fail instead of skipping)", err)
	}
	before := childProcesses(t)
	cfg := testConfig(backendRedis)
	cfg.workers = 2
	out, errOut := runTool(t, context.Background(), cfg)
	requireReport(t, out)
	require.Regexp(t, `(?m)^backend +redis-server [0-9]+\.[0-9]+\.[0-9]+, 5 local nodes started by the tool$`, out)
	require.Contains(t, out, "errors    none")
	require.NotContains(t, errOut, "NOT representative")
	require.Equal(t, before, childProcesses(t), "redis-server processes left behind")
}

func TestRunBadTTL(t *testing.T) {
	cfg := testConfig(backendMiniredis)
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

	cfg, err = parseFlags([]string{"-addrs", "a:1, b:2,", "-duration", "1s", "-workers", "32",
		"-ttl", "2s", "-node-timeout", "20ms", "-keys", "one"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2"}, cfg.addrs)
	require.Equal(t, time.Second, cfg.duration)
	require.Equal(t, 32, cfg.workers)
	require.Equal(t, 2*time.Second, cfg.ttl)
	require.Equal(t, 20*time.Millisecond, cfg.nodeTimeout)
	require.Equal(t, keysOne, cfg.keys)

	for _, bad := range [][]string{
		{"-workers", "0"},
		{"-duration", "0s"},
		{"-ttl", "-1s"},
		{"-node-timeout", "0s"},
		{"-keys", "some"},
		{"-addrs", ","},
		{"-backend", "other"},
		{"-backend", "miniredis", "-addrs", "a:1"},
		{"extra"},
		{"-nosuchflag"},
	} {
		_, err := parseFlags(bad, &bytes.Buffer{})
		require.Error(t, err, "%q", bad)
	}

	var usage bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &usage)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, usage.String(), "-duration")
	require.NotContains(t, usage.String(), "backend", "-backend is for tests only")
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	require.Equal(t, time.Duration(50), percentile(d, 500))
	require.Equal(t, time.Duration(90), percentile(d, 900))
	require.Equal(t, time.Duration(99), percentile(d, 990))
	require.Equal(t, time.Duration(100), percentile(d, 1000))
	require.Equal(t, time.Duration(7), percentile([]time.Duration{7}, 990))
	require.Equal(t, time.Duration(2), percentile([]time.Duration{1, 2}, 900))
	require.Equal(t, time.Duration(1), percentile([]time.Duration{1, 2}, 500))
	require.Equal(t, "-", formatLatency(nil, 500))
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
}
