package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// percentiles are the columns of the latency table, with max last.
// The quantiles are in per mille, so that ranks are exact integers.
var percentiles = []struct {
	name     string
	perMille int
}{{"p50", 500}, {"p90", 900}, {"p99", 990}, {"max", 1000}}

// writeReport prints the run's setup and results.
func writeReport(w io.Writer, cfg config, ns *nodes, quorum int, res *result) {
	fmt.Fprintf(w, "backend   %s\n", ns.backend)
	fmt.Fprintf(w, "nodes     %d (quorum %d), node timeout %v\n", len(ns.addrs), quorum, cfg.nodeTimeout)
	fmt.Fprintf(w, "workers   %d, keys %s, ttl %v\n", cfg.workers, cfg.keys, cfg.ttl)
	duration := fmt.Sprintf("%.3fs measured (-duration %v)", res.elapsed.Seconds(), cfg.duration)
	if res.interrupted {
		duration += ", interrupted"
	}
	fmt.Fprintf(w, "duration  %s\n\n", duration)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "latency\tcount\t")
	for _, p := range percentiles {
		fmt.Fprintf(tw, "%s\t", p.name)
	}
	fmt.Fprintln(tw)
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{{"acquire", res.acquire}, {"release", res.release}} {
		fmt.Fprintf(tw, "%s\t%d\t", row.name, len(row.d))
		for _, p := range percentiles {
			fmt.Fprintf(tw, "%s\t", formatLatency(row.d, p.perMille))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	rate := 0.0
	if s := res.elapsed.Seconds(); s > 0 {
		rate = float64(res.rounds) / s
	}
	fmt.Fprintf(w, "\nrounds    %d lock+unlock (%.0f/s)\n", res.rounds, rate)
	if res.connsKnown {
		fmt.Fprintf(w, "conns     %d dialled while measuring, %d open at the end (all nodes)\n", res.dials, res.connsOpen)
	}
	if res.leftover > 0 {
		fmt.Fprintf(w, "leftover  %d lock keys still on the nodes after every Unlock returned and the client closed (they expire with the TTL)\n", res.leftover)
	}
	if res.unfinished > 0 {
		fmt.Fprintf(w, "cut short %d Lock calls in progress when the run ended; the longest had waited %s",
			res.unfinished, formatDuration(res.longestWait))
		if res.longestWait > cfg.nodeTimeout {
			// Longer than one round: show why it had not acquired.
			fmt.Fprintf(w, ": %s", oneLine(res.waitErr.Error()))
		}
		fmt.Fprintln(w)
	}
	if len(res.errors) == 0 {
		fmt.Fprintln(w, "errors    none")
		return
	}
	total := 0
	for _, e := range res.errors {
		total += e.count
	}
	fmt.Fprintf(w, "errors    %d\n", total)
	for _, e := range res.errors {
		fmt.Fprintf(w, "  %6d  %s\n          first: %s\n", e.count, e.kind, oneLine(e.first))
	}
}

// formatLatency returns the quantile of the sorted latencies, or "-" when
// there are none.
func formatLatency(sorted []time.Duration, perMille int) string {
	if len(sorted) == 0 {
		return "-"
	}
	return formatDuration(percentile(sorted, perMille))
}

// percentile returns the nearest-rank quantile of the sorted, non-empty
// values: the smallest value with at least perMille/1000 of them at or
// below it.
func percentile(sorted []time.Duration, perMille int) time.Duration {
	rank := (perMille*len(sorted) + 999) / 1000 // ceil, 1-based
	return sorted[max(1, min(rank, len(sorted)))-1]
}

// formatDuration prints microseconds below 1ms, and three significant
// digits above.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// oneLine keeps a multi-line error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
