package main

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// report is everything the tool prints, as the table or as JSON. Ratios
// that cannot be computed (an empty side) are 0.
type report struct {
	Mode        string       `json:"mode"`
	Backend     string       `json:"backend"`
	Nodes       int          `json:"nodes"`
	Quorum      int          `json:"quorum"`
	NodeTimeout duration     `json:"node_timeout_us"`
	Workers     int          `json:"workers"`
	Clients     int          `json:"clients"` // redlock Clients, each with its own connections; workers are dealt round-robin
	Keys        string       `json:"keys"`    // "distinct" (a key per worker) or "one"
	TTL         duration     `json:"ttl_us"`
	Hold        duration     `json:"hold_us"`
	Duration    duration     `json:"duration_us"` // -duration, per pool kind
	Interrupted bool         `json:"interrupted"`
	Runs        []runReport  `json:"runs"`                         // one per pool kind
	Ratio       *ratioReport `json:"pipelined_vs_plain,omitempty"` // with -pool both or all
	// VsPipelined compares each other kind that carries the library
	// (redigo, goredis, rueidis) with pool.New, run in the same
	// invocation: each ratio is that kind's figure ÷ pipelined's.
	VsPipelined []vsPipelinedReport `json:"vs_pipelined,omitempty"`
	// VsPolling compares each other kind with the polling kind, in
	// contended mode with the polling kind and others in one run (-pool
	// all): each ratio is that kind's figure ÷ the polling kind's.
	VsPolling []vsPollingReport `json:"vs_polling,omitempty"`
}

// runReport is one pool kind's results.
type runReport struct {
	Pool           string           `json:"pool"`
	Elapsed        duration         `json:"elapsed_us"`
	Interrupted    bool             `json:"interrupted"`
	Rounds         int              `json:"rounds"` // lock+unlock with no error; takeover mode: acquisitions (lock, hold, die)
	RoundsPerSec   float64          `json:"rounds_per_s"`
	Acquire        summary          `json:"acquire"`           // in contended and takeover modes: the wait
	Release        *summary         `json:"release,omitempty"` // not in takeover mode: no Unlock
	Floor          *floorReport     `json:"floor,omitempty"`
	Contended      *contendedReport `json:"contended,omitempty"`
	Takeover       *takeoverReport  `json:"takeover,omitempty"`
	Fault          *faultReport     `json:"fault,omitempty"`
	AllocsPerRound float64          `json:"allocs_per_round"`    // whole process
	Cost           costReport       `json:"cost"`                // what the client and the servers spent per operation
	IdleGap        *idleGapReport   `json:"idle_gap,omitempty"`  // contended and takeover modes
	Polling        *pollingReport   `json:"polling,omitempty"`   // the polling kind
	Semaphore      *semaphoreReport `json:"semaphore,omitempty"` // semaphore mode
	RWLock         *rwlockReport    `json:"rwlock,omitempty"`    // rwlock mode
	Election       *electionReport  `json:"election,omitempty"`  // election mode
	ConnsDialled   *int64           `json:"conns_dialled,omitempty"`
	ConnsOpen      *int64           `json:"conns_open,omitempty"`
	LeftoverKnown  bool             `json:"leftover_checked"` // only on nodes the tool started, when all answer
	Leftover       int              `json:"leftover_keys"`    // takeover mode: not counting the dead holders' keys
	Unfinished     int              `json:"unfinished"`       // Lock calls cut short by the end
	LongestWait    duration         `json:"unfinished_longest_wait_us"`
	WaitError      string           `json:"unfinished_error,omitempty"`
	Errors         []errorReport    `json:"errors"`
}

// floorReport is the floor measured in a run.
type floorReport struct {
	Latency      summary `json:"latency"`        // SET to all nodes, then read all replies
	LockP50Ratio float64 `json:"lock_p50_ratio"` // acquire p50 / floor p50
	Error        string  `json:"error,omitempty"`
}

