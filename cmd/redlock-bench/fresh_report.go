package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// freshRow is one row of fresh mode's table: a burst, or the median of
// the bursts.
type freshRow struct {
	name     string
	within   []int         // [k-1]: the Clients that took their key within k TryLocks
	p50, p99 time.Duration // of the Clients' first TryLock
}

// burstRow sums up burst b, whose Clients made up to tries TryLocks.
func burstRow(name string, b *freshBurst, tries int) freshRow {
	r := freshRow{name: name}
	for k := 1; k <= tries; k++ {
		r.within = append(r.within, b.within(k))
	}
	h := newHist()
	for _, d := range b.first {
		h.record(d)
	}
	r.p50, r.p99 = h.quantile(0.50), h.quantile(0.99)
	return r
}

// medianRow is the median of each column of rows.
func medianRow(rows []freshRow, tries int) freshRow {
	m := freshRow{name: "median"}
	for k := range tries {
		m.within = append(m.within, median(rows, func(r freshRow) int { return r.within[k] }))
	}
	m.p50 = median(rows, func(r freshRow) time.Duration { return r.p50 })
	m.p99 = median(rows, func(r freshRow) time.Duration { return r.p99 })
	return m
}

// median returns the median of f over rows: with an even count, the
// lower of the two middle values.
func median[T cmp.Ordered](rows []freshRow, f func(freshRow) T) T {
	v := make([]T, len(rows))
	for i, r := range rows {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// writeFreshReport prints fresh mode's report as a table for people.
func writeFreshReport(w io.Writer, cfg config, ns *nodes, res *freshResult) {
	fmt.Fprintf(w, "backend   %s\n", ns.backend)
	fmt.Fprintf(w, "nodes     %d (quorum %d), node timeout %v\n", len(ns.addrs), len(ns.addrs)/2+1, cfg.nodeTimeout)
	pause := fmt.Sprintf("%v apart", cfg.pause)
	if cfg.pause == 0 {
		pause = "back to back"
	}
	bursts := plural(len(res.bursts), "burst")
	if res.interrupted {
		bursts += ", interrupted"
	}
	fmt.Fprintf(w, "mode      fresh: %s at once per burst, each new, on pools of its own (%s), a key each, ttl %v; up to %s, %s, then Unlock; %s\n",
		plural(cfg.clients, "client"), cfg.poolKinds()[0], cfg.ttl, plural(cfg.tries, "TryLock"), pause, bursts)
	if cfg.busy > 0 {
		procs := "process"
		if cfg.busy > 1 {
			procs = "processes"
		}
		fmt.Fprintf(w, "busy      %d CPU-bound helper %s beside the run (GOMAXPROCS=1, a core each)\n", cfg.busy, procs)
	} else {
		fmt.Fprintln(w, "busy      none")
	}
	writeDialFloor(w, cfg, ns, res)
	fmt.Fprintln(w)
	writeFreshTable(w, cfg, res)
	fmt.Fprintln(w)
	writeErrors(w, freshErrors(res))
	if res.leftoverKnown {
		fmt.Fprintf(w, "leftover  %s on the nodes after every Client closed\n", plural(res.leftover, "lock key"))
	}
}

// writeDialFloor prints the dial floor beside the node timeout.
func writeDialFloor(w io.Writer, cfg config, ns *nodes, res *freshResult) {
	h := res.dial
	fmt.Fprintf(w, "dial floor %d raw connections at once (%d × %d nodes), dial+PING: p50 %s, p90 %s, max %s; node timeout %v\n",
		cfg.clients*len(ns.addrs), cfg.clients, len(ns.addrs),
		freshDuration(h, h.quantile(0.50)), freshDuration(h, h.quantile(0.90)), freshDuration(h, h.max()), cfg.nodeTimeout)
	if res.dialFailed > 0 {
		fmt.Fprintf(w, "          %d failed; first: %v\n", res.dialFailed, res.dialErr)
	}
}

// freshDuration formats d, one of h's figures, or "-" when h is empty.
func freshDuration(h *hist, d time.Duration) string {
	if h.count() == 0 {
		return "-"
	}
	return formatDuration(d)
}

// writeFreshTable prints a row per burst and their median: how many
// Clients took their key on the first TryLock and within each further
// one, and the first TryLock's latency.
func writeFreshTable(w io.Writer, cfg config, res *freshResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	head := []string{"burst", "try 1"}
	for k := 2; k <= cfg.tries; k++ {
		head = append(head, fmt.Sprintf("within %d", k))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "first try p50", "p99"), "\t"))
	var rows []freshRow
	for i, b := range res.bursts {
		rows = append(rows, burstRow(fmt.Sprint(i+1), b, cfg.tries))
	}
	if len(rows) > 0 {
		rows = append(rows, medianRow(rows, cfg.tries))
	}
	for _, r := range rows {
		cells := []string{r.name}
		for _, n := range r.within {
			cells = append(cells, fmt.Sprintf("%d/%d", n, cfg.clients))
		}
		cells = append(cells, formatDuration(r.p50), formatDuration(r.p99))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// freshErrors counts the errors of every burst by kind, the most
// frequent first.
func freshErrors(res *freshResult) []errorReport {
	byKind := map[string]*errorKind{}
	var kinds []*errorKind
	for _, b := range res.bursts {
		for _, errs := range b.errs {
			for _, e := range errs {
				kind := errKind(e.op, e.err)
				if k, ok := byKind[kind]; ok {
					k.count++
					continue
				}
				byKind[kind] = &errorKind{kind: kind, count: 1, first: oneLine(e.err.Error())}
				kinds = append(kinds, byKind[kind])
			}
		}
	}
	sortErrors(kinds)
	out := make([]errorReport, len(kinds))
	for i, k := range kinds {
		out[i] = errorReport{Kind: k.kind, Count: k.count, First: k.first}
	}
	return out
}
