package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// poolDescriptions say what each pool kind is, for the table.
var poolDescriptions = map[string]string{
	poolPipelined: "pool.New: callers' commands pipelined on one connection per node",
	poolPlain:     "pool.FromRedigo on a redigo *redis.Pool: one connection per call",
	poolGoredis:   "pool/goredis on a go-redis *redis.Client per node (its connection pool, one connection per call)",
	poolRueidis:   "pool/rueidispool on a rueidis client per node (its auto-pipelining)",
	poolPolling: fmt.Sprintf("redsync-style polling client on a redigo *redis.Pool per node: SET NX PX on every node, "+
		"on failure the GET/DEL release script on every node and a retry after %v-%v",
		pollDelayMin, pollDelayMax-time.Millisecond),
}

// writeReport prints the report as a table for people.
func writeReport(w io.Writer, rep *report) {
	fmt.Fprintf(w, "backend   %s\n", rep.Backend)
	fmt.Fprintf(w, "nodes     %d (quorum %d), node timeout %v\n", rep.Nodes, rep.Quorum, time.Duration(rep.NodeTimeout))
	fmt.Fprintf(w, "mode      %s: %s on %s, keys %s, ttl %v, hold %v\n",
		rep.Mode, plural(rep.Workers, "worker"), plural(rep.Clients, "client"), rep.Keys, time.Duration(rep.TTL), time.Duration(rep.Hold))
	d := fmt.Sprintf("%v per pool kind", time.Duration(rep.Duration))
	if rep.Interrupted {
		d += ", interrupted"
	}
	fmt.Fprintf(w, "clients   %s, each with connections of its own to every node (its own pools); workers dealt round-robin\n",
		plural(rep.Clients, "client"))
	fmt.Fprintf(w, "duration  %s\n", d)
	for _, r := range rep.Runs {
		fmt.Fprintln(w)
		writeRun(w, rep, r)
	}
	if rep.Ratio != nil {
		fmt.Fprintf(w, "\nratio     pipelined/redigo: rounds/s %s, acquire p50 %s\n",
			formatRatio(rep.Ratio.RoundsPerSec), formatRatio(rep.Ratio.AcquireP50))
	}
	if len(rep.VsPipelined) > 0 {
		fmt.Fprintln(w, "\nvs pipelined each kind ÷ pool.New's, same nodes, this run:")
		for _, v := range rep.VsPipelined {
			fmt.Fprintf(w, "  %-9s rounds/s %s, acquire p50 %s, p99 %s, client CPU per op %s, Redis CPU per op %s, allocations %s\n",
				v.Pool, formatRatio(v.RoundsPerSec), formatRatio(v.AcquireP50), formatRatio(v.AcquireP99),
				formatRatio(v.ClientCPUPerOp), formatRatio(v.RedisCPUPerOp), formatRatio(v.AllocsPerRound))
		}
	}
	if len(rep.VsPolling) > 0 {
		fmt.Fprintf(w, "\nvs polling each kind ÷ the polling kind, same nodes, this run (polling: %s):\n",
			plural(int(rep.VsPolling[0].PollingAcquisitions), "acquisition"))
		for _, v := range rep.VsPolling {
			fmt.Fprintf(w, "  %-9s acquisitions/s %s, Redis CPU per acquisition %s (user %s, sys %s), commands per acquisition %s (script calls %s), wait p99 %s, idle gap p50 %s, client CPU per acquisition %s\n",
				v.Pool, formatRatio(v.AcquisitionsPerSec), formatRatio(v.RedisCPUPerAcq), formatRatio(v.RedisUserCPUPerAcq),
				formatRatio(v.RedisSysCPUPerAcq), formatRatio(v.CommandsPerAcq),
				formatRatio(v.ScriptCallsPerAcq), formatRatio(v.WaitP99), formatRatio(v.IdleGapP50), formatRatio(v.ClientCPUPerAcq))
		}
	}
}