// contendedReport is what contended mode adds.
type contendedReport struct {
	Acquisitions int64   `json:"acquisitions"`
	PerSec       float64 `json:"acquisitions_per_s"`
	Efficiency   float64 `json:"efficiency"` // acquisitions/s ÷ (1/hold)
	Handoff      summary `json:"handoff"`    // Unlock returned → next Lock returned
	Held         summary `json:"held"`       // Lock returned → Unlock called: the hold as it was
	Idle         summary `json:"idle"`       // Unlock called → next Lock returned
	Reacquired   int     `json:"reacquired"` // acquisitions by the worker that released last
	Overlaps     int     `json:"overlaps"`   // acquisitions while another worker held the lock: 0 unless mutual exclusion failed
	// Reference is one worker's Lock on a key of its own at the same hold,
	// measured right after the run: one uncontended lock round at this
	// pace. HandoffRatio is hand-off p50 ÷ its p50.
	Reference *summary `json:"reference,omitempty"`
	// ReferenceUnlock is the reference worker's Unlock: the first round
	// after each hold, as the release that starts a hand-off is.
	ReferenceUnlock *summary `json:"reference_unlock,omitempty"`
	HandoffRatio    *float64 `json:"handoff_ratio,omitempty"`
	IdleRatio       *float64 `json:"idle_ratio,omitempty"` // idle p50 ÷ the reference's p50
	ReferenceError  string   `json:"reference_error,omitempty"`
}

// takeoverReport is what takeover mode adds. A holder dies (never
// Unlocks) at every acquisition; its key expires at expiry = t1 + ttl,
// where t1 is when its Lock returned.
type takeoverReport struct {
	Acquisitions int64   `json:"acquisitions"`
	PerSec       float64 `json:"acquisitions_per_s"`
	Latency      summary `json:"latency"`          // expiry → the next Lock returned (0 when before)
	Early        int     `json:"early"`            // takeovers whose Lock returned before the expiry, counted as 0
	Restarted    int     `json:"restarted"`        // takeovers by the worker that had died, calling Lock again from the expiry
	DeadKeys     int     `json:"dead_holder_keys"` // keys of dead holders still on the nodes at the end (they expire by themselves); not in leftover_keys
}

// faultReport is what a fault run adds.
type faultReport struct {
	Kind     string   `json:"kind"` // "pause" or "kill"
	Node     int      `json:"node"`
	Addr     string   `json:"addr"`
	At       duration `json:"at_us"`    // from the start of measuring
	Happened bool     `json:"happened"` // false when the run ended first
	Error    string   `json:"error,omitempty"`
	Before   summary  `json:"before"`    // acquire latency before the fault
	After    summary  `json:"after"`     // and after
	P99Ratio float64  `json:"p99_ratio"` // after p99 / before p99
}

