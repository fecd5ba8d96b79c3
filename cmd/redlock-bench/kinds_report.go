package main

import (
	"fmt"
	"io"
	"math"
	"time"
)

// semaphoreReport is what semaphore mode adds.
type semaphoreReport struct {
	Permits     int               `json:"permits"`
	Uncontended uncontendedReport `json:"uncontended"`
	// The contended phase: -workers workers (more than permits) Acquire,
	// waiting, hold for -hold and Unlock. Wait is the Acquire latency.
	Acquisitions int64   `json:"acquisitions"`
	PerSec       float64 `json:"acquisitions_per_s"`
	Efficiency   float64 `json:"efficiency"` // acquisitions/s × hold ÷ permits: 1 when no permit sat free while wanted
	Wait         summary `json:"wait"`
	Overlaps     int     `json:"overlaps"` // acquisitions that made more holders than permits: 0 unless the semaphore failed
}

// uncontendedReport is the uncontended phase of semaphore mode: one
// worker, semaphore and mutex rounds in turn on the same Client and nodes.
type uncontendedReport struct {
	Elapsed   duration `json:"elapsed_us"`
	Semaphore summary  `json:"semaphore"` // TryAcquire + Unlock
	Mutex     summary  `json:"mutex"`     // TryLock + Unlock
	P50Ratio  float64  `json:"p50_ratio"` // semaphore ÷ mutex
	P99Ratio  float64  `json:"p99_ratio"`
	MeanRatio float64  `json:"mean_ratio"`
}

// rwlockReport is what rwlock mode adds: readers and writers apart.
type rwlockReport struct {
	Readers int        `json:"readers"`
	Writers int        `json:"writers"`
	Reader  sideReport `json:"reader"` // RLock
	Writer  sideReport `json:"writer"` // Lock
	// ToReaders and ToWriter are the hand-offs: from the Unlock call that
	// left the lock to no one to the next RLock's (the first of a readers'
	// turn) or Lock's return.
	ToReaders summary `json:"handoff_to_readers"`
	ToWriter  summary `json:"handoff_to_writer"`
	Overlaps  int     `json:"overlaps"` // a writer with anyone, or a reader with a writer: 0 unless the lock failed
}

// sideReport is the readers' or the writers' figures.
type sideReport struct {
	Acquisitions int64   `json:"acquisitions"`
	PerWorker    float64 `json:"acquisitions_per_worker"`
	PerSec       float64 `json:"acquisitions_per_s"`
	Wait         summary `json:"wait"` // from calling RLock or Lock to its return
}

// electionReport is what election mode adds. A succession is the time
// from a leader's term ending (its death, or its Unlock being called) to
// the next leader's Campaign returning.
type electionReport struct {
	Candidates int     `json:"candidates"`
	Wanted     int     `json:"successions_wanted"` // -terms
	Leaders    int     `json:"leaders"`            // Campaign wins
	Death      summary `json:"death"`              // death → next leader
	Resign     summary `json:"resign"`             // Unlock called → next leader
	// DeathBeyondTTL is the death row's p50 and p99 less the TTL: the
	// target is p99 within one round beyond it.
	DeathP50BeyondTTL duration `json:"death_p50_beyond_ttl_us"`
	DeathP99BeyondTTL duration `json:"death_p99_beyond_ttl_us"`
	Lost              int      `json:"lost"`             // terms that ended by themselves first (not measured)
	TermRegressions   int      `json:"term_regressions"` // terms not above the one before: 0 unless fencing failed
}

// addKindReport adds what a semaphore, rwlock or election run measured
// to rr.
func addKindReport(cfg config, r *runResult, rr *runReport) {
	k := r.kind
	switch cfg.mode {
	case modeSemaphore:
		rr.Semaphore = &semaphoreReport{
			Permits:      cfg.permits,
			Uncontended:  newUncontended(k),
			Acquisitions: r.acquire.count(),
			PerSec:       perSec(r.acquire.count(), r.elapsed),
			Wait:         summarize(r.acquire),
			Overlaps:     k.overlaps,
		}
		rr.Semaphore.Efficiency = math.Round(rr.Semaphore.PerSec*cfg.hold.Seconds()/float64(cfg.permits)*1000) / 1000
	case modeRWLock:
		rr.RWLock = &rwlockReport{Readers: cfg.readers, Writers: cfg.writers,
			Reader: newSide(k.reader, cfg.readers, r.elapsed), Writer: newSide(k.writer, cfg.writers, r.elapsed),
			ToReaders: summarize(k.toReaders), ToWriter: summarize(k.toWriter), Overlaps: k.overlaps}
	case modeElection:
		rr.Election = newElectionReport(cfg, k)
	}
}

// newUncontended compares the uncontended phase's rounds.
func newUncontended(k *kindResult) uncontendedReport {
	u := uncontendedReport{Elapsed: duration(k.uncontended), Semaphore: summarize(k.semRound), Mutex: summarize(k.mutexRound)}
	u.P50Ratio = ratio(float64(u.Semaphore.P50), float64(u.Mutex.P50))
	u.P99Ratio = ratio(float64(u.Semaphore.P99), float64(u.Mutex.P99))
	u.MeanRatio = ratio(float64(u.Semaphore.Mean), float64(u.Mutex.Mean))
	return u
}

// newSide gives the readers' or the writers' figures, of workers workers.
func newSide(r *recorder, workers int, elapsed time.Duration) sideReport {
	n := r.acquire.count()
	return sideReport{Acquisitions: n, PerWorker: ratio(float64(n), float64(workers)), PerSec: perSec(n, elapsed), Wait: summarize(r.acquire)}
}