// writeRun prints one pool kind's results.
func writeRun(w io.Writer, rep *report, r runReport) {
	measured := fmt.Sprintf("%.3fs measured", time.Duration(r.Elapsed).Seconds())
	if r.Interrupted {
		measured += ", interrupted"
	}
	fmt.Fprintf(w, "pool      %s, %s (%s)\n\n", r.Pool, measured, poolDescriptions[r.Pool])
	if writeKindRun(w, rep, r) {
		return
	}
	writeLatencies(w, r)

	if r.Takeover != nil {
		fmt.Fprintf(w, "\nrounds    %d lock, hold %v, die without Unlock (%.1f/s)\n", r.Rounds, time.Duration(rep.Hold), r.RoundsPerSec)
	} else {
		fmt.Fprintf(w, "\nrounds    %d lock+unlock (%.0f/s)\n", r.Rounds, r.RoundsPerSec)
	}
	if r.Rounds > 0 {
		fmt.Fprintf(w, "allocs    %.1f per round (heap allocations of the whole process while measuring ÷ rounds)\n", r.AllocsPerRound)
	}
	writeCost(w, rep, r.Cost)
	if p := r.Polling; p != nil {
		fmt.Fprintf(w, "polling   %.2f attempts per acquisition (max %d); %d acquisitions needed more than redsync's %d tries, after which its Lock fails (this client goes on until the run ends); retry delay %v-%v, drift factor %.2f\n",
			p.AttemptsPerAcquisition, p.MaxAttempts, p.OverTries, p.RedsyncTries,
			time.Duration(p.DelayMin), time.Duration(p.DelayMax), p.DriftFactor)
	}
	if f := r.Floor; f != nil {
		fmt.Fprintf(w, "floor     lock p50 / floor p50 = %s (floor: SET NX PX written to all %d nodes before reading any reply, one raw connection per node)\n",
			formatRatio(f.LockP50Ratio), rep.Nodes)
		if f.Error != "" {
			fmt.Fprintf(w, "          floor stopped early: %s\n", f.Error)
		}
	}
	if c := r.Contended; c != nil {
		eff := "- (no hold)"
		if rep.Hold > 0 {
			eff = fmt.Sprintf("%.2f", c.Efficiency)
		}
		fmt.Fprintf(w, "contended %d acquisitions (%.1f/s), efficiency %s (acquisitions/s × hold %v)\n",
			c.Acquisitions, c.PerSec, eff, time.Duration(rep.Hold))
		fmt.Fprintf(w, "          wait (acquire row) p99 %s, max %s; hand-off p50 %s, p99 %s; %d of %d went back to the worker that had just released; %d overlapping holds\n",
			formatSummary(r.Acquire, r.Acquire.P99), formatSummary(r.Acquire, r.Acquire.Max),
			formatSummary(c.Handoff, c.Handoff.P50), formatSummary(c.Handoff, c.Handoff.P99),
			c.Reacquired, c.Acquisitions, c.Overlaps)
		if c.Reference != nil && c.HandoffRatio != nil {
			unlock := "-"
			if u := c.ReferenceUnlock; u != nil {
				unlock = formatSummary(*u, u.P50)
			}
			fmt.Fprintf(w, "          hand-off p50 / uncontended lock p50 = %.2fx, idle p50 / it = %.2fx (reference: 1 worker, own key, same hold, after the run: lock p50 %s, unlock p50 %s)\n",
				*c.HandoffRatio, *c.IdleRatio, formatSummary(*c.Reference, c.Reference.P50), unlock)
		}
		if c.ReferenceError != "" {
			fmt.Fprintf(w, "          reference failed: %s\n", c.ReferenceError)
		}
		if g := r.IdleGap; g != nil {
			l := g.Latency
			fmt.Fprintf(w, "idle gap  p50 %s, p90 %s, p99 %s (idle row: from a holder's Unlock starting to the next holder's Lock returning, whichever worker)\n",
				formatSummary(l, l.P50), formatSummary(l, l.P90), formatSummary(l, l.P99))
			fmt.Fprintln(w, "          hand-off row: from that Unlock returning to the next Lock returning, 0 when the next Lock returned first")
		}
	}
	if t := r.Takeover; t != nil {
		writeTakeover(w, rep, t)
	}
	if f := r.Fault; f != nil {
		writeFault(w, f)
	}
	if r.ConnsDialled != nil {
		floor := ""
		if r.Floor != nil {
			floor = ", the floor's included"
		}
		fmt.Fprintf(w, "conns     %d dialled while measuring, %d open at the end (all nodes%s)\n", *r.ConnsDialled, *r.ConnsOpen, floor)
	}
	switch {
	case r.Takeover != nil && r.LeftoverKnown:
		writeTakeoverLeftover(w, r.Leftover, r.Takeover.DeadKeys)
	case r.Takeover != nil:
		fmt.Fprintln(w, "leftover  not checked: only nodes the tool started are, and only when every node answers")
	case r.Leftover > 0:
		fmt.Fprintf(w, "leftover  %d lock keys still on the nodes after every Unlock returned and the clients closed (they expire with the TTL)\n", r.Leftover)
	}
	writeUnfinished(w, rep, r)
	writeErrors(w, r.Errors)
}