// costReport is what the client and the nodes spent during the measured
// window, per operation: a lock+unlock round, or in contended and
// takeover modes an acquisition. Per-operation figures are 0 without
// operations.
type costReport struct {
	Op  string `json:"op"`  // "lock+unlock" or "acquisition"
	Ops int64  `json:"ops"` // lock+unlock rounds with no error; contended and takeover modes: acquisitions
	// ClientCPU is this process's CPU time, user + system, from
	// getrusage(RUSAGE_SELF): the lock client, the Go runtime and the
	// tool's bookkeeping, not the redis-server processes (but in-process
	// miniredis servers, ClientIncludesServers). HoldSpin is the wall
	// time spent in the yield loop at the end of each hold (holdFor),
	// which is the tool's: an upper bound of the CPU it burnt there.
	ClientCPUKnown        bool     `json:"client_cpu_known"`
	ClientCPU             duration `json:"client_cpu_us"`
	ClientCPUPerOp        duration `json:"client_cpu_per_op_us"`
	HoldSpinPerOp         duration `json:"hold_spin_per_op_us"`
	ClientIncludesServers bool     `json:"client_cpu_includes_servers,omitempty"`
	// RedisKnown is true when every node's figures are known (RedisNodes
	// of Nodes): each answered INFO all before and after the window, and
	// did not restart. The sums and means are over the known nodes.
	RedisKnown bool `json:"redis_known"`
	RedisNodes int  `json:"redis_nodes_known"`
	// RedisCPU is used_cpu_sys + used_cpu_user (the whole redis-server
	// process), summed over the nodes.
	RedisCPU      duration `json:"redis_cpu_us"`
	RedisCPUPerOp duration `json:"redis_cpu_per_op_us"`
	// RedisUserCPU and RedisSysCPU split RedisCPU: used_cpu_user (the
	// server's own work: commands, scripts, replies) and used_cpu_sys
	// (the kernel's, on its behalf: reads, writes, polling).
	RedisUserCPUPerOp duration `json:"redis_user_cpu_per_op_us"`
	RedisSysCPUPerOp  duration `json:"redis_sys_cpu_per_op_us"`
	// SwitchesPerOpPerNode is the mean, over the nodes whose processes
	// are on this machine (Linux), of their voluntary + involuntary
	// context switches per operation; -1 when no node's are known.
	SwitchesPerOpPerNode float64 `json:"context_switches_per_op_per_node"`
	// Commands counts every command a node ran (INFO commandstats: calls
	// + rejected_calls), those a script runs included, less the tool's own
	// INFO calls; ScriptCalls counts EVALSHA and EVAL. Both per operation
	// and per node: the mean over the known nodes.
	CommandsPerOpPerNode    float64 `json:"commands_per_op_per_node"`
	ScriptCallsPerOpPerNode float64 `json:"script_calls_per_op_per_node"`
	// FloorExcluded: the floor ran in the window (latency mode); its SET
	// and DEL are not counted, but the nodes' CPU includes them.
	FloorExcluded bool             `json:"floor_commands_excluded,omitempty"`
	Nodes         []nodeCostReport `json:"nodes"`
}

// nodeCostReport is what one node spent in the window.
type nodeCostReport struct {
	Addr             string           `json:"addr"`
	Known            bool             `json:"known"`
	Error            string           `json:"error,omitempty"` // why not known
	CPU              duration         `json:"cpu_us"`
	CPUPerOp         duration         `json:"cpu_per_op_us"`
	UserCPUPerOp     duration         `json:"user_cpu_per_op_us"`
	SysCPUPerOp      duration         `json:"sys_cpu_per_op_us"`
	SwitchesPerOp    float64          `json:"context_switches_per_op"` // -1: unknown
	Commands         int64            `json:"commands"`
	CommandsPerOp    float64          `json:"commands_per_op"`
	ScriptCalls      int64            `json:"script_calls"` // EVALSHA + EVAL
	ScriptCallsPerOp float64          `json:"script_calls_per_op"`
	Top              []commandCount   `json:"top_commands"` // the most called, most first
	ByCommand        map[string]int64 `json:"by_command"`   // every command's calls
}

// commandCount is one command's count on a node.
type commandCount struct {
	Command string  `json:"command"` // as INFO commandstats names it
	Calls   int64   `json:"calls"`
	PerOp   float64 `json:"per_op"`
}

// idleGapReport is how long the key sat free while workers wanted it:
// from a holder's Unlock starting (takeover mode: from its key expiring,
// as there is no Unlock) to the next holder's Lock returning, whichever
// worker that was.
type idleGapReport struct {
	From    string  `json:"from"` // "unlock called" or "key expired"
	Latency summary `json:"latency"`
}

// pollingReport is what the polling kind did, and its parameters.
type pollingReport struct {
	Attempts               int64    `json:"attempts"` // of the acquisitions made in the window
	AttemptsPerAcquisition float64  `json:"attempts_per_acquisition"`
	MaxAttempts            int64    `json:"max_attempts"`
	OverTries              int64    `json:"over_redsync_tries"` // acquisitions that took more than RedsyncTries attempts
	RedsyncTries           int      `json:"redsync_tries"`      // redsync's default tries; this client goes on until its context ends
	DelayMin               duration `json:"retry_delay_min_us"` // the delay before each retry: whole ms from min to max, uniform
	DelayMax               duration `json:"retry_delay_max_us"`
	DriftFactor            float64  `json:"drift_factor"`
	AttemptTimeout         duration `json:"attempt_timeout_us"` // ttl × 0.05: bounds getting connections
}

