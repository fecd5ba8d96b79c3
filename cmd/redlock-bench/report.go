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
	Ratio       *ratioReport `json:"pipelined_vs_plain,omitempty"` // with -pool both
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
	AllocsPerRound float64          `json:"allocs_per_round"` // whole process
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
		rep.Runs = append(rep.Runs, newRunReport(cfg, r))
	}
	if len(rep.Runs) == 2 && rep.Runs[0].Pool == poolPipelined && rep.Runs[1].Pool == poolPlain {
		p, q := rep.Runs[0], rep.Runs[1]
		rep.Ratio = &ratioReport{
			RoundsPerSec: ratio(p.RoundsPerSec, q.RoundsPerSec),
			AcquireP50:   ratio(float64(p.Acquire.P50), float64(q.Acquire.P50)),
		}
	}
	return rep
}

func newRunReport(cfg config, r *runResult) runReport {
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