// writeUnfinished prints the Lock calls the end of the run cut short.
func writeUnfinished(w io.Writer, rep *report, r runReport) {
	if r.Unfinished == 0 {
		return
	}
	fmt.Fprintf(w, "cut short %d Lock calls in progress when the run ended; the longest had waited %s",
		r.Unfinished, formatDuration(time.Duration(r.LongestWait)))
	if r.LongestWait > rep.NodeTimeout {
		// Longer than one round: show why it had not acquired.
		fmt.Fprintf(w, ": %s", r.WaitError)
	}
	fmt.Fprintln(w)
}

// latencyRow is one row of the latency table.
type latencyRow struct {
	name string
	s    summary
}

// writeLatencies prints the latency table of a run.
func writeLatencies(w io.Writer, r runReport) {
	rows := []latencyRow{{"acquire", r.Acquire}}
	if r.Release != nil {
		rows = append(rows, latencyRow{"release", *r.Release})
	}
	if r.Floor != nil {
		rows = append(rows, latencyRow{"floor", r.Floor.Latency})
	}
	if r.Contended != nil {
		rows = append(rows, latencyRow{"handoff", r.Contended.Handoff}, latencyRow{"idle", r.Contended.Idle},
			latencyRow{"held", r.Contended.Held})
	}
	if r.Takeover != nil {
		rows = append(rows, latencyRow{"takeover", r.Takeover.Latency})
	}
	if r.Fault != nil {
		rows = append(rows, latencyRow{"before", r.Fault.Before}, latencyRow{"after", r.Fault.After})
	}
	writeRows(w, rows)
}

// writeRows prints a latency table.
func writeRows(w io.Writer, rows []latencyRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency\tcount\tp50\tp90\tp99\tmax\t")
	for _, row := range rows {
		s := row.s
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", row.name, s.Count,
			formatSummary(s, s.P50), formatSummary(s, s.P90), formatSummary(s, s.P99), formatSummary(s, s.Max))
	}
	tw.Flush()
}

// writeCost prints what the client and the nodes spent per operation.
func writeCost(w io.Writer, rep *report, c costReport) {
	op := "per " + c.Op
	client := "-"
	if c.ClientCPUKnown {
		client = formatPerOp(c.ClientCPUPerOp) + " (this process: getrusage user+sys"
		if c.HoldSpinPerOp > 0 {
			client += fmt.Sprintf("; at most %s of it the tool's yield loop ending each hold", formatPerOp(c.HoldSpinPerOp))
		}
		if c.ClientIncludesServers {
			client += "; the in-process servers included"
		}
		client += ")"
	}
	if c.RedisNodes == 0 {
		reason := "no node answered INFO"
		for _, n := range c.Nodes {
			if n.Error != "" {
				reason = n.Error
				break
			}
		}
		fmt.Fprintf(w, "cpu       %s: client %s; Redis not measured: %s\n", op, client, reason)
		return
	}
	nodes := fmt.Sprintf("summed over %s", plural(c.RedisNodes, "node"))
	if !c.RedisKnown {
		nodes = fmt.Sprintf("summed over the %d of %d nodes that answered", c.RedisNodes, len(c.Nodes))
	}
	fmt.Fprintf(w, "cpu       %s: client %s; Redis %s = user %s + sys %s (used_cpu_user, used_cpu_sys, %s)%s\n",
		op, client, formatPerOp(c.RedisCPUPerOp), formatPerOp(c.RedisUserCPUPerOp), formatPerOp(c.RedisSysCPUPerOp),
		nodes, formatSwitches("; context switches %.2f per node", c.SwitchesPerOpPerNode))
	floor := ""
	if c.FloorExcluded {
		floor = ", the floor's SET and DEL left out (not from the CPU)"
	}
	fmt.Fprintf(w, "commands  %s and node: %.2f commands, %.2f script calls (EVALSHA+EVAL); from INFO commandstats, the commands scripts run included, the tool's INFO left out%s\n",
		op, c.CommandsPerOpPerNode, c.ScriptCallsPerOpPerNode, floor)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  node\tcpu/op\tuser\tsys\tswitches/op\tcommands/op\tscripts/op\ttop commands %s\n", op)
	for _, n := range c.Nodes {
		if !n.Known {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\t-\t-\t-\t%s\n", n.Addr, n.Error)
			continue
		}
		var top []string
		for _, t := range n.Top {
			top = append(top, fmt.Sprintf("%s %.2f", t.Command, t.PerOp))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%s\n", n.Addr, formatPerOp(n.CPUPerOp), formatPerOp(n.UserCPUPerOp),
			formatPerOp(n.SysCPUPerOp), formatSwitches("%.2f", n.SwitchesPerOp), n.CommandsPerOp, n.ScriptCallsPerOp, strings.Join(top, ", "))
	}
	tw.Flush()
}