// vsPollingReport is one kind ÷ the polling kind, same nodes, same run.
type vsPollingReport struct {
	Pool                string  `json:"pool"`
	AcquisitionsPerSec  float64 `json:"acquisitions_per_s"`
	RedisCPUPerAcq      float64 `json:"redis_cpu_per_acquisition"` // 0 unless every node's figures are known in both runs
	RedisUserCPUPerAcq  float64 `json:"redis_user_cpu_per_acquisition"`
	RedisSysCPUPerAcq   float64 `json:"redis_sys_cpu_per_acquisition"`
	CommandsPerAcq      float64 `json:"commands_per_acquisition"`
	ScriptCallsPerAcq   float64 `json:"script_calls_per_acquisition"`
	ClientCPUPerAcq     float64 `json:"client_cpu_per_acquisition"`
	WaitP99             float64 `json:"wait_p99"`
	IdleGapP50          float64 `json:"idle_gap_p50"`
	PollingAcquisitions int64   `json:"polling_acquisitions"` // few make the polling side's figures rough
}

// vsPipelinedReport is one kind's figures ÷ the pipelined kind's.
type vsPipelinedReport struct {
	Pool           string  `json:"pool"`
	RoundsPerSec   float64 `json:"rounds_per_s"`
	AcquireP50     float64 `json:"acquire_p50"`
	AcquireP99     float64 `json:"acquire_p99"`
	ClientCPUPerOp float64 `json:"client_cpu_per_op"`
	RedisCPUPerOp  float64 `json:"redis_cpu_per_op"`
	AllocsPerRound float64 `json:"allocs_per_round"`
}

// ratioReport compares -pool both's runs: pipelined ÷ plain.
type ratioReport struct {
	RoundsPerSec float64 `json:"rounds_per_s"`
	AcquireP50   float64 `json:"acquire_p50"`
}

type errorReport struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	First string `json:"first"`
}

// duration is a time.Duration that JSON shows in microseconds.
type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(float64(d)/float64(time.Microsecond)*10) / 10)
}

func (d *duration) UnmarshalJSON(b []byte) error {
	var us float64
	if err := json.Unmarshal(b, &us); err != nil {
		return err
	}
	*d = duration(us * float64(time.Microsecond))
	return nil
}

// newReport puts the runs' results together.
func newReport(cfg config, ns *nodes, runs []*runResult) *report {
	rep := &report{
		Mode:        cfg.mode,
		Backend:     ns.backend,
		Nodes:       len(ns.addrs),
		Quorum:      len(ns.addrs)/2 + 1,
		NodeTimeout: duration(cfg.nodeTimeout),
		Workers:     cfg.workers,
		Clients:     cfg.clients,
		Keys:        "distinct",
		TTL:         duration(cfg.ttl),
		Hold:        duration(cfg.hold),
		Duration:    duration(cfg.duration),
		Runs:        []runReport{},
	}
	if cfg.sharedKey() {
		rep.Keys = "one"
	}
	for _, r := range runs {
		rep.Quorum = r.quorum
		rep.Interrupted = rep.Interrupted || r.interrupted
		rep.Runs = append(rep.Runs, newRunReport(cfg, ns, r))
	}
	p, okP := rep.run(poolPipelined)
	q, okQ := rep.run(poolPlain)
	if okP && okQ {
		rep.Ratio = &ratioReport{
			RoundsPerSec: ratio(p.RoundsPerSec, q.RoundsPerSec),
			AcquireP50:   ratio(float64(p.Acquire.P50), float64(q.Acquire.P50)),
		}
	}
	if okP {
		for _, r := range rep.Runs {
			if r.Pool == poolPlain || r.Pool == poolGoredis || r.Pool == poolRueidis {
				rep.VsPipelined = append(rep.VsPipelined, vsPipelinedReport{
					Pool:           r.Pool,
					RoundsPerSec:   ratio(r.RoundsPerSec, p.RoundsPerSec),
					AcquireP50:     ratio(float64(r.Acquire.P50), float64(p.Acquire.P50)),
					AcquireP99:     ratio(float64(r.Acquire.P99), float64(p.Acquire.P99)),
					ClientCPUPerOp: ratio(float64(r.Cost.ClientCPUPerOp), float64(p.Cost.ClientCPUPerOp)),
					RedisCPUPerOp:  ratio(float64(r.Cost.RedisCPUPerOp), float64(p.Cost.RedisCPUPerOp)),
					AllocsPerRound: ratio(r.AllocsPerRound, p.AllocsPerRound),
				})
			}
		}
	}
	if poll, ok := rep.run(poolPolling); ok && cfg.mode == modeContended && poll.Contended != nil {
		for _, r := range rep.Runs {
			if r.Pool != poolPolling && r.Contended != nil {
				rep.VsPolling = append(rep.VsPolling, vsPolling(r, poll))
			}
		}
	}
	return rep
}

