package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freshRowRE matches a row of fresh mode's table with 2 tries: its name,
// two counts of the 10 Clients and two durations.
var freshRowRE = regexp.MustCompile(`(?m)^(1|median) +(\d+)/10 +(\d+)/10 +[0-9.]+(µs|ms|s) +[0-9.]+(µs|ms|s)$`)

// requireFreshReport checks the shape of a fresh report of 10 Clients,
// 1 burst and 2 tries, and that its counts are within [0, 10] and grow
// with the tries. How many Clients take their key on the first try
// depends on the machine: no figure is checked for speed.
func requireFreshReport(t *testing.T, out string) {
	t.Helper()
	require.Regexp(t, `(?m)^nodes +5 \(quorum 3\), node timeout 500ms$`, out)
	require.Regexp(t, `(?m)^mode +fresh: 10 clients at once per burst, each new, on pools of its own \(pipelined\), a key each, ttl 10s; up to 2 TryLocks, 10ms apart, then Unlock; 1 burst$`, out)
	require.Regexp(t, `(?m)^dial floor 50 raw connections at once \(10 × 5 nodes\), dial\+PING: p50 [0-9.]+(µs|ms|s), p90 [0-9.]+(µs|ms|s), max [0-9.]+(µs|ms|s); node timeout 500ms$`, out)
	require.Regexp(t, `(?m)^burst +try 1 +within 2 +first try p50 +p99$`, out)
	rows := freshRowRE.FindAllStringSubmatch(out, -1)
	require.Len(t, rows, 2, "a burst and the median")
	for _, r := range rows {
		first, err := strconv.Atoi(r[2])
		require.NoError(t, err)
		within2, err := strconv.Atoi(r[3])
		require.NoError(t, err)
		require.True(t, 0 <= first && first <= within2 && within2 <= 10, "%q", r[0])
	}
	require.Equal(t, rows[0][2:4], rows[1][2:4], "the median of one burst is the burst")
	require.Regexp(t, `(?m)^errors +(none|[0-9]+)$`, out)
	require.Regexp(t, `(?m)^leftover +0 lock keys on the nodes after every Client closed$`, out)
}

// TestFreshRedisServer runs fresh mode on redis-server quietly and with
// a CPU-bound helper process beside it (the test binary again, see
// TestMain), and checks that no process is left behind.
func TestFreshRedisServer(t *testing.T) {
	requireRedis(t)
	before := childProcesses(t)
	for _, busy := range []int{0, 1} {
		t.Run(fmt.Sprintf("busy %d", busy), func(t *testing.T) {
			cfg := testConfig(backendRedis, modeFresh)
			cfg.busy = busy
			out, _ := runTool(t, context.Background(), cfg)
			requireFreshReport(t, out)
			want := "none"
			if busy > 0 {
				want = `1 CPU-bound helper process beside the run \(GOMAXPROCS=1, a core each\)`
			}
			require.Regexp(t, `(?m)^busy +`+want+`$`, out)
		})
	}
	require.Equal(t, before, childProcesses(t), "redis-server or helper processes left behind")
}

// TestFreshMiniredis runs fresh mode on the in-process fallback.
func TestFreshMiniredis(t *testing.T) {
	out, _ := runTool(t, context.Background(), testConfig(backendMiniredis, modeFresh))
	require.Regexp(t, `(?m)^backend +miniredis`, out)
	requireFreshReport(t, out)
}

func TestParseFlagsFresh(t *testing.T) {
	cfg, err := parseFlags([]string{"-mode", "fresh"}, &bytes.Buffer{})
	require.NoError(t, err)
	d := cfg.withDefaults()
	require.Equal(t, defaultFreshClients, d.clients)
	require.Equal(t, d.clients, d.workers, "one worker per client")
	require.Equal(t, defaultTries, d.tries)
	require.Equal(t, defaultPause, d.pause)
	require.Equal(t, defaultBursts, d.bursts)
	require.Equal(t, 0, d.busy)

	cfg, err = parseFlags([]string{"-mode", "fresh", "-clients", "20", "-pause", "0", "-busy", "2", "-tries", "5"}, &bytes.Buffer{})
	require.NoError(t, err)
	d = cfg.withDefaults()
	require.Equal(t, 20, d.workers)
	require.Equal(t, time.Duration(0), d.pause)
	require.Equal(t, 2, d.busy)
	require.Equal(t, 5, d.tries)

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "fresh", "-workers", "3"}, "give -clients, not -workers"},
		{[]string{"-mode", "fresh", "-duration", "3s"}, "runs -bursts, not -duration"},
		{[]string{"-mode", "fresh", "-hold", "1ms"}, "takes no -hold"},
		{[]string{"-mode", "fresh", "-pause", "-2ms"}, "must not be negative"},
		{[]string{"-mode", "fresh", "-tries", "0"}, "must be at least 1"},
		{[]string{"-mode", "fresh", "-busy", "-1"}, "must not be negative"},
		{[]string{"-mode", "fresh", "-client", "polling"}, "-client polling is not one"},
		{[]string{"-mode", "fresh", "-json"}, "takes no -pause-node, -kill-node, -floor, -plot or -json"},
		{[]string{"-mode", "throughput", "-busy", "1"}, "are for -mode fresh (not throughput)"},
		{[]string{"-pause", "1s"}, "are for -mode fresh (not latency)"},
	} {
		_, err := parseFlags(bad.args, &bytes.Buffer{})
		require.ErrorContains(t, err, bad.want, "%q", bad.args)
	}

	var usage bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &usage)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"-tries", "-pause", "-bursts", "-busy", `"fresh"`} {
		require.Contains(t, usage.String(), f)
	}
}