// formatSwitches prints context switches with format, or "-" (and
// nothing when format has more than the number) when unknown.
func formatSwitches(format string, n float64) string {
	if n < 0 {
		if format == "%.2f" {
			return "-"
		}
		return ""
	}
	return fmt.Sprintf(format, n)
}

// formatPerOp prints a per-operation time: tenths of µs below 10µs.
func formatPerOp(d duration) string {
	if t := time.Duration(d); t < 10*time.Microsecond {
		return fmt.Sprintf("%.1fµs", float64(t)/float64(time.Microsecond))
	}
	return formatDuration(time.Duration(d))
}

// writeTakeover prints what takeover mode measured.
func writeTakeover(w io.Writer, rep *report, t *takeoverReport) {
	l := t.Latency
	fmt.Fprintf(w, "takeover  %d takeovers of a dead holder's lock: p50 %s, p99 %s, max %s (takeover row: from the key's expiry, its holder's Lock return + ttl %v, to the next Lock returning)\n",
		l.Count, formatSummary(l, l.P50), formatSummary(l, l.P99), formatSummary(l, l.Max), time.Duration(rep.TTL))
	fmt.Fprintf(w, "          wait (acquire row) includes the TTL; %d of %d taken over by the worker that had died (it calls Lock again from the expiry); %d before the expiry, counted as 0\n",
		t.Restarted, l.Count, t.Early)
	fmt.Fprintln(w, "idle gap  the takeover row: with no Unlock, the key is free from its expiry")
}

// writeTakeoverLeftover prints what the leftover check found in takeover
// mode, where holders die holding their keys.
func writeTakeoverLeftover(w io.Writer, leftover, dead int) {
	found := "no other lock key"
	if leftover > 0 {
		found = plural(leftover, "other lock key")
	}
	fmt.Fprintf(w, "leftover  %s on the nodes after the clients closed; %s of holders that died (told apart by their tokens, not counted: they expire with the TTL)\n",
		found, plural(dead, "key"))
}

// writeFault prints what a fault did.
func writeFault(w io.Writer, f *faultReport) {
	verb := (&fault{kind: f.Kind}).verb()
	if !f.Happened {
		fmt.Fprintf(w, "fault     node %d (%s) was to be %s %s into the run, but the run ended first\n",
			f.Node, f.Addr, verb, formatDuration(time.Duration(f.At)))
	} else {
		fmt.Fprintf(w, "fault     node %d (%s) %s %s into the run: acquire p99 after/before = %s (before %s, after %s)\n",
			f.Node, f.Addr, verb, formatDuration(time.Duration(f.At)), formatRatio(f.P99Ratio),
			formatSummary(f.Before, f.Before.P99), formatSummary(f.After, f.After.P99))
	}
	if f.Error != "" {
		fmt.Fprintf(w, "          fault error: %s\n", f.Error)
	}
}

// writeErrors prints the errors by kind.
func writeErrors(w io.Writer, errs []errorReport) {
	if len(errs) == 0 {
		fmt.Fprintln(w, "errors    none")
		return
	}
	total := 0
	for _, e := range errs {
		total += e.Count
	}
	fmt.Fprintf(w, "errors    %d\n", total)
	for _, e := range errs {
		fmt.Fprintf(w, "  %6d  %s\n          first: %s\n", e.Count, e.Kind, e.First)
	}
}

// formatSummary prints one of s's durations, or "-" when s is empty.
func formatSummary(s summary, d duration) string {
	if s.Count == 0 {
		return "-"
	}
	return formatDuration(time.Duration(d))
}

// plural prints n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// formatRatio prints a ratio, or "-" when it could not be computed.
func formatRatio(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
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