// run returns the run of the given pool kind.
func (rep *report) run(pool string) (runReport, bool) {
	for _, r := range rep.Runs {
		if r.Pool == pool {
			return r, true
		}
	}
	return runReport{}, false
}

// vsPolling compares a contended run with the polling kind's.
func vsPolling(r, poll runReport) vsPollingReport {
	v := vsPollingReport{
		Pool:                r.Pool,
		AcquisitionsPerSec:  ratio(r.Contended.PerSec, poll.Contended.PerSec),
		CommandsPerAcq:      ratio(r.Cost.CommandsPerOpPerNode, poll.Cost.CommandsPerOpPerNode),
		ScriptCallsPerAcq:   ratio(r.Cost.ScriptCallsPerOpPerNode, poll.Cost.ScriptCallsPerOpPerNode),
		WaitP99:             ratio(float64(r.Acquire.P99), float64(poll.Acquire.P99)),
		PollingAcquisitions: poll.Contended.Acquisitions,
	}
	if r.Cost.RedisKnown && poll.Cost.RedisKnown {
		v.RedisCPUPerAcq = ratio(float64(r.Cost.RedisCPUPerOp), float64(poll.Cost.RedisCPUPerOp))
		v.RedisUserCPUPerAcq = ratio(float64(r.Cost.RedisUserCPUPerOp), float64(poll.Cost.RedisUserCPUPerOp))
		v.RedisSysCPUPerAcq = ratio(float64(r.Cost.RedisSysCPUPerOp), float64(poll.Cost.RedisSysCPUPerOp))
	} else {
		v.CommandsPerAcq, v.ScriptCallsPerAcq = 0, 0
	}
	if r.Cost.ClientCPUKnown && poll.Cost.ClientCPUKnown {
		v.ClientCPUPerAcq = ratio(float64(r.Cost.ClientCPUPerOp), float64(poll.Cost.ClientCPUPerOp))
	}
	if r.IdleGap != nil && poll.IdleGap != nil {
		v.IdleGapP50 = ratio(float64(r.IdleGap.Latency.P50), float64(poll.IdleGap.Latency.P50))
	}
	return v
}