func newElectionReport(cfg config, k *kindResult) *electionReport {
	s := k.succession
	e := &electionReport{Candidates: cfg.workers, Wanted: cfg.terms,
		Death: summarize(k.death), Resign: summarize(k.resign)}
	if s != nil {
		e.Leaders, e.Lost, e.TermRegressions = s.leaders, s.lost, s.regressions
	}
	if e.Death.Count > 0 {
		e.DeathP50BeyondTTL = e.Death.P50 - duration(cfg.ttl)
		e.DeathP99BeyondTTL = e.Death.P99 - duration(cfg.ttl)
	}
	return e
}

// writeKindRun prints a semaphore, rwlock or election run and reports
// true, or reports false for the other modes.
func writeKindRun(w io.Writer, rep *report, r runReport) bool {
	switch {
	case r.Semaphore != nil:
		writeSemaphore(w, rep, r.Semaphore)
	case r.RWLock != nil:
		writeRWLock(w, rep, r.RWLock)
	case r.Election != nil:
		writeElection(w, rep, r.Election)
	default:
		return false
	}
	fmt.Fprintln(w)
	writeCost(w, rep, r.Cost)
	if r.ConnsDialled != nil {
		fmt.Fprintf(w, "conns     %d dialled while measuring, %d open at the end (all nodes)\n", *r.ConnsDialled, *r.ConnsOpen)
	}
	writeUnfinished(w, rep, r)
	writeErrors(w, r.Errors)
	return true
}

// writeSemaphore prints semaphore mode's two phases.
func writeSemaphore(w io.Writer, rep *report, s *semaphoreReport) {
	u := s.Uncontended
	fmt.Fprintf(w, "uncontended 1 worker, 1 client, %s: semaphore (%d permits) TryAcquire+Unlock and mutex TryLock+Unlock rounds in turn\n\n",
		formatDuration(time.Duration(u.Elapsed)), s.Permits)
	writeRows(w, []latencyRow{{"semaphore", u.Semaphore}, {"mutex", u.Mutex}})
	fmt.Fprintf(w, "\nratio     semaphore/mutex round: p50 %s, mean %s, p99 %s\n",
		formatRatio(u.P50Ratio), formatRatio(u.MeanRatio), formatRatio(u.P99Ratio))
	fmt.Fprintf(w, "\ncontended %s on %s, Acquire (waiting) with %d permits, hold %v\n\n",
		plural(rep.Workers, "worker"), plural(rep.Clients, "client"), s.Permits, time.Duration(rep.Hold))
	writeRows(w, []latencyRow{{"wait", s.Wait}})
	fmt.Fprintf(w, "\n          %d acquisitions (%.1f/s), efficiency %.2f (acquisitions/s × hold ÷ permits); wait p99 %s; %d times more holders than permits\n",
		s.Acquisitions, s.PerSec, s.Efficiency, formatSummary(s.Wait, s.Wait.P99), s.Overlaps)
}

// writeRWLock prints rwlock mode's readers and writers.
func writeRWLock(w io.Writer, rep *report, r *rwlockReport) {
	fmt.Fprintf(w, "rwlock    %s (RLock) and %s (Lock) on one read-write lock, a client each, hold %v\n\n",
		plural(r.Readers, "reader"), plural(r.Writers, "writer"), time.Duration(rep.Hold))
	writeRows(w, []latencyRow{{"reader wait", r.Reader.Wait}, {"writer wait", r.Writer.Wait},
		{"to readers", r.ToReaders}, {"to a writer", r.ToWriter}})
	fmt.Fprintln(w, "          hand-off rows (to readers, to a writer): from the Unlock call that left the lock to no one to the next RLock or Lock returning")
	fmt.Fprintf(w, "\nreaders   %d acquisitions (%.1f/s, %.1f a reader), wait p99 %s\n", r.Reader.Acquisitions, r.Reader.PerSec, r.Reader.PerWorker, formatSummary(r.Reader.Wait, r.Reader.Wait.P99))
	fmt.Fprintf(w, "writers   %d acquisitions (%.1f/s, %.1f a writer), wait p99 %s\n", r.Writer.Acquisitions, r.Writer.PerSec, r.Writer.PerWorker, formatSummary(r.Writer.Wait, r.Writer.Wait.P99))
	fmt.Fprintf(w, "          %d holds that broke the lock's rule (a writer with anyone, a reader with a writer)\n", r.Overlaps)
}

// writeElection prints election mode's successions.
func writeElection(w io.Writer, rep *report, e *electionReport) {
	fmt.Fprintf(w, "election  %d candidates, a client each; each leader leads for %v, then resigns (Unlock) or dies (its Client closed: no release, no extension), in turn; ttl %v\n\n",
		e.Candidates, time.Duration(rep.Hold), time.Duration(rep.TTL))
	writeRows(w, []latencyRow{{"death", e.Death}, {"resign", e.Resign}})
	fmt.Fprintf(w, "\nsuccession from a leader's end to the next leader's Campaign returning: %d of %d measured, %d leaders\n",
		e.Death.Count+e.Resign.Count, e.Wanted, e.Leaders)
	if e.Death.Count > 0 {
		fmt.Fprintf(w, "          death beyond the TTL: p50 %s, p99 %s\n",
			formatSigned(time.Duration(e.DeathP50BeyondTTL)), formatSigned(time.Duration(e.DeathP99BeyondTTL)))
	}
	fmt.Fprintf(w, "          %d terms lost by themselves first (not measured), %d terms not above the one before\n", e.Lost, e.TermRegressions)
}

// formatSigned prints a duration that may be negative.
func formatSigned(d time.Duration) string {
	if d < 0 {
		return "-" + formatDuration(-d)
	}
	return "+" + formatDuration(d)
}