func newRunReport(cfg config, ns *nodes, r *runResult) runReport {
	rr := runReport{
		Pool:          r.pool,
		Elapsed:       duration(r.elapsed),
		Interrupted:   r.interrupted,
		Rounds:        r.rounds,
		RoundsPerSec:  perSec(int64(r.rounds), r.elapsed),
		Acquire:       summarize(r.acquire),
		Leftover:      r.leftover,
		LeftoverKnown: r.leftoverKnown,
		Unfinished:    r.unfinished,
		LongestWait:   duration(r.longestWait),
		Errors:        []errorReport{},
	}
	if cfg.mode != modeTakeover {
		release := summarize(r.release)
		rr.Release = &release
	}
	if r.rounds > 0 {
		rr.AllocsPerRound = math.Round(float64(r.mallocs)/float64(r.rounds)*10) / 10
	}
	if r.waitErr != nil {
		rr.WaitError = oneLine(r.waitErr.Error())
	}
	if r.connsKnown {
		rr.ConnsDialled, rr.ConnsOpen = &r.dials, &r.connsOpen
	}
	for _, e := range r.errors {
		rr.Errors = append(rr.Errors, errorReport{Kind: e.kind, Count: e.count, First: oneLine(e.first)})
	}
	if r.floor != nil {
		f := &floorReport{Latency: summarize(r.floor)}
		f.LockP50Ratio = ratio(float64(rr.Acquire.P50), float64(f.Latency.P50))
		if r.floorErr != nil {
			f.Error = oneLine(r.floorErr.Error())
		}
		rr.Floor = f
	}
	if cfg.mode == modeContended {
		c := &contendedReport{
			Acquisitions: r.acquire.count(),
			PerSec:       perSec(r.acquire.count(), r.elapsed),
			Handoff:      summarize(r.handoff),
			Held:         summarize(r.held),
			Idle:         summarize(r.idle),
			Reacquired:   r.reacquired,
			Overlaps:     r.overlaps,
		}
		c.Efficiency = math.Round(c.PerSec*cfg.hold.Seconds()*1000) / 1000
		if r.reference != nil && r.reference.count() > 0 {
			ref := summarize(r.reference)
			c.Reference = &ref
			if r.refUnlock != nil && r.refUnlock.count() > 0 {
				u := summarize(r.refUnlock)
				c.ReferenceUnlock = &u
			}
			if ref.P50 > 0 {
				ratio := math.Round(float64(c.Handoff.P50)/float64(ref.P50)*100) / 100
				idle := math.Round(float64(c.Idle.P50)/float64(ref.P50)*100) / 100
				c.HandoffRatio, c.IdleRatio = &ratio, &idle
			}
		}
		if r.referenceErr != nil {
			c.ReferenceError = oneLine(r.referenceErr.Error())
		}
		rr.Contended = c
	}
	rr.Cost = newCostReport(cfg, ns, r)
	switch {
	case cfg.mode == modeContended:
		rr.IdleGap = &idleGapReport{From: "unlock called", Latency: summarize(r.idle)}
	case cfg.mode == modeTakeover:
		rr.IdleGap = &idleGapReport{From: "key expired", Latency: summarize(r.takeover)}
	}
	if p := r.poll; p != nil {
		rr.Polling = &pollingReport{
			Attempts:       p.attempts,
			MaxAttempts:    p.maxAttempts,
			OverTries:      p.overTries,
			RedsyncTries:   pollTries,
			DelayMin:       duration(pollDelayMin),
			DelayMax:       duration(pollDelayMax - time.Millisecond),
			DriftFactor:    pollDriftFactor,
			AttemptTimeout: duration(time.Duration(float64(cfg.ttl) * pollTimeoutFactor)),
		}
		if p.acquisitions > 0 {
			rr.Polling.AttemptsPerAcquisition = math.Round(float64(p.attempts)/float64(p.acquisitions)*100) / 100
		}
	}
	if cfg.mode == modeTakeover {
		rr.Takeover = &takeoverReport{
			Acquisitions: r.acquire.count(),
			PerSec:       perSec(r.acquire.count(), r.elapsed),
			Latency:      summarize(r.takeover),
			Early:        r.early,
			Restarted:    r.restarted,
			DeadKeys:     r.deadKeys,
		}
	}
	if r.kind != nil {
		addKindReport(cfg, r, &rr)
	}
	if f := r.fault; f != nil {
		fr := &faultReport{
			Kind:     f.kind,
			Node:     f.node,
			Addr:     r.faultAddr,
			At:       duration(f.after),
			Happened: r.injected,
			Before:   summarize(r.before),
			After:    summarize(r.after),
		}
		if r.faultErr != nil {
			fr.Error = oneLine(r.faultErr.Error())
		}
		fr.P99Ratio = ratio(float64(fr.After.P99), float64(fr.Before.P99))
		rr.Fault = fr
	}
	return rr
}

// newCostReport puts what the window cost per operation.
func newCostReport(cfg config, ns *nodes, r *runResult) costReport {
	c := costReport{
		Op:                    "lock+unlock",
		Ops:                   int64(r.rounds),
		ClientCPUKnown:        r.clientCPUKnown,
		ClientIncludesServers: ns.inProcess,
		FloorExcluded:         r.floorExcluded,
		Nodes:                 []nodeCostReport{},
	}
	if cfg.sharedKey() {
		c.Op, c.Ops = "acquisition", r.acquire.count()
	}
	perOp := func(n int64) float64 {
		if c.Ops == 0 {
			return 0
		}
		return math.Round(float64(n)/float64(c.Ops)*1000) / 1000
	}
	timePerOp := func(d time.Duration) duration {
		if c.Ops == 0 {
			return 0
		}
		return duration(d / time.Duration(c.Ops))
	}
	if r.clientCPUKnown {
		c.ClientCPU, c.ClientCPUPerOp = duration(r.clientCPU), timePerOp(r.clientCPU)
	}
	c.HoldSpinPerOp = timePerOp(r.spin)
	var cpu cpuSplit
	var cmds, scripts int64
	switches := cpuSwitches{}
	for _, n := range r.servers {
		nr := nodeCostReport{Addr: n.addr, Known: n.known, Top: []commandCount{}}
		if !n.known {
			if n.err != nil {
				nr.Error = oneLine(n.err.Error())
			}
			c.Nodes = append(c.Nodes, nr)
			continue
		}
		c.RedisNodes++
		nr.CPU, nr.CPUPerOp = duration(n.cpu.total()), timePerOp(n.cpu.total())
		nr.UserCPUPerOp, nr.SysCPUPerOp = timePerOp(n.cpu.user), timePerOp(n.cpu.sys)
		nr.SwitchesPerOp = switches.add(n.switches, perOp)
		nr.Commands, nr.ScriptCalls, nr.ByCommand = n.total(), n.scripts(), n.cmds
		nr.CommandsPerOp, nr.ScriptCallsPerOp = perOp(nr.Commands), perOp(nr.ScriptCalls)
		for _, cmd := range n.top(topCommands) {
			nr.Top = append(nr.Top, commandCount{Command: cmd, Calls: n.cmds[cmd], PerOp: perOp(n.cmds[cmd])})
		}
		cpu.user += n.cpu.user
		cpu.sys += n.cpu.sys
		cmds += nr.Commands
		scripts += nr.ScriptCalls
		c.Nodes = append(c.Nodes, nr)
	}
	c.RedisKnown = c.RedisNodes > 0 && c.RedisNodes == len(r.servers)
	if c.RedisNodes > 0 {
		c.RedisCPU, c.RedisCPUPerOp = duration(cpu.total()), timePerOp(cpu.total())
		c.RedisUserCPUPerOp, c.RedisSysCPUPerOp = timePerOp(cpu.user), timePerOp(cpu.sys)
		c.SwitchesPerOpPerNode = switches.mean()
		c.CommandsPerOpPerNode = math.Round(perOp(cmds)/float64(c.RedisNodes)*1000) / 1000
		c.ScriptCallsPerOpPerNode = math.Round(perOp(scripts)/float64(c.RedisNodes)*1000) / 1000
	}
	return c
}

// sortErrors puts the most frequent kinds first.
func sortErrors(errs []*errorKind) {
	slices.SortFunc(errs, func(a, b *errorKind) int {
		if a.count != b.count {
			return b.count - a.count
		}
		return strings.Compare(a.kind, b.kind)
	})
}

// ratio returns a/b rounded to 3 decimals, or 0 when either is not
// positive.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return math.Round(a/b*1000) / 1000
}

// perSec returns n per second of d.
func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(n)/d.Seconds()*10) / 10
}

// writeJSON prints the report as one indented JSON object.
func writeJSON(w io.Writer, rep *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// oneLine keeps a multi-line error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cpuSwitches adds up the nodes' context switches per operation, over
// the nodes whose switches are known.
type cpuSwitches struct {
	sum   float64
	nodes int
}

// add counts a node's switches (-1: unknown) and returns them per
// operation (-1 when unknown).
func (s *cpuSwitches) add(n int64, perOp func(int64) float64) float64 {
	if n < 0 {
		return -1
	}
	v := perOp(n)
	s.sum += v
	s.nodes++
	return v
}

// mean returns the mean per node, -1 when no node's are known.
func (s *cpuSwitches) mean() float64 {
	if s.nodes == 0 {
		return -1
	}
	return math.Round(s.sum/float64(s.nodes)*100) / 100
}
